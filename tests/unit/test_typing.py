"""mypy over both packages (pyproject.toml's [tool.mypy]), in-process: the annotations are checked, not decoration."""
from __future__ import annotations

from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[2]


def test_the_packages_type_check(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)  # the configuration and its paths are the project's
    out, err, status = api.run([])
    assert (status, err) == (0, ""), out
    assert out.startswith("Success: no issues found")
