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
only looked for still there: the check a run's carried-over reading passes). It then forgets what its nodes
learned from the disk (stats, listings, scans; SCons's ``--interactive`` clears the same between builds), prints
what its reading printed, and goes on as the run it is. Anything else, and it tells the server why and exits
without a byte written: the request runs in a freshly forked child instead.
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from opencoti_build import streams
from opencoti_build.incremental import build_lock, null_build, private
from opencoti_build.server import protocol
from opencoti_scons import engine

# Set in a reader process only, by the server that forked it, before SCons's main: SConstruct asks it to wait.
ahead: ReadAhead | None = None


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

    def wait(self, recorder: null_build.Recorder | None, record: null_build.Record | None,
             carried: null_build.CarryOver | None, running: str, build_dir: str, sconsign: str, run: Any) -> None:
        """Let go of the lock, wait for the request, then go on as its run, or exit when the reading cannot be
        vouched for (see the module docstring). ``carried``: what the reading took over from ``record``."""
        if recorder is None:
            self._decline("no recorder watched its reading")
        left = (null_build.signature(sconsign, False), null_build.signature(recorder.record_path, False))
        build_lock.release(build_dir)
        protocol.send(self.channel, {"ready": True})
        got = protocol.receive(self.channel, max_fds=3)
        if got is None or len(got[1]) != 3:
            os._exit(0)  # the server dropped this reader
        message, fds = got
        env = message["env"]
        if build_lock.try_acquire(build_dir) is None:
            self._decline("another build holds BUILD_DIR", fds)
        if (null_build.signature(sconsign, False), null_build.signature(recorder.record_path, False)) != left:
            self._decline("another build ran since the reading", fds, build_dir)
        reason = recorder.reading_changed()
        if reason is not None:
            self._decline(reason, fds, build_dir)
        now = None
        if carried is not None and record is not None:
            now = null_build.carry_over(record, recorder.args, recorder.cwd, env, running)
            if now is None or (carried.implicit_cache and not now.implicit_cache):
                self._decline("what the reading took over from the last run changed", fds, build_dir)
        if any(os.fstat(fd).st_size for fd in (1, 2)):
            self._decline("its reading printed outside Python", fds, build_dir)
        os.environ.clear()
        os.environ.update(env)
        recorder.retake(set(recorder.first) - recorder.reading, now.now if now is not None else {},
                        now.unsettled if now is not None else frozenset())
        engine.forget_file_state(engine.graph_nodes())  # again: computing the signatures may have made nodes
        clean_scratch(build_dir)
        streams.point(dict(enumerate(fds)), close=True)
        streams.reopen()
        for number, text in self.captured:  # what the reading printed, in order
            stream = sys.stdout if number == 1 else sys.stderr
            stream.write(text)
            stream.flush()
        engine.restart_clock(message["start"])
        run.started = message["start"]
        protocol.send(self.channel, {"resumed": time.time() - message["start"]})  # seconds: the server logs them
        self.channel.close()

    def _decline(self, reason: str, fds: Sequence[int] = (), build_dir: str | None = None) -> NoReturn:
        if build_dir is not None:
            build_lock.release(build_dir)
        for fd in fds:
            os.close(fd)
        try:
            protocol.send(self.channel, {"stale": reason})
        except OSError:
            pass
        os._exit(0)


def start(channel: socket.socket) -> ReadAhead:
    """In a freshly forked reader: stdin from /dev/null, its standard descriptors on empty memory files (a write
    to them makes it decline), sys.stdout and sys.stderr kept."""
    global ahead
    streams.stdin_from_null()
    streams.point({number: os.memfd_create(f"opencoti-reader-{number}") for number in (1, 2)}, close=True)
    ahead = ReadAhead(channel)
    encoding = streams.encoding()
    streams.replace(stdin=open(0, encoding=encoding, closefd=False),  # noqa: SIM115
                    stdout=Capture(1, ahead.captured, encoding), stderr=Capture(2, ahead.captured, encoding),
                    originals=True)
    return ahead


def clean_scratch(build_dir: str) -> None:
    """BUILD_DIR/tmp emptied, as each run starts it: killed runs' scratch files gone."""
    tmp = os.path.join(build_dir, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    private.make_dir(tmp)  # the tools' TMPDIR: the user's alone
