"""The pinned sources and the provisioned cosmocc (opencoti_build.config.provision): one-line refusals.

In-process checks of the core here; the real builds and tools: tests/integration/test_provision.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from opencoti_build.config import buildvars, provision, upstream_pin

from scons_runs import PROJECT

VERSION = upstream_pin.COSMOCC_VERSION


def test_a_fresh_clone_is_told_to_init_the_submodule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buildvars, "PROJECT", tmp_path)
    with pytest.raises(buildvars.SourceTreeError) as caught:
        buildvars.checked_source_tree({"SRC": buildvars.DEFAULT_SRC})
    assert f"git submodule update --init --recursive {upstream_pin.LLAMAFILE_PATH}" in str(caught.value)
    assert upstream_pin.LLAMAFILE_COMMIT[:7] in str(caught.value)


def test_an_unusable_pinned_dir_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "home" / VERSION / "bin").mkdir(parents=True)
    with pytest.raises(provision.ProvisionError) as caught:
        provision.select("", PROJECT, {provision.TEST_HOME: str(tmp_path / "home")})
    assert str(caught.value).startswith(f"{tmp_path / 'home' / VERSION} is no usable cosmocc (")
    assert "remove it to download it again" in str(caught.value) and str(caught.value).endswith(provision.WAYS_OUT)
