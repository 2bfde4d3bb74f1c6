"""The code that writes artifacts and manifests is their input: an edit to any module of it redoes them."""
from __future__ import annotations

from pathlib import Path

from opencoti_build.report import summary

from packaging_support import PLEDGE, as_llamafile
from scons_runs import MINI_TREE, MINI_VERSION, copy_checkout, scons


def rerun_steps(project: Path, build: Path, host: Path) -> list[str]:
    proc = scons("package", f"SRC={MINI_TREE}", "CPU_ONLY=1", "ARCH=x86_64", f"HOST={host}", build=build,
                 project=project)
    return sorted(line.split()[0] for line in summary.unprefixed(proc.stdout) if line.startswith(("PACKAGE ", "MANIFEST ")))


def edit(path: Path) -> None:
    path.write_text(path.read_text() + "\n# edited\n")


def test_an_edit_to_the_code_redoes_what_it_writes(tmp_path: Path) -> None:
    (tmp_path / "checkout").mkdir()
    project = copy_checkout(tmp_path / "checkout")
    host = as_llamafile(PLEDGE, tmp_path / "pledge", MINI_VERSION)
    build = tmp_path / "b"
    assert rerun_steps(project, build, host) == ["MANIFEST", "PACKAGE"]  # the first run
    assert rerun_steps(project, build, host) == []  # nothing changed
    edit(project / "site_scons" / "opencoti_build" / "formats" / "spirv.py")  # a reader the manifest uses
    assert rerun_steps(project, build, host) == ["MANIFEST"]
    edit(project / "site_scons" / "opencoti_build" / "bulkcopy" / "zipwriter.py")  # the artifact's writer
    assert rerun_steps(project, build, host) == ["MANIFEST", "PACKAGE"]
