"""One build at a time per build directory: an flock on ``BUILD_DIR/.lock`` held for the whole run.

The kernel drops an flock when its holder exits, however it exits (SIGKILL included), so a lock is
never left behind; the file only names the holder's pid for the waiting run's message. The build's
commands inherit the lock (``pass_fds=held_fds()``): a compiler that outlives a killed scons keeps the
directory locked until it exits, so the next run cannot race with its late writes.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from opencoti_build.errors import UserError, os_error_line
from opencoti_build.incremental import private

LOCK_NAME = ".lock"
# lock file -> the fd this process holds it through: an OS resource of the process (released only when it
# exits), not state of one build, so it lives as long as the process does
_held: dict[str, int] = {}


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


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
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(fd)
                who = f"pid {holder}" if holder else "another process"
                if not wait:
                    os.close(fd)
                    raise UserError(f"BUILD_DIR={build_dir} is in use by another build ({who}); "
                                    "wait for it to finish or use another BUILD_DIR") from None
                if not said:
                    say(f"waiting for the build running in {build_dir} ({who}) to finish")
                    said = True
                time.sleep(poll)
        if not lost(path, fd):
            break
        os.close(fd)  # the file we locked was removed meanwhile (BUILD_DIR deleted): lock the one there now
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
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
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held = not lost(Path(build_dir) / LOCK_NAME, fd)
    except OSError:  # no BUILD_DIR or lock file yet, or another run holds it
        held = False
    try:
        yield held
    finally:
        if fd >= 0:
            os.close(fd)


def holder(build_dir: Path | str) -> int | None:
    """The pid the lock file names: the last process that took ``build_dir``'s lock (it may have ended since)."""
    try:
        fd = os.open(Path(build_dir) / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        named = _holder(fd)
    finally:
        os.close(fd)
    return int(named) if named else None


def holder_now(build_dir: Path | str) -> int | None:
    """The pid that holds ``build_dir``'s lock at this moment, None when no process does: the kernel's own record
    (/proc/locks). The file's pid is written just after the lock is taken, so for that moment :func:`holder`
    still names the last holder (or nobody); this never does. Where /proc/locks cannot be read: :func:`holder`."""
    try:
        st = os.stat(Path(build_dir) / LOCK_NAME)
    except OSError:
        return None
    try:
        with open("/proc/locks", encoding="ascii") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return holder(build_dir)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE <pid> <maj>:<min>:<inode> 0 EOF"; a waiter's line has "->"
        fields = line.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == key:
            return int(fields[4])
    return None


def lost(path: Path, fd: int) -> bool:
    """True when ``path`` is no longer the file locked through ``fd`` (removed or replaced meanwhile)."""
    try:
        return os.stat(path).st_ino != os.fstat(fd).st_ino
    except OSError:
        return True


def release(build_dir: Path | str) -> None:
    """Let go of ``build_dir``'s lock before the process exits (a refused run, once it removed the directory
    it created): a run waiting for it takes it then, on a new file if the old one is gone."""
    fd = _held.pop(str(Path(build_dir) / LOCK_NAME), None)
    if fd is not None:
        os.close(fd)


def _say_if_lost(path: Path, fd: int) -> None:
    if _held.get(str(path)) == fd and lost(path, fd):  # e.g. BUILD_DIR deleted mid-run: another run could have taken a new lock
        sys.stderr.write(f"scons: warning: the build lock {path} was removed during this run (was BUILD_DIR "
                         "deleted?), so another build may have run at the same time; run scons again\n")


def held_fds() -> tuple[int, ...]:
    """The descriptors of the locks this process holds: subprocess's ``pass_fds`` hands them to a child."""
    return tuple(_held.values())
