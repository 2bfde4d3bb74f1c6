"""The runs a build server forks: a run for one request, and the reader that reads the graph ahead of the next.

Each run is a child of the server in its own process group, with none of the server's descriptors, that becomes a
``scons`` process for its request (opencoti_scons/server_hooks.py runs SCons's ``main`` in it). The server waits for
a run while passing the client's signals on (a client that goes away interrupts it, as a closed terminal would).
The reader (opencoti_scons/reader.py) is forked after each request with its settings; it says when it has read and
let go of BUILD_DIR's lock, and a request with the same settings is handed to it: it goes on as that request's run,
or declines (its reading no longer holds) and a forked run builds the request instead.
"""
from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opencoti_build import streams
from opencoti_build.incremental import null_build
from opencoti_build.server import protocol
from opencoti_build.server.scons_side import SConsSide

READER_READY = "the reader has read the graph ahead of the next request"  # the server's log says so


@dataclass(frozen=True)
class Request:
    """What a build request runs with: its command line, directory and environment."""

    argv: list[str]
    cwd: str
    env: dict[str, str]

    def settings(self) -> tuple[list[str], str, dict[str, str]]:
        """What a reading depends on: a reader read for a request when its settings are the request's."""
        return list(self.argv), self.cwd, null_build.environment(self.env)


@dataclass
class Reader:
    """A run forked to read the graph ahead of the next request with these settings (opencoti_scons/reader.py)."""

    pid: int
    pidfd: int
    channel: socket.socket
    request: Request  # what it reads for
    ready: bool = False  # it said so: it has read, and let go of BUILD_DIR's lock
    stale: bool = False  # another build wrote the sconsign or the record it loads: it would decline


@dataclass
class Supervisor:
    """The server's runs: one request's at a time, and at most one reader."""

    scons: SConsSide
    reader: Reader | None = field(default=None)

    # a request's run

    def forked_run(self, request: Request, fds: Sequence[int], conn: socket.socket, start: float) -> int:
        """Build ``request`` in a freshly forked run with the client's descriptors ``fds``: its exit status."""
        streams.flush()
        pid = os.fork()
        if pid == 0:
            def become() -> None:
                streams.point(dict(enumerate(fds)))  # closed with the server's other descriptors
                _enter_run(request, keep=())
                streams.reopen()
                self.scons.as_request(start)
            self.scons.run_scons(become)
        return supervise(pid, os.pidfd_open(pid), conn)

    # the reader

    def reads_for(self, request: Request) -> bool:
        """Whether the reader has read, for settings that are ``request``'s."""
        return self.reader is not None and self.reader.ready and self.reader.request.settings() == request.settings()

    def read_ahead(self, request: Request, again: bool = False) -> None:
        """Fork a reader for ``request``'s settings, unless one reads for them already (``again``: a new one anyway)
        or their runs are never recorded."""
        if not again and self.reader is not None and self.reader.request.settings() == request.settings():
            return
        self.await_reader()  # never killed mid-reading: it may be applying the patch series
        self.drop_reader()
        if not null_build.eligible(request.argv):
            return  # no recorder would watch its reading, so it could not vouch for it
        streams.flush()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            parent.close()

            def become() -> None:
                _enter_run(request, keep=(child.fileno(),))
                self.scons.as_reader(child)
            self.scons.run_scons(become)
        child.close()
        self.reader = Reader(pid, os.pidfd_open(pid), parent, Request(list(request.argv), request.cwd,
                                                                     dict(request.env)))

    def read_again(self) -> None:
        """Another build ran: the reader's reading will not hold. Read again as soon as it has read (not while it
        reads: it may be applying patches)."""
        if self.reader is not None:
            self.reader.stale = True
            if self.reader.ready:
                self.read_ahead(self.reader.request, again=True)

    def await_reader(self) -> None:
        """Wait until a reader that is not stale has read the graph and let go of BUILD_DIR's lock (or none is left)."""
        while self.reader is not None and not self.reader.ready:
            self.reader_said()

    def reader_said(self) -> None:
        """Take the reader's message (it has read) or its end; a stale one is replaced by a new reader."""
        assert self.reader is not None
        try:
            got = protocol.receive(self.reader.channel)
        except (OSError, protocol.ProtocolError):
            got = None
        if got is None or not got[0].get("ready"):
            print(f"{time.strftime('%H:%M:%S')} the reader ended before it had read the graph: a forked run reads "
                  "it instead", file=sys.stderr, flush=True)
            self.drop_reader()  # its reading failed or stopped short (a forked run says why)
        else:
            self.reader.ready = True
            if self.reader.stale:
                self.read_ahead(self.reader.request, again=True)
            else:
                print(f"{time.strftime('%H:%M:%S')} {READER_READY}", file=sys.stderr, flush=True)

    def hand_over(self, request: Request, fds: Sequence[int], conn: socket.socket,
                  start: float) -> tuple[int | None, str]:
        """The request handed to the reader: (its exit status, how long it took to resume) once it goes on as the
        request's run, or (None, why it declined) when its reading no longer holds; both as the log says them."""
        ahead, self.reader = self.reader, None
        assert ahead is not None
        try:
            protocol.send(ahead.channel, {"env": request.env, "start": start}, fds)
            got = protocol.receive(ahead.channel)
        except (OSError, protocol.ProtocolError):
            got = None
        if got is None or "resumed" not in got[0]:
            _end_reader(ahead)
            return None, f" (the reader declined: {got[0].get('stale') if got else 'it went away'})"
        ahead.channel.close()
        return supervise(ahead.pid, ahead.pidfd, conn), f" (resumed in {got[0]['resumed']:.3f} s)"

    def drop_reader(self) -> None:
        """End the reader (a restart, a stop, other settings): no run of this server's is left waiting."""
        if self.reader is not None:
            _end_reader(self.reader)
            self.reader = None


def supervise(pid: int, pidfd: int, conn: socket.socket) -> int:
    """Wait for the run ``pid`` to end, passing on the client's signals (a client that goes away: SIGINT); its
    exit status."""
    try:
        watching: list[Any] = [pidfd, conn]
        while True:
            ready, _, _ = select.select(watching, [], [])
            if conn in ready:
                try:
                    got = protocol.receive(conn)
                except (OSError, protocol.ProtocolError):
                    got = None
                if got is None:  # the client went away: stop the run as a closed terminal would
                    signal_group(pid, signal.SIGINT)
                    watching = [pidfd]
                elif isinstance(got[0].get("signal"), int):
                    signal_group(pid, got[0]["signal"])
            if pidfd in ready:
                break
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def signal_group(pid: int, sig: int) -> None:
    """Signal the run ``pid`` and its process group, as a terminal signals its foreground job."""
    try:
        os.killpg(pid, sig)
    except OSError:  # gone already, or not yet its own group: the process itself
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _end_reader(ahead: Reader) -> None:
    signal_group(ahead.pid, signal.SIGKILL)  # gone already when it declined; else never to be asked
    ahead.channel.close()
    os.close(ahead.pidfd)
    try:
        os.waitpid(ahead.pid, 0)
    except ChildProcessError:
        pass


def _enter_run(request: Request, keep: Sequence[int]) -> None:
    """In a forked child: its own process group, a scons process's signals, none of the server's descriptors but
    ``keep``, the request's directory, environment and command line."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # every descriptor of the server's (its socket, watcher and lock, a client's connection and streams, a
    # reader's channel) closed: a client's pipe left open in a run would never see its end
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    sys.argv = ["scons", *request.argv]
