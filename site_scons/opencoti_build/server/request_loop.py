"""The build server's loop: one checkout, one configuration, one request at a time.

It waits on its socket, its watcher and its reader. A build request is answered one of three ways, and the
server's log has a line for each, written before the client has its status:

- from the record (null_answer.py): the null build's record holds for the request;
- by the reader (supervisor.py): it read the graph for these settings ahead, and its reading still holds;
- by a run forked for the request, which reads the SConscripts itself.

When a file of the server's own code changes, or may have (the watcher's queue overflowed, a watch on it was lost),
it answers the next request "retry" and raises :class:`Restart`, so no request ever runs old code.
"""
from __future__ import annotations

import os
import select
import socket
import sys
import time
from pathlib import Path
from typing import Any

from opencoti_build.incremental import private
from opencoti_build.server import boundary, native_client, protocol
from opencoti_build.server.null_answer import Recorded
from opencoti_build.server.scons_side import SConsSide
from opencoti_build.server.supervisor import Request, Supervisor
from opencoti_build.server.watcher import Changes, Watcher

NULL_ANSWER = "answered from the record"  # the server's log says how each request was answered
FORKED_RUN = "ran"
READ_AHEAD = "ran in the reader"


class Restart(Exception):
    """The server's code changed: re-execute (raised out of the loop, so nothing of the old code runs on)."""


class Unwatchable(Exception):
    """inotify cannot watch the server's own code: it could not tell when to restart, so it does not start."""


class Stop(Exception):
    """``stop`` asked, or SIGTERM: leave the loop, remove the socket."""


def code_files() -> set[str]:
    """The source files of every module this process has imported, and the C client's (compiled at each start):
    a change to one makes the server restart."""
    files = {str(native_client.SOURCE.resolve())}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.isfile(path):
            files.add(os.path.abspath(path))
    return files


class Server:
    def __init__(self, project: Path, variable_args: list[str], listener: socket.socket, idle_timeout: float,
                 scons: SConsSide) -> None:
        self.project = project
        self.variable_args = sorted(variable_args)
        self.build_dir = protocol.server_dir(project, variable_args).parent
        self.listener = listener
        self.idle_timeout = idle_timeout
        self.sconsign = str(self.build_dir / scons.sconsign)
        self.watcher = Watcher()
        self.code = code_files()
        self.code_dirs = {os.path.dirname(path) for path in self.code}
        if not self.watcher.watch(self.code):
            raise Unwatchable("cannot watch the build's own code with inotify (fs.inotify.max_user_watches?); "
                              "build with scons instead")
        self.recorded = Recorded(self.build_dir, self.watcher, scons.running)
        self.runs = Supervisor(scons)

    def serve(self) -> None:
        """Answer requests until stopped (:class:`Stop`), idle too long, or its code changed (:class:`Restart`)."""
        try:
            self._loop()
        finally:
            self.runs.drop_reader()  # a restart, a stop: no run of the old server's is left waiting

    def _loop(self) -> None:
        deadline = time.monotonic() + self.idle_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Stop
            reader = self.runs.reader
            reading = [reader.channel.fileno()] if reader is not None and not reader.ready else []
            ready, _, _ = select.select([self.listener.fileno(), self.watcher.fileno(), *reading], [], [], left)
            if self.watcher.fileno() in ready:
                self._take_events()
            if reading and reading[0] in ready:
                self.runs.reader_said()  # it has read (or ended): read again now if another build made it stale
            if self.listener.fileno() in ready and self._accept():
                deadline = time.monotonic() + self.idle_timeout

    def _accept(self) -> bool:
        """Serve one connection: whether it was a request (a refused peer does not put off the idle timeout)."""
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return False
        with conn:
            if not boundary.admit(conn):  # another user's: refused unread (server/boundary.py)
                return False
            self._handle(conn)
        return True

    def _take_events(self) -> None:
        changes = self.watcher.drain()
        if changes.paths & self.code or changes.lost & self.code_dirs or changes.overflow:
            raise Restart  # the code changed, or may have: no request may run it
        self.recorded.take(changes)
        if changes.everything or self._ran_elsewhere(changes):
            self.runs.read_again()

    def _ran_elsewhere(self, changes: Changes) -> bool:
        """Whether another build wrote SCons's sconsign or the null build's record (a reader's reading no longer
        holds then: opencoti_scons/reader.py)."""
        return bool(changes.paths & {self.recorded.record_file, self.sconsign})

    def _handle(self, conn: socket.socket) -> None:
        try:
            got = protocol.receive(conn, max_fds=3)
        except (OSError, protocol.ProtocolError):
            return
        if got is None:
            return
        message, fds = got
        try:
            if message.get("op") == "stop":
                protocol.send(conn, {"stopped": os.getpid()})
                raise Stop
            if message.get("op") == "build" and len(fds) == 3:
                self._answer(conn, message, fds)
        except Restart:
            try:
                protocol.send(conn, {"retry": True})
            except OSError:  # gone already (or it had its status: a run changed the code)
                pass
            raise
        except OSError:  # the client went away: nothing to tell it
            pass
        finally:
            for fd in fds:
                os.close(fd)

    def _answer(self, conn: socket.socket, message: dict[str, Any], fds: list[int]) -> None:
        """A build request: built here (or from the record), or answered "fallback" when another configuration's."""
        self._take_events()
        why_not = self._why_not_served(message)
        if why_not:
            protocol.send(conn, {"fallback": why_not})
            return
        request = Request(message["argv"], message["cwd"], message["env"])
        started = time.monotonic()
        status, how = self._build(request, fds, conn)
        # logged before the client has its status: what reads the log once the client is done finds it
        print(f"{time.strftime('%H:%M:%S')} build {' '.join(private.shown(request.argv))}: {how}, "
              f"status {status}, {time.monotonic() - started:.3f} s", file=sys.stderr, flush=True)
        protocol.send(conn, {"status": status})
        if how != NULL_ANSWER:
            self._take_events()
            self.recorded.after_run()
        self.runs.read_ahead(request)

    def _why_not_served(self, message: dict[str, Any]) -> str | None:
        """None when this server builds the request; else why not, the "fallback" its client runs scons for."""
        argv = message.get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            return "a request without a command line"
        if protocol.moves_project(argv):
            return "an option that moves the project"
        if protocol.configuration(argv) != self.variable_args:
            return "another configuration"
        if message.get("cwd") != str(self.project) or not isinstance(message.get("env"), dict):
            return "another directory"
        return None

    def _build(self, request: Request, fds: list[int], conn: socket.socket) -> tuple[int, str]:
        """(the exit status, how it was answered: NULL_ANSWER, READ_AHEAD or FORKED_RUN, and why not from the
        record)."""
        start = time.time()
        unanswered = self.recorded.why_not_answered(request, fds, start, self.runs.reader)
        if unanswered is None:
            return 0, NULL_ANSWER
        self.runs.await_reader()
        declined = ""
        if self.runs.reads_for(request):
            status, said = self.runs.hand_over(request, fds, conn, start)
            if status is not None:
                return status, f"{READ_AHEAD}{said}{unanswered}"
            declined = said
        self.runs.drop_reader()
        return self.runs.forked_run(request, fds, conn, start), f"{FORKED_RUN}{declined}{unanswered}"
