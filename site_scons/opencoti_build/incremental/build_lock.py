"""One build at a time per build directory: an flock on ``BUILD_DIR/.lock`` held for the whole run.

The kernel drops an flock when its holder exits, however it exits (SIGKILL included), so a lock is
never left behind; the file only names the holder's pid for the waiting run's message. The build's
commands inherit the lock (``pass_fds=held_fds()``): a compiler that outlives a killed scons keeps the
directory locked until it exits, so the next run cannot race with its late writes.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from opencoti_build import locks
from opencoti_build.errors import UserError, os_error_line
from opencoti_build.incremental import private

LOCK_NAME = ".lock"
# lock file -> the fd this process holds it through: an OS resource of the process (released only when it
# exits), not state of one build, so it lives as long as the process does
_held: dict[str, int] = {}


def _open(path: Path, build_dir: Path | str) -> int:
    try:
        os.makedirs(build_dir, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, private.FILE_MODE)
    except OSError as exc:
        raise UserError(os_error_line(exc, f"BUILD_DIR={build_dir}: cannot take the build lock")) from None
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, private.FILE_MODE)  # bookkeeping: the user's alone (an older build made it 0644)
    except OSError:
        pass  # another user's: the build server refuses such a BUILD_DIR (opencoti_build/server/boundary.py)
    return fd


def acquire(build_dir: Path | str, *, wait: bool = True, say: Callable[[str], None] = print,
            poll: float = 0.2) -> int:
    """Lock ``build_dir`` for this process and return the lock's fd (keep it open for the whole run).

    When another run holds it: with ``wait`` say so once and wait for it, else refuse (UserError).
    """
    path = Path(build_dir) / LOCK_NAME
    if str(path) in _held:
        return _held[str(path)]  # taken already (SConstruct's fast path tried it first)
    said = False
    while True:
        fd = _open(path, build_dir)
        while not locks.try_exclusive(fd):
            holder = locks.named_holder(fd)
            who = f"pid {holder}" if holder else "another process"
            if not wait:
                os.close(fd)
                raise UserError(f"BUILD_DIR={build_dir} is in use by another build ({who}); "
                                "wait for it to finish or use another BUILD_DIR")
            if not said:
                say(f"waiting for the build running in {build_dir} ({who}) to finish")
                said = True
            time.sleep(poll)
        if not locks.replaced(path, fd):
            break
        os.close(fd)  # the file we locked was removed meanwhile (BUILD_DIR deleted): lock the one there now
    locks.name_holder(fd)
    _held[str(path)] = fd
    atexit.register(_say_if_lost, path, fd)
    return fd


def try_acquire(build_dir: Path | str) -> int | None:
    """The lock when no other run holds it (and ``build_dir`` exists), else None; never waits or creates."""
    if not os.path.isdir(build_dir):
        return None
    try:
        return acquire(build_dir, wait=False, say=lambda line: None)
    except UserError:
        return None


@contextlib.contextmanager
def briefly(build_dir: Path | str) -> Iterator[bool]:
    """Hold ``build_dir``'s lock for a moment when no run holds it (True), else don't (False); never waits or
    creates. The build server answers a null request under it, as the fast path does, and keeps no lock after."""
    fd = -1
    try:
        # read-only: closing a file opened for writing is an inotify event, which a build server would take
        # for a change in BUILD_DIR
        fd = os.open(Path(build_dir) / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
        held = locks.try_exclusive(fd) and not locks.replaced(Path(build_dir) / LOCK_NAME, fd)
    except OSError:  # no BUILD_DIR or lock file yet
        held = False
    try:
        yield held
    finally:
        if fd >= 0:
            os.close(fd)


def holder(build_dir: Path | str) -> int | None:
    """The pid the lock file names: the last process that took ``build_dir``'s lock (it may have ended since)."""
    return locks.named_in(Path(build_dir) / LOCK_NAME)


def holder_now(build_dir: Path | str) -> int | None:
    """The pid that holds ``build_dir``'s lock at this moment, None when no process does (locks.holder_now): for
    the moment between a run's lock and its pid written, :func:`holder` still names the last holder."""
    return locks.holder_now(Path(build_dir) / LOCK_NAME)


def release(build_dir: Path | str) -> None:
    """Let go of ``build_dir``'s lock before the process exits (a refused run, once it removed the directory
    it created): a run waiting for it takes it then, on a new file if the old one is gone."""
    fd = _held.pop(str(Path(build_dir) / LOCK_NAME), None)
    if fd is not None:
        os.close(fd)


def _say_if_lost(path: Path, fd: int) -> None:
    if _held.get(str(path)) == fd and locks.replaced(path, fd):  # e.g. BUILD_DIR deleted mid-run: another run could have taken a new lock
        sys.stderr.write(f"scons: warning: the build lock {path} was removed during this run (was BUILD_DIR "
                         "deleted?), so another build may have run at the same time; run scons again\n")


def held_fds() -> tuple[int, ...]:
    """The descriptors of the locks this process holds: subprocess's ``pass_fds`` hands them to a child."""
    return tuple(_held.values())
