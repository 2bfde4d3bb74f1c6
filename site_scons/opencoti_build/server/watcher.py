"""Which watched paths may have changed: inotify on their directories, read without blocking.

A path is watched through its directory (a missing one through its nearest existing ancestor, so its creation
is seen), a directory also through itself (its entries). inotify queues an event in the system call that makes
the change, so once a change's call has returned, draining the queue sees it: a request that drains first
misses no change made before it was sent. What inotify does not see (a write through a shared mapping, a
change made on another host of a network filesystem) is not seen here either; a queue overflow, or a
directory that stopped being watched (removed), makes every path count as changed: the caller then watches
its paths again and checks them all. A directory that cannot be watched at all is the caller's to handle
(:meth:`Watcher.watch` says so).
"""
from __future__ import annotations

import bisect
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from inotify_simple import INotify, flags

_MASK = (flags.MODIFY | flags.ATTRIB | flags.CLOSE_WRITE | flags.CREATE | flags.DELETE | flags.DELETE_SELF
         | flags.MOVED_FROM | flags.MOVED_TO | flags.MOVE_SELF)


@dataclass
class Changes:
    """What events named since the last :meth:`Watcher.drain`. ``paths``: entries (a file, or a directory made,
    moved or removed: what is under it may have changed too) and watched directories that changed themselves;
    ``listings``: directories an entry event happened in, which concern the directory alone (its listing), not
    what else is under it: a lock file closed in the build directory leaves the build's outputs unsuspected;
    ``lost``: watched directories that went away (nothing under them is watched now); ``overflow``: the queue
    overflowed, so any path may have changed. ``everything``: either of the last two."""

    paths: set[str] = field(default_factory=set)
    listings: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)
    overflow: bool = False

    @property
    def everything(self) -> bool:
        return self.overflow or bool(self.lost)

    def add(self, other: Changes) -> None:
        self.paths |= other.paths
        self.listings |= other.listings
        self.lost |= other.lost
        self.overflow = self.overflow or other.overflow

    def affected(self, watched: list[str]) -> list[str]:
        """The paths of ``watched`` (sorted) these changes may concern: one named, or under one named."""
        if self.everything:
            return list(watched)
        hit = {path for path in self.listings if _holds(watched, path)}
        for path in self.paths:
            if _holds(watched, path):
                hit.add(path)
            prefix = path.rstrip(os.sep) + os.sep
            i = bisect.bisect_left(watched, prefix)
            while i < len(watched) and watched[i].startswith(prefix):  # a directory made, moved or removed
                hit.add(watched[i])
                i += 1
        return sorted(hit)


def _holds(watched: list[str], path: str) -> bool:
    i = bisect.bisect_left(watched, path)
    return i < len(watched) and watched[i] == path


class Watcher:
    def __init__(self) -> None:
        self._inotify = INotify(nonblocking=True)
        self._dirs: dict[int, str] = {}  # watch descriptor -> directory
        self._watched: set[str] = set()

    def fileno(self) -> int:
        return self._inotify.fileno()

    def close(self) -> None:
        self._inotify.close()

    def watch(self, paths: Iterable[str]) -> bool:
        """Watch ``paths`` from now on (what changed before this call is the caller's to check); False when a
        directory could not be watched (ENOSPC: max_user_watches; EACCES; removed meanwhile)."""
        complete = True
        for path in paths:
            for directory in _directories(path):
                if directory in self._watched:
                    continue
                try:
                    wd = self._inotify.add_watch(directory, _MASK)
                except OSError:
                    complete = False
                    continue
                self._dirs[wd] = directory
                self._watched.add(directory)
        return complete

    def drain(self) -> Changes:
        changes = Changes()
        for event in self._inotify.read(timeout=0):
            if event.mask & flags.Q_OVERFLOW:
                changes.overflow = True
                continue
            directory = self._dirs.get(event.wd)
            if directory is None:
                continue
            if event.mask & flags.IGNORED:  # the directory went away: what is under it is watched nowhere now,
                del self._dirs[event.wd]     # so the caller watches its paths again (an ancestor) and checks them all
                self._watched.discard(directory)
                changes.lost.add(directory)
            if event.name:
                changes.paths.add(os.path.join(directory, event.name))
                changes.listings.add(directory)
            else:  # the directory itself (its mode, its removal)
                changes.paths.add(directory)
        return changes


def _directories(path: str) -> list[str]:
    """The directories through which ``path`` is watched."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path) or os.sep
    if os.path.isdir(path):
        return [path, parent]
    while not os.path.isdir(parent) and parent != os.sep:
        parent = os.path.dirname(parent)
    return [parent]
