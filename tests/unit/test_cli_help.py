"""Every `python3 -m opencoti_build` command's --help is plain text: no reST or Markdown markup (``serve`` showed its
docstring's double backquotes)."""
from __future__ import annotations

import pytest

from opencoti_build import cli


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["inspect", "--help"], ["verify", "--help"],
                                  ["pin", "--help"]])
def test_help_is_plain_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    out = capsys.readouterr().out
    assert stopped.value.code == 0 and out.startswith("usage: "), out
    assert "`" not in out and ":func:" not in out and ":class:" not in out, out
