"""The stamp SCons's content-timestamp decider keeps of each file, with git's racily-clean rule.

A file's stamp is its whole stat identity (opencoti_build.files.stamp): while it is unchanged, the decider takes the
content signature recorded with it instead of reading the file. That holds only for a stat that vouches for the
bytes: a write in the same timestamp tick as the file's last change keeps the stat (whole seconds on ext2/ext3 and
some NFS, two on FAT), so a header edited, read by a build and put back within that second would look unchanged,
and its dependents stale. A stat taken before its file's tick was over (opencoti_build.incremental.timestamps) is
therefore given a stamp no later run can match: that run reads the file again and compares its content
signature, as for any changed stamp (a rebuild only when the bytes differ).

A file this run wrote (a target built or restored from the cache) is stat'ed right after it was written, so its
stamp is always taken within its tick. For it the moment that counts is when the record is written, as git's index
has it: just before SCons writes its sconsign, each such file whose stat is still the one stamped and now settled
gets its real stamp back (:meth:`Stamps.settle`). Only what was written in the run's last tick is read again.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any

import SCons.Node

from opencoti_build import files
from opencoti_build.incremental import timestamps


class Stamps:
    """One run's stamps: unsettled ones kept (node -> its stat, real stamp and the stamp given) for :meth:`settle`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._unsettled: dict[int, tuple[Any, os.stat_result, int, int]] = {}
        self._base = time.time_ns() << 20  # this run's: no two runs start in the same ns
        self._given = 0

    def stamp(self, node: Any, st: os.stat_result) -> int:
        """``node``'s stamp for its stat ``st`` (which SCons took, maybe a while ago: any moment after it is an upper
        bound of when the bytes SCons reads next were current): the stat identity, or a number below zero, never
        given before, while the stat may not vouch for the bytes."""
        real = files.stamp(st)
        if timestamps.settled(st, time.time_ns()):
            return real
        with self._lock:
            self._given = (self._given + 1) % (1 << 20)
            given = -(self._base + self._given)  # below any stat identity, and no other run gives it: none matches
            self._unsettled[id(node)] = (node, st, real, given)
        return given

    def unsettled(self) -> list[str]:
        """The paths whose stamp cannot be matched (for tests and --debug)."""
        with self._lock:
            return sorted(str(node) for node, *_ in self._unsettled.values())

    def settle(self) -> None:
        """Before the sconsign is written: each file this run built or restored whose stamp was withheld gets its
        real one back when it still has the stat stamped and that stat is settled now (git's index time rule)."""
        now = time.time_ns()
        with self._lock:
            kept = list(self._unsettled.values())
        for node, st, real, given in kept:
            if node.get_state() != SCons.Node.executed:
                continue  # an input: it was read when stamped, and may have changed since within its tick
            ninfo = node.get_ninfo()
            if getattr(ninfo, "timestamp", None) != given:
                continue
            try:
                fresh = os.stat(node.get_abspath())
            except OSError:
                continue
            if files.identity(fresh) == files.identity(st) and timestamps.settled(fresh, now):
                ninfo.timestamp = real
                with self._lock:
                    self._unsettled.pop(id(node), None)
