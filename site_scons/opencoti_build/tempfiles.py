"""Temporary files written beside their destination and renamed into place, and the sweep of dead ones.

A writer holds an flock on its temporary file for as long as it writes; the kernel drops it when the
writer exits, however it exits. So a ``.NAME.*.tmp`` whose lock can be taken belongs to a writer that
died (SIGKILL, power loss) and is removed by the next run; a live writer's file is left alone.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from opencoti_build import locks


def create(dest: Path | str) -> tuple[int, Path]:
    """(fd, path) of a new ``.<dest name>.XXXX.tmp`` beside ``dest``, locked by this process."""
    dest = Path(dest)
    while True:
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
        locks.exclusive(fd)
        # Between mkstemp and the lock the file is an unlocked temporary: another process's remove_stale may have
        # taken it for a dead writer's and removed it (it unlinks before it lets the lock go, so once the lock is
        # ours that is settled). The name is this writer's only if it still holds this file; else take another.
        if _names(name, fd):
            return fd, Path(name)
        os.close(fd)


def _names(path: str, fd: int) -> bool:
    """Whether ``path`` is the file open as ``fd``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (opened.st_dev, opened.st_ino)


def remove_stale(directory: Path | str, dest_name: str = "") -> list[Path]:
    """Remove the temporary files in ``directory`` (only ``dest_name``'s when given) whose writer is gone."""
    removed: list[Path] = []
    prefix = f".{dest_name}." if dest_name else "."
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix) and n.endswith(".tmp")]
    except FileNotFoundError:
        return removed
    for name in names:
        path = Path(directory) / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if locks.try_exclusive(fd):  # else its writer is alive
                path.unlink(missing_ok=True)
                removed.append(path)
        finally:
            os.close(fd)
    return removed
