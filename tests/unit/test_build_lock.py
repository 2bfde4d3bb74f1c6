"""The build lock (opencoti_build.incremental.build_lock) on its own: who waits, who refuses, a lock that is lost.

In-process checks of the core here; the real builds and tools: tests/integration/test_build_lock.py.
"""
from __future__ import annotations

import atexit
from pathlib import Path

from opencoti_build.incremental import build_lock


def test_a_removed_lock_file_is_noticed(tmp_path: Path, capsys) -> None:
    fd = build_lock.acquire(tmp_path / "b", say=lambda line: None)
    (tmp_path / "b" / ".lock").unlink()
    assert build_lock.lost(tmp_path / "b" / ".lock", fd)
    atexit.unregister(build_lock._say_if_lost)  # said here, not when pytest exits
    build_lock._say_if_lost(tmp_path / "b" / ".lock", fd)
    assert capsys.readouterr().err == (
        f"scons: warning: the build lock {tmp_path / 'b' / '.lock'} was removed during this run (was BUILD_DIR "
        "deleted?), so another build may have run at the same time; run scons again\n")
