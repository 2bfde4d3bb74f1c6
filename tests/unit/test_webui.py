"""The server's web UI (opencoti_build.tree.webui): a part of the assets is one line.

In-process checks of the core here; the real builds and tools: tests/integration/test_webui.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from opencoti_build.tree import webui

from samples import give_webui_assets


def test_part_of_the_assets_is_one_line(tmp_path: Path) -> None:
    give_webui_assets(tmp_path)
    (tmp_path / webui.PUBLIC / "bundle.css").unlink()
    with pytest.raises(webui.WebUiError) as caught:
        webui.enabled(tmp_path)
    assert "\n" not in str(caught.value) and "but not bundle.css" in str(caught.value)
