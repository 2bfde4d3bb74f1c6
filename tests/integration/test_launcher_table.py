"""opencoti_build.cache.launchers without SCons: finding a launcher, its environment, its counters; the stand-in
driver running each half of a fat compile behind it."""
from __future__ import annotations

import stat
from pathlib import Path

from opencoti_build.cache import launchers
from opencoti_build.cosmo import fatcc


def executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_stand_in_runs_each_half_behind_the_launcher(tmp_path: Path, monkeypatch) -> None:
    log = tmp_path / "launched"
    launcher = executable(tmp_path / "launcher", f'#!/bin/sh\necho "$1" >> {log}\nexec "$@"\n')
    (tmp_path / "a.c").write_text("int f(void) { return 1; }\n")
    monkeypatch.setenv(launchers.FAT_LAUNCHER_ENV, str(launcher))
    assert fatcc.main("cosmocc", ["-c", "-o", str(tmp_path / "a.o"), str(tmp_path / "a.c")]) == 0
    assert sorted(log.read_text().split()) == ["aarch64-linux-gnu-gcc", "gcc"]
    assert (tmp_path / ".aarch64" / "a.o").is_file()
