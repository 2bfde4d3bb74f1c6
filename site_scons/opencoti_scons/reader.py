"""A build server's reader: a run forked after a request, which reads the graph ahead of the next one.

Reading the SConscripts and computing every step's action signature are most of what an edit build pays before
its first compile (docs/server.md). After each request the server forks a reader with that request's command
line, directory and environment. It reads the SConscripts as a run would (under BUILD_DIR's lock, its output kept,
not shown), computes the action signatures (its steps' commands as signed: names and flags, no file's content)
and loads SCons's sconsign, then lets go of the lock and waits (:meth:`ReadAhead.wait`).

When the next request has the same settings the server hands the reader the client's streams. The reader builds
only when it can vouch that a run starting now would read the same graph: it takes the lock again without
waiting, finds the sconsign and the null build's record as it left them (no other build ran meanwhile), and
everything its reading used as the null build's recorder saw it (what it read, listed or ran unchanged, what it
only looked for still there: the check a run's carried-over reading passes; a file the reading took only a fact
from, a prebuilt HOST's version and entries or a MODEL's GGUF header, may have changed while it gives that fact:
``Recorder.derive``, so the reader builds a new host binary or model). It then forgets what its nodes
learned from the disk (stats, listings, scans; SCons's ``--interactive`` clears the same between builds), prints
what its reading printed, and goes on as the run it is. Anything else, and it tells the server why and exits
without a byte written: the request runs in a freshly forked child instead.
"""
from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from opencoti_build import streams
from opencoti_build.incremental import build_lock, null_build
from opencoti_build.server import protocol
from opencoti_scons import engine, startup

if TYPE_CHECKING:
    from opencoti_scons.progress import BuildRun


class Capture:
    """sys.stdout or sys.stderr of a reader while it reads: what is written is kept, in order, for the request."""

    def __init__(self, number: int, kept: list[tuple[int, str]], encoding: str) -> None:
        self.number, self.kept, self.encoding = number, kept, encoding

    def write(self, text: str) -> int:
        self.kept.append((self.number, text))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:  # what a subprocess writes there goes to the descriptor, which the reader checks
        return self.number


@dataclass
class ReadAhead:
    """A reader's state between its reading and its request: the channel to its server, what its reading printed,
    the action signatures it computed ahead (SConstruct reaches it through opencoti_scons/startup.py)."""

    channel: socket.socket
    captured: list[tuple[int, str]] = field(default_factory=list)
    signatures: engine.WarmSignatures = field(default_factory=dict)  # the action signatures computed ahead

    def prepare(self) -> None:
        """What the build will ask first that no file's state enters: each step's action signature; and SCons's
        sconsign, loaded (checked unchanged before the build). Before the reading ends, so anything this opens
        counts as read."""
        nodes = engine.graph_nodes()
        engine.warm_action_signatures(nodes, self.signatures)
        engine.load_signatures(nodes)

    def wait(self, reading: startup.Reading, build_dir: str, run: BuildRun) -> None:
        """Let go of the lock, wait for the request, then go on as its run when the reading can be vouched for (see
        the module docstring); else tell the server why and exit, writing nothing (:meth:`_decline`)."""
        recorder = reading.recorder
        if recorder is None:
            self._decline("no recorder watched its reading")
        left = _last_writes(build_dir, recorder)
        build_lock.release(build_dir)
        request = self._request()
        try:
            now = _vouch(reading, recorder, request.env, build_dir, left)
        except _Declined as exc:
            self._decline(str(exc), request.fds, build_dir)
        self._resume(request, recorder, now, build_dir, run)

    def _request(self) -> _Request:
        """Say "ready" and wait for the request the server hands over: its environment, when its client asked and
        its standard descriptors. A server that drops this reader closes the channel: nothing to say, exit."""
        protocol.send(self.channel, {"ready": True})
        got = protocol.receive(self.channel, max_fds=3)
        if got is None or len(got[1]) != 3:
            os._exit(0)
        message, fds = got
        return _Request(message["env"], message["start"], fds)

    def _resume(self, request: _Request, recorder: null_build.Recorder, now: null_build.CarryOver | None,
                build_dir: str, run: BuildRun) -> None:
        """Become the request's run: its environment, what its nodes learned from the disk forgotten, its scratch
        emptied, its descriptors, what the reading printed, its clock; then tell the server how long it took."""
        os.environ.clear()
        os.environ.update(request.env)
        recorder.retake(set(recorder.first) - recorder.reading | recorder.rederived,
                        now.now if now is not None else {}, now.unsettled if now is not None else frozenset())
        engine.forget_file_state(engine.graph_nodes())  # again: computing the signatures may have made nodes
        startup.clean_scratch(build_dir)
        streams.point(dict(enumerate(request.fds)), close=True)
        streams.reopen()
        for number, text in self.captured:  # what the reading printed, in order
            stream = sys.stdout if number == 1 else sys.stderr
            stream.write(text)
            stream.flush()
        engine.restart_clock(request.start)
        run.started = request.start
        protocol.send(self.channel, {"resumed": time.time() - request.start})  # seconds: the server logs them
        self.channel.close()

    def _decline(self, reason: str, fds: Sequence[int] = (), build_dir: str | None = None) -> NoReturn:
        """The one way a reader's reading ends unused: the server is told why (its log says it), the request's
        descriptors closed unwritten, BUILD_DIR's lock let go; a forked run builds the request."""
        if build_dir is not None:
            build_lock.release(build_dir)
        for fd in fds:
            os.close(fd)
        try:
            protocol.send(self.channel, {"stale": reason})
        except OSError:
            pass
        os._exit(0)


@dataclass(frozen=True)
class _Request:
    """A request handed to the reader: its environment, when its client asked, its stdin, stdout and stderr."""

    env: dict[str, str]
    start: float
    fds: list[int]


class _Declined(Exception):
    """The reading cannot be vouched for: why, as the server's log says it."""


def _last_writes(build_dir: str, recorder: null_build.Recorder) -> tuple[null_build.Signature, null_build.Signature]:
    """The signatures of SCons's sconsign and the null build's record: another build that ran changed them."""
    return (null_build.signature(os.path.join(build_dir, engine.SCONSIGN_DB), False),
            null_build.signature(recorder.record_path, False))


def _vouch(reading: startup.Reading, recorder: null_build.Recorder, env: dict[str, str], build_dir: str,
           left: tuple[null_build.Signature, null_build.Signature]) -> null_build.CarryOver | None:
    """Check that a run starting now would read the same graph, holding BUILD_DIR's lock again: what the reading
    carried over, as it holds now (None: nothing was); _Declined says why not."""
    if build_lock.try_acquire(build_dir) is None:
        raise _Declined("another build holds BUILD_DIR")
    if _last_writes(build_dir, recorder) != left:
        raise _Declined("another build ran since the reading")
    reason = recorder.reading_changed()
    if reason is not None:
        raise _Declined(reason)
    now = None
    if reading.carried is not None and reading.record is not None:
        now = null_build.carry_over(reading.record, recorder.args, recorder.cwd, env, reading.running,
                                    recorder.fact_holds)
        if now is None or (reading.carried.implicit_cache and not now.implicit_cache):
            raise _Declined("what the reading took over from the last run changed")
    if any(os.fstat(fd).st_size for fd in (1, 2)):
        raise _Declined("its reading printed outside Python")
    return now


def start(channel: socket.socket) -> ReadAhead:
    """In a freshly forked reader: stdin from /dev/null, its standard descriptors on empty memory files (a write
    to them makes it decline), sys.stdout and sys.stderr kept; what SConstruct's startup answer carries."""
    streams.stdin_from_null()
    streams.point({number: os.memfd_create(f"opencoti-reader-{number}") for number in (1, 2)}, close=True)
    ahead = ReadAhead(channel)
    encoding = streams.encoding()
    streams.replace(stdin=open(0, encoding=encoding, closefd=False),  # noqa: SIM115
                    stdout=Capture(1, ahead.captured, encoding), stderr=Capture(2, ahead.captured, encoding),
                    originals=True)
    return ahead

