"""The build server's null answer: a request the null build's record holds for is answered by the server itself,
which prints what the fast path prints, under BUILD_DIR's lock as the fast path does.

The record is read again whenever a run writes it, and everything it depends on is watched (inotify, watcher.py):
only the recorded paths the watcher saw change since they were last checked are stat'ed again; after a run, a
lost watch or a queue overflow, all of them are.
"""
from __future__ import annotations

import select
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from opencoti_build import streams
from opencoti_build.incremental import build_lock, null_build
from opencoti_build.server.supervisor import Reader, Request
from opencoti_build.server.watcher import Changes, Watcher


class Recorded:
    """The record the server answers from, the paths it watches for it, and what may have changed since they were
    last checked."""

    def __init__(self, build_dir: Path, watcher: Watcher, running: str) -> None:
        self.build_dir = build_dir
        self.record_file = null_build.record_file(str(build_dir))
        self.watcher = watcher
        self.running = running  # the interpreter and SCons release a record must name
        self.record: null_build.Record | None = None
        self.watched: list[str] = []  # the record's paths and present files, sorted (Changes.affected)
        self.unwatched = False  # a recorded path's directory could not be watched: every null request checks all
        self.pending = Changes(overflow=True)  # what may have changed since the paths were last checked
        self.load()

    def load(self) -> None:
        """(Re)read the record, watch everything it depends on, then count every path as changed: a change made
        before a directory was watched is caught by the first check, one made after it by the watcher."""
        self.record = null_build.Record.load(self.record_file)
        paths = [self.record_file]
        if self.record is not None:
            paths += [*self.record.paths, *self.record.present]
        self.unwatched = not self.watcher.watch(paths)
        self.watched = sorted(set(paths) - {self.record_file})
        self.pending = Changes(overflow=True)  # every path counts as changed until checked

    def take(self, changes: Changes) -> None:
        """What the watcher saw: pending until the next check; the record read again when another run wrote it
        or watches were lost (then everything is checked)."""
        self.pending.add(changes)
        if self.record_file in changes.paths or changes.everything:
            self.load()

    def after_run(self) -> None:
        """A run ended (its client has its status): what it changed is the record's now; check every path now,
        while no request waits, so the next null request re-checks only what changes from here."""
        self.load()
        if self.record is not None and null_build.paths_difference(self.record) is None:
            self.pending = Changes()

    def why_not_answered(self, request: Request, fds: Sequence[int], start: float, reader: Reader | None) -> str | None:
        """Print the fast path's output to the client's ``fds`` when the record holds (only changed paths are
        stat'ed again): None; else why it does not, as the server's log says it."""
        never = null_build.why_never_recorded(request.argv)
        if never is not None:
            return f" (never recorded: {never})"
        record = self.record
        if record is None:
            return " (no record)"
        differs = null_build.settings_difference(record, request.argv, request.cwd, request.env, self.running)
        if differs is not None:
            return f" (the record differs in {differs})"
        with build_dir_held(self.build_dir, reader) as busy:
            if busy is not None:  # a run holds BUILD_DIR: the forked run waits for it, as a scons run would
                return f" ({busy})"
            only = None if self.pending.everything or self.unwatched else self.pending.affected(self.watched)
            differs = null_build.paths_difference(record, only)
            if differs is not None:
                return f" (the record does not hold: {differs})"
            self.pending = Changes()
            with streams.written_to(fds[1:3]):
                if "-Q" not in request.argv:  # what SCons prints before it reads SConstruct, where the fast path starts
                    sys.stdout.write("scons: Reading SConscript files ...\n")
                null_build.replay(record, quiet="-Q" in request.argv, seconds=time.time() - start)
        return None


LOCK_TRIES = 3  # tries at BUILD_DIR's lock for a null answer: a reader lets go of it once, when it has read


@contextmanager
def build_dir_held(build_dir: Path, reader: Reader | None) -> Iterator[str | None]:
    """BUILD_DIR's lock held for a moment, or held by ``reader`` while it reads the graph (it writes nothing a null
    answer checks but a patch series it applies, which the check would see): None; else which run holds it, in
    words. A reader lets go of the lock when it has read, maybe between the try and the look at the holder (the
    kernel's /proc/locks then names nobody, or the reader has said it is ready): the lock is tried again."""
    holder = None
    for _ in range(LOCK_TRIES):
        with build_lock.briefly(build_dir) as held:
            if held:
                yield None
                return
        holder = build_lock.holder_now(build_dir)
        if holder is None:
            continue  # let go since the try
        if reader is None or reader.ready or holder != reader.pid:
            break  # another run's
        said, _, _ = select.select([reader.channel], [], [], 0)
        if not said:
            yield None  # the reader, reading
            return
        # "ready" (or its end) waiting: it has let go of the lock, which another run may have taken since
    who = f"pid {holder}" if holder is not None else f"runs that each let go of it at once ({LOCK_TRIES} tries)"
    yield f"BUILD_DIR's lock held by {who}"
