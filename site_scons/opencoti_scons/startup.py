"""How a run starts, answered once for SConstruct: what the run is, and what the null build knows of it.

A run is one of three (:class:`Kind`): a one-shot ``scons`` run; a run a build server forked for a request (as a
one-shot run, in the server's child); or a build server's reader (opencoti_scons/reader.py), which reads the graph
ahead of a request that has not come yet, so it never answers from the null build's record, waits for the build
lock in silence, and once its reading is done waits for its request before it builds. The server's child code says
which before SCons's ``main`` runs SConstruct (:func:`enter`); anything else is a one-shot run.

:meth:`Startup.null_build_first` is SConstruct's first step: the null build's fast path (exit when nothing the
last build depended on changed), else the recorder that watches this run's reading.
"""
from __future__ import annotations

import enum
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import SCons

from opencoti_build.incremental import build_lock, null_build, private
from opencoti_scons import engine

if TYPE_CHECKING:
    from opencoti_scons.progress import BuildRun
    from opencoti_scons.reader import ReadAhead


class Kind(enum.Enum):
    ONE_SHOT = "a one-shot scons run"
    SERVER_CHILD = "a run a build server forked for a request"
    READER = "a build server's reader"


@dataclass(frozen=True)
class Reading:
    """What the null build knows of this run's reading: the recorder watching it (None: such a run is never
    recorded), the last run's record, what this reading carried over from it (null_build.carry_over: only the
    build's input files changed), and the interpreter a record must name."""

    recorder: null_build.Recorder | None
    record: null_build.Record | None
    carried: null_build.CarryOver | None
    running: str

    def memo(self) -> null_build.Memo:
        """What the reading may reuse of the last run's (carried) and keeps for the next (the recorder's)."""
        if self.recorder is None:
            return null_build.Memo(carried={}, kept={})
        return null_build.Memo(carried=dict(self.carried.memo) if self.carried else {}, kept=self.recorder.memo)


@dataclass(frozen=True)
class Startup:
    """What this run is; a reader's carries its read-ahead state."""

    kind: Kind
    ahead: ReadAhead | None = None

    @property
    def replays(self) -> bool:
        """Whether the null build's record may answer this run: a reader reads ahead of a request not yet come."""
        return self.kind is not Kind.READER

    def say(self, line: str) -> None:
        """Say a wait for BUILD_DIR's lock: a reader waits in silence (the request it may serve has not come)."""
        if self.kind is not Kind.READER:
            print(line)

    def null_build_first(self, build_dir: str, args: Sequence[str], *, asks_help: bool, quiet: bool) -> Reading:
        """The null build's fast path: replay the record and exit when it holds for this run; else start the
        recorder that watches the reading from here on (the build's code was imported before, when the run
        started), with what it carries over from the record. ``scons -h`` is never recorded."""
        running = null_build.interpreter(SCons.__version__)
        if asks_help or not null_build.eligible(args):
            return Reading(None, None, None, running)
        record = null_build.Record.load(null_build.record_file(build_dir))
        if record and self.replays:
            _replay_if_it_holds(record, build_dir, args, running, quiet)
        carried = null_build.carry_over(record, args, os.getcwd(), os.environ, running) if record else None
        recorder = null_build.start(null_build.record_file(build_dir), args, running,
                                    int((engine.start_time() or time.time()) * 1e9))
        if record and carried:  # only the build's input files changed: the reading is the last run's
            recorder.seed(record, carried)
            if carried.implicit_cache:
                engine.use_implicit_cache_now()
        return Reading(recorder, record, carried, running)

    def reading_done(self, reading: Reading, build_dir: str, run: BuildRun) -> None:
        """The SConscripts are read: a reader computes what the build asks first, the recorder stops keeping the
        output, and a reader waits for its request, going on only if its reading still holds."""
        if self.ahead is not None:
            self.ahead.prepare()
        if reading.recorder is not None:
            null_build.reading_done(reading.recorder)
        if self.ahead is not None:
            self.ahead.wait(reading, build_dir, run)


def _replay_if_it_holds(record: null_build.Record, build_dir: str, args: Sequence[str], running: str,
                        quiet: bool) -> None:
    """Under BUILD_DIR's lock, when nothing ``record`` depends on differs: print what the recorded run printed and
    exit (what follows would only find that nothing needs doing); else return."""
    if build_lock.try_acquire(build_dir) is None:
        return  # another run holds it: this one reads, then waits for it
    if null_build.difference(record, args, os.getcwd(), os.environ, running) is None:
        null_build.replay(record, quiet=quiet, seconds=time.time() - (engine.start_time() or time.time()))
        os._exit(0)


_this_run = Startup(Kind.ONE_SHOT)  # the process's: a server's child replaces it before SCons's main runs


def enter(startup: Startup) -> None:
    """In a build server's forked child, before SCons's ``main``: what the run SConstruct is about to start is."""
    global _this_run
    _this_run = startup


def this_run() -> Startup:
    """What this run is (SConstruct asks once)."""
    return _this_run


def clean_scratch(build_dir: str) -> None:
    """BUILD_DIR/tmp emptied, as each run starts it: killed runs' scratch files gone."""
    tmp = os.path.join(build_dir, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    private.make_dir(tmp)  # the tools' TMPDIR: the user's alone
