"""The build lock (opencoti_build.incremental.build_lock) on its own: who waits, who refuses, a lock that is lost.

In-process checks of the core here; the real builds and tools: tests/integration/test_build_lock.py.
"""
from __future__ import annotations

import atexit
import fcntl
import os
from pathlib import Path

from opencoti_build import locks
from opencoti_build.incremental import build_lock, fresh_dirs


def test_a_removed_lock_file_is_noticed(tmp_path: Path, capsys) -> None:
    fd = build_lock.acquire(tmp_path / "b", say=lambda line: None)
    (tmp_path / "b" / ".lock").unlink()
    assert locks.replaced(tmp_path / "b" / ".lock", fd)
    atexit.unregister(build_lock._say_if_lost)  # said here, not when pytest exits
    build_lock._say_if_lost(tmp_path / "b" / ".lock", fd)
    assert capsys.readouterr().err == (
        f"scons: warning: the build lock {tmp_path / 'b' / '.lock'} was removed during this run (was BUILD_DIR "
        "deleted?), so another build may have run at the same time; run scons again\n")


def test_a_refused_run_removes_what_it_created_and_never_another_runs_cache_entries(tmp_path: Path) -> None:
    build, cache = tmp_path / "b" / "out", tmp_path / ".opencoti" / "cache"
    (tmp_path / "kept").mkdir()
    fresh = fresh_dirs.FreshDirs([build, tmp_path / "kept"], {cache: ["config"]})
    build.mkdir(parents=True)
    (build / ".lock").write_text("1\n")
    cache.mkdir(parents=True)
    (cache / "config").write_text("{}")
    fresh.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]  # b/ and .opencoti/ went whole, kept/ stayed

    fresh = fresh_dirs.FreshDirs([build], {cache: ["config"]})
    cache.mkdir(parents=True)
    (cache / "config").write_text("{}")
    (cache / "AB").mkdir()
    (cache / "AB" / "ab12").write_text("another run's entry, pushed meanwhile")
    fresh.undo()
    assert [p.relative_to(tmp_path) for p in sorted(tmp_path.rglob("*")) if p.is_file()] == [
        Path(".opencoti/cache/AB/ab12")]  # only the config this run wrote is gone


def test_the_lock_file_names_its_last_holder_and_the_kernel_its_holder_now(tmp_path: Path) -> None:
    """A build server tells its own reader (which holds the lock while it reads) from another run by its pid."""
    assert build_lock.holder(tmp_path / "b") is None  # no lock file yet
    assert build_lock.holder_now(tmp_path / "b") is None
    build_lock.acquire(tmp_path / "b", say=lambda line: None)
    try:
        assert build_lock.holder(tmp_path / "b") == build_lock.holder_now(tmp_path / "b") == os.getpid()
    finally:
        build_lock.release(tmp_path / "b")
        atexit.unregister(build_lock._say_if_lost)
    assert build_lock.holder(tmp_path / "b") == os.getpid()  # the file names the last holder
    assert build_lock.holder_now(tmp_path / "b") is None  # nobody holds it
    # the moment between the flock and the pid written: the file names the last holder, the kernel the new one
    (tmp_path / "b" / build_lock.LOCK_NAME).write_text("1\n")
    fd = os.open(tmp_path / "b" / build_lock.LOCK_NAME, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert build_lock.holder(tmp_path / "b") == 1
        assert build_lock.holder_now(tmp_path / "b") == os.getpid()
    finally:
        os.close(fd)
