"""flock, in one place: the build lock, the build server's configuration lock, a writer's temporary file and the
cosmocc download all hold an exclusive flock on a file while they work.

The kernel drops an flock when its holder exits, however it exits (SIGKILL included), so no lock outlives its
process and a lock that can be taken means its last holder is gone. A lock belongs to an open file description:
two opens of the same file conflict even within one process. A lock file may name its holder's pid, for another
process's message; the kernel's own record of who holds it now is /proc/locks.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

PathName = str | os.PathLike[str]


def try_exclusive(fd: int) -> bool:
    """Take the exclusive lock on ``fd``'s file when no other open file holds it (True); never waits (False)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def exclusive(fd: int) -> None:
    """Take the exclusive lock on ``fd``'s file, waiting for its holder to let go."""
    fcntl.flock(fd, fcntl.LOCK_EX)


@contextlib.contextmanager
def holding(path: PathName, mode: int) -> Iterator[int]:
    """``path`` (created with ``mode`` when absent) locked for the block, once its holder lets go: its descriptor."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        exclusive(fd)
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _read_only(path: PathName) -> Iterator[int | None]:
    """``path`` open for reading for the block (closing a file opened for writing is an inotify event, which a build
    server would take for a change); None when it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def is_free(path: PathName) -> bool:
    """Whether no process holds ``path``'s lock (an absent file is free); the lock is not kept."""
    with _read_only(path) as fd:
        return fd is None or try_exclusive(fd)


def name_holder(fd: int) -> None:
    """Write this process's pid into the lock file it has just locked, for a waiting process's message."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def named_holder(fd: int) -> int | None:
    """The pid the lock file names: its last holder (which may have ended since); None when it names none."""
    try:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def replaced(path: PathName, fd: int) -> bool:
    """Whether ``path`` is no longer the file locked through ``fd`` (removed or replaced since it was opened)."""
    try:
        return os.stat(path).st_ino != os.fstat(fd).st_ino
    except OSError:
        return True


def holder_now(path: PathName) -> int | None:
    """The pid that holds ``path``'s lock at this moment, None when no process does, from the kernel's own record
    (/proc/locks): a holder writes its pid just after it takes the lock, so for that moment the file still names
    the last one. Where /proc/locks cannot be read: the pid the file names."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    try:
        with open("/proc/locks", encoding="ascii") as table:
            lines = table.read().splitlines()
    except OSError:
        return named_in(path)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE <pid> <maj>:<min>:<inode> 0 EOF"; a waiter's line has "->"
        fields = line.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == key:
            return int(fields[4])
    return None


def named_in(path: PathName) -> int | None:
    """The pid the lock file at ``path`` names (:func:`named_holder`); None when there is no such file."""
    with _read_only(path) as fd:
        return None if fd is None else named_holder(fd)
