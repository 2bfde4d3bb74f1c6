"""`scons -n` writes nothing at all (issue 45), through the real scons on the miniature tree: not in a BUILD_DIR that
has no signature database yet (SCons's dblite makes its file on opening), and not after a build (the record read,
none rewritten). test_newcomer.py has the dry run on a fresh checkout and over a BUILD_DIR the ROCm probe wrote in."""
from __future__ import annotations

from pathlib import Path

from opencoti_build.report import summary

from scons_runs import scons


def everything(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root``, directories included, with its mode, size and mtime."""
    return {str(p.relative_to(root)): (p.lstat().st_mode, p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in root.rglob("*")}


def test_a_dry_run_makes_no_signature_database_and_rewrites_none(tmp_path: Path, tree: Path) -> None:
    root = tmp_path / "b"
    (root / "out" / "tmp").mkdir(parents=True)  # BUILD_DIR as a run killed before its first signature left it
    (root / "out" / ".lock").touch()
    (root / "home").mkdir()  # the HOME scons_runs gives each run
    before = everything(root)
    dry = scons("-n", f"SRC={tree}", build=root)
    assert dry.stdout.splitlines()[-1] == ("would compile 50, restore 0 from cache, 0 up to date "
                                           "(dry run: nothing was written)"), dry.stdout
    assert everything(root) == before  # no BUILD_DIR/.sconsign.dblite

    assert summary.parse(scons(f"SRC={tree}", build=root).stdout)["compiled"] == 50
    source = tree / "llamafile" / "llamafile.c"
    source.write_text(source.read_text() + "\nint dry_run_probe;\n")
    before = everything(root)
    again = scons("-n", f"SRC={tree}", build=root)  # reads the last build's signatures: one TU and what it makes
    assert again.stdout.splitlines()[-1] == ("would compile 4, restore 0 from cache, 46 up to date "
                                             "(dry run: nothing was written)"), again.stdout
    assert everything(root) == before
