"""opencoti_build.tempfiles: a live writer's temporary is never swept, a dead writer's always is."""
from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from opencoti_build import tempfiles


def test_a_dead_writers_temporary_is_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    live_fd, live = tempfiles.create(tmp_path / "entry")
    dead_fd, dead = tempfiles.create(tmp_path / "entry")
    os.close(dead_fd)  # its lock goes with it, as a killed writer's does
    other = tmp_path / ".other.x.tmp"
    other.write_bytes(b"")
    assert tempfiles.remove_stale(tmp_path, "entry") == [dead]
    assert live.exists() and other.exists() and not dead.exists()
    os.close(live_fd)


def test_a_temporary_swept_before_its_writer_locked_it_is_replaced(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Another build's sweep in the moment between mkstemp and flock removes the new file as a dead writer's; the
    writer must not go on with a name that no longer holds its file (its rename into place would fail)."""
    made: list[str] = []
    mkstemp = tempfile.mkstemp

    def mkstemp_then_a_sweep(**kw: str) -> tuple[int, str]:
        fd, name = mkstemp(**kw)
        made.append(name)
        if len(made) == 1:
            assert tempfiles.remove_stale(tmp_path) == [Path(name)]  # the unlocked new file looks dead
        return fd, name

    monkeypatch.setattr(tempfiles.tempfile, "mkstemp", mkstemp_then_a_sweep)
    fd, path = tempfiles.create(tmp_path / "entry")
    assert len(made) == 2 and path == Path(made[1])
    os.write(fd, b"whole")
    os.replace(path, tmp_path / "entry")
    os.close(fd)
    assert (tmp_path / "entry").read_bytes() == b"whole"


def test_writers_beside_a_sweeping_thread_keep_every_temporary(tmp_path: Path) -> None:
    """Many writes racing a thread that sweeps the same directory without pause (flock locks belong to each open
    file, so a thread sweeps as another build would; a tiny switch interval interleaves them): every rename lands."""
    done = threading.Event()

    def sweep() -> None:
        while not done.is_set():
            tempfiles.remove_stale(tmp_path)

    sweeper = threading.Thread(target=sweep)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    sweeper.start()
    try:
        for n in range(3000):
            fd, path = tempfiles.create(tmp_path / "entry")
            os.write(fd, str(n).encode())
            os.replace(path, tmp_path / "entry")  # FileNotFoundError: the sweeper took a live writer's file
            os.close(fd)
    finally:
        done.set()
        sweeper.join()
        sys.setswitchinterval(interval)
    assert (tmp_path / "entry").read_text() == "2999"
