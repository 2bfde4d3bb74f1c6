"""The build server: one checkout, one configuration, one request at a time.

It imports SCons and every module of the build once, then waits on its socket and its watcher. A build request
is answered one of two ways:

- the null answer: when the null build's record holds for the request (same command line, directory,
  environment, interpreter) and no path it records changed since the server last checked them all, the server
  prints what the fast path prints, under the build lock as the fast path does. Only the paths the watcher saw
  change are stat'ed again; after a run, a lost watch or a queue overflow, all of them are.
- a run: a child forked from the server, in its own process group, with the client's stdin, stdout and stderr,
  its directory and environment, runs SCons's ``main`` as the ``scons`` command does and exits with its status.
  Nothing of a run stays in the server: the next one starts from the same freshly imported state. The client's
  Ctrl-C reaches the run's process group as a terminal's would; a client that goes away interrupts it.

When a file of the server's own code changes, it answers the next request "retry" and re-executes itself,
keeping its socket and lock, so no request ever runs old code. It exits after ``idle_timeout`` seconds with no
request, on ``stop``, or on SIGTERM/SIGINT, removing its socket.
"""
from __future__ import annotations

import atexit
import importlib
import os
import pkgutil
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import SCons
import SCons.Script
import SCons.Script.Main

import opencoti_build
import opencoti_scons
from opencoti_build import locks, streams
from opencoti_build.incremental import build_lock, null_build, private
from opencoti_build.server import boundary, native_client, protocol
from opencoti_build.server.watcher import Changes, Watcher
from opencoti_scons import engine, reader

NULL_ANSWER = "answered from the record"  # the server's log says how each request was answered
FORKED_RUN = "ran"
READ_AHEAD = "ran in the reader"
READER_READY = "the reader has read the graph ahead of the next request"


class Restart(Exception):
    """The server's code changed: re-execute (raised out of the loop, so nothing of the old code runs on)."""


class Unwatchable(Exception):
    """inotify cannot watch the server's own code: it could not tell when to restart, so it does not start."""


class Stop(Exception):
    """``stop`` asked, or SIGTERM: leave the loop, remove the socket."""


def warm_imports() -> None:
    """Import what every run imports, once: SCons's script layer and all of the build's own modules."""
    import SCons.Defaults  # noqa: F401
    import SCons.Environment  # noqa: F401
    import SCons.Scanner.C  # noqa: F401
    import SCons.Script.SConsOptions  # noqa: F401
    import SCons.Tool  # noqa: F401
    for package in (opencoti_build, opencoti_scons):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not module.name.startswith(("opencoti_build.cli", "opencoti_build.__main__")):
                try:
                    importlib.import_module(module.name)
                except Exception:  # noqa: BLE001 - a module that cannot be imported here is imported by the run, which reports it
                    pass


def code_files() -> set[str]:
    """The source files of every module this process has imported, and the C client's (compiled at each start):
    a change to one makes the server restart."""
    files = {str(native_client.SOURCE.resolve())}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.isfile(path):
            files.add(os.path.abspath(path))
    return files


@dataclass
class _Reader:
    """A run forked to read the graph ahead of the next request with these settings (opencoti_scons/reader.py)."""

    pid: int
    pidfd: int
    channel: socket.socket
    request: tuple[list[str], str, dict[str, str]]  # the command line, directory and environment it reads for
    ready: bool = False  # it said so: it has read, and let go of BUILD_DIR's lock
    stale: bool = False  # another build wrote the sconsign or the record it loads: it would decline

    @property
    def settings(self) -> tuple[list[str], str, dict[str, str]]:
        argv, cwd, env = self.request
        return Server._settings(argv, cwd, env)


class Server:
    def __init__(self, project: Path, variable_args: Sequence[str], listener: socket.socket, lock_fd: int,
                 idle_timeout: float) -> None:
        self.project = project
        self.variable_args = sorted(variable_args)
        self.build_dir = protocol.server_dir(project, variable_args).parent
        self.listener = listener
        self.lock_fd = lock_fd
        self.idle_timeout = idle_timeout
        self.running = null_build.interpreter(SCons.__version__)
        self.watcher = Watcher()
        self.code = code_files()
        self.code_dirs = {os.path.dirname(path) for path in self.code}
        if not self.watcher.watch(self.code):
            raise Unwatchable("cannot watch the build's own code with inotify (fs.inotify.max_user_watches?); "
                              "build with scons instead")
        self.pending = Changes(overflow=True)  # what may have changed since the paths were last checked
        self.record: null_build.Record | None = None
        self.watched: list[str] = []  # the record's paths and present files, sorted (Changes.affected)
        self.unwatched = False  # a recorded path's directory could not be watched: every null request checks all
        self.reader: _Reader | None = None
        self._load_record()

    # the loop

    def serve(self) -> None:
        try:
            self._loop()
        finally:
            self._drop_reader()  # a restart, a stop: no run of the old server's is left waiting

    def _loop(self) -> None:
        deadline = time.monotonic() + self.idle_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Stop
            reading = [self.reader.channel.fileno()] if self.reader is not None and not self.reader.ready else []
            ready, _, _ = select.select([self.listener.fileno(), self.watcher.fileno(), *reading], [], [], left)
            if self.watcher.fileno() in ready:
                self._take_events()
            if reading and reading[0] in ready:
                self._reader_said()  # it has read (or ended): read again now if another build made it stale
            if self.listener.fileno() in ready:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    continue
                with conn:
                    if not boundary.admit(conn):  # another user's: refused unread (server/boundary.py)
                        continue
                    self._handle(conn)
                deadline = time.monotonic() + self.idle_timeout

    def _take_events(self) -> None:
        changes = self.watcher.drain()
        self.pending.add(changes)
        if changes.paths & self.code or changes.lost & self.code_dirs or changes.overflow:
            raise Restart  # the code changed, or may have: no request may run it
        if null_build.record_file(str(self.build_dir)) in changes.paths or changes.everything:
            self._load_record()  # another run wrote it, or watches were lost: watch again, then check everything
        if self.reader is not None and (changes.everything or self._ran_elsewhere(changes)):
            self.reader.stale = True  # read again as soon as it has read (not mid-reading: it may be applying patches)
            if self.reader.ready:
                self._read_ahead(*self.reader.request, again=True)

    def _handle(self, conn: socket.socket) -> None:
        try:
            got = protocol.receive(conn, max_fds=3)
        except (OSError, protocol.ProtocolError):
            return
        if got is None:
            return
        message, fds = got
        try:
            op = message.get("op")
            if op == "stop":
                protocol.send(conn, {"stopped": os.getpid()})
                raise Stop
            if op == "build" and len(fds) == 3:
                self._take_events()
                reason = self._not_mine(message)
                if reason:
                    protocol.send(conn, {"fallback": reason})
                else:
                    started = time.monotonic()
                    status, how = self._build(message, fds, conn)
                    # logged before the client has its status: what reads the log once the client is done finds it
                    print(f"{time.strftime('%H:%M:%S')} build {' '.join(private.shown(message['argv']))}: {how}, "
                          f"status {status}, {time.monotonic() - started:.3f} s", file=sys.stderr, flush=True)
                    protocol.send(conn, {"status": status})
                    if how != NULL_ANSWER:
                        self._after_run()
                    self._read_ahead(message["argv"], message["cwd"], message["env"])
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

    def _not_mine(self, message: dict[str, Any]) -> str | None:
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

    # one request

    def _build(self, message: dict[str, Any], fds: Sequence[int], conn: socket.socket) -> tuple[int, str]:
        """(the exit status, how it was answered: NULL_ANSWER, READ_AHEAD or FORKED_RUN, and why not from the
        record)."""
        start = time.time()
        argv, cwd, env = message["argv"], message["cwd"], message["env"]
        unanswered = self._null_answer(argv, cwd, env, fds, start)
        if unanswered is None:
            return 0, NULL_ANSWER
        self._await_reader()
        declined = ""
        if self.reader is not None and self.reader.ready and self.reader.settings == self._settings(argv, cwd, env):
            status, said = self._reader_run(env, fds, conn, start)
            if status is not None:
                return status, f"{READ_AHEAD}{said}{unanswered}"
            declined = said
        self._drop_reader()
        return self._forked_run(argv, cwd, env, fds, conn, start), f"{FORKED_RUN}{declined}{unanswered}"

    def _null_answer(self, argv: list[str], cwd: str, env: dict[str, str], fds: Sequence[int],
                     start: float) -> str | None:
        """Print the fast path's output when the record holds (only changed paths are stat'ed again): None; else
        why it does not, as the log says it."""
        record = self.record
        if record is None:
            return " (no record)"
        if not null_build.eligible(argv):
            return ""  # never recorded: nothing to say
        differs = null_build.settings_difference(record, argv, cwd, env, self.running)
        if differs is not None:
            return f" (the record differs in {differs})"
        with quiet_build_dir(self.build_dir, self.reader) as busy:
            if busy is not None:  # a run holds BUILD_DIR: the forked run waits for it, as a scons run would
                return f" ({busy})"
            only = None if self.pending.everything or self.unwatched else self.pending.affected(self.watched)
            differs = null_build.paths_difference(record, only)
            if differs is not None:
                return f" (the record does not hold: {differs})"
            self.pending = Changes()
            with streams.written_to(fds[1:3]):
                if "-Q" not in argv:  # what SCons prints before it reads SConstruct, where the fast path starts
                    sys.stdout.write("scons: Reading SConscript files ...\n")
                null_build.replay(record, quiet="-Q" in argv, seconds=time.time() - start)
        return None

    def _forked_run(self, argv: list[str], cwd: str, env: dict[str, str], fds: Sequence[int], conn: socket.socket,
                    start: float) -> int:
        streams.flush()
        pid = os.fork()
        if pid == 0:
            self._child(argv, cwd, env, fds, start)
        return self._supervise(pid, os.pidfd_open(pid), conn)

    def _supervise(self, pid: int, pidfd: int, conn: socket.socket) -> int:
        """Wait for the run ``pid`` to end, passing on the client's signals (a client that goes away: SIGINT);
        its exit status."""
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
                        _signal_group(pid, signal.SIGINT)
                        watching = [pidfd]
                    elif isinstance(got[0].get("signal"), int):
                        _signal_group(pid, got[0]["signal"])
                if pidfd in ready:
                    break
        finally:
            os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        return 128 - code if code < 0 else code

    def _child(self, argv: list[str], cwd: str, env: dict[str, str], fds: Sequence[int], start: float) -> None:
        """The forked run: become a ``scons`` process for this request, then exit (never returns)."""
        def become() -> None:
            streams.point(dict(enumerate(fds)))  # closed with the server's other descriptors
            self._enter_run(argv, cwd, env, keep=())
            streams.reopen()
            engine.restart_clock(start)
        _run_scons(become)

    def _reader_child(self, argv: list[str], cwd: str, env: dict[str, str], channel: socket.socket) -> None:
        """A reader: a run for these settings that waits for its request once it has read the graph (never returns)."""
        def become() -> None:
            self._enter_run(argv, cwd, env, keep=(channel.fileno(),))
            reader.start(channel)
        _run_scons(become)

    def _enter_run(self, argv: list[str], cwd: str, env: dict[str, str], keep: Sequence[int]) -> None:
        """In a forked child: its own process group, a scons process's signals, none of the server's descriptors,
        the request's directory, environment and command line."""
        os.setpgid(0, 0)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        # every descriptor of the server's (its socket, watcher and lock, a client's connection and streams, a
        # reader's channel) closed: a client's pipe left open in a run would never see its end
        low = 3
        for fd in sorted(keep):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, os.sysconf("SC_OPEN_MAX"))
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = ["scons", *argv]

    # the reader

    @staticmethod
    def _settings(argv: list[str], cwd: str, env: dict[str, str]) -> tuple[list[str], str, dict[str, str]]:
        return list(argv), cwd, null_build.environment(env)

    def _ran_elsewhere(self, changes: Changes) -> bool:
        """Whether another build wrote SCons's sconsign or the null build's record (a reader's reading no longer
        holds then: opencoti_scons/reader.py)."""
        return bool(changes.paths & {null_build.record_file(str(self.build_dir)),
                                     str(self.build_dir / engine.SCONSIGN_DB)})

    def _read_ahead(self, argv: list[str], cwd: str, env: dict[str, str], again: bool = False) -> None:
        """Fork a reader for these settings, unless one reads for them already (``again``: a new one anyway) or
        their runs are never recorded."""
        if not again and self.reader is not None and self.reader.settings == self._settings(argv, cwd, env):
            return
        self._await_reader()  # never killed mid-reading: it may be applying the patch series
        self._drop_reader()
        if not null_build.eligible(argv):
            return  # no recorder would watch its reading, so it could not vouch for it
        streams.flush()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            parent.close()
            self._reader_child(argv, cwd, env, child)
        child.close()
        self.reader = _Reader(pid, os.pidfd_open(pid), parent, (list(argv), cwd, dict(env)))

    def _await_reader(self) -> None:
        """Wait until a reader that is not stale has read the graph and let go of BUILD_DIR's lock (or none is left)."""
        while self.reader is not None and not self.reader.ready:
            self._reader_said()

    def _reader_said(self) -> None:
        """Take the reader's message (it has read) or its end; a stale one is replaced by a new reader."""
        assert self.reader is not None
        try:
            got = protocol.receive(self.reader.channel)
        except (OSError, protocol.ProtocolError):
            got = None
        if got is None or not got[0].get("ready"):
            print(f"{time.strftime('%H:%M:%S')} the reader ended before it had read the graph: a forked run reads "
                  "it instead", file=sys.stderr, flush=True)
            self._drop_reader()  # its reading failed or stopped short (a forked run says why)
        else:
            self.reader.ready = True
            if self.reader.stale:
                self._read_ahead(*self.reader.request, again=True)
            else:
                print(f"{time.strftime('%H:%M:%S')} {READER_READY}", file=sys.stderr, flush=True)

    def _reader_run(self, env: dict[str, str], fds: Sequence[int], conn: socket.socket,
                    start: float) -> tuple[int | None, str]:
        """The request handed to the reader: (its exit status, how long it took to resume) once it goes on as the
        request's run, or (None, why it declined) when its reading no longer holds; both as the log says them."""
        ahead, self.reader = self.reader, None
        assert ahead is not None
        try:
            protocol.send(ahead.channel, {"env": env, "start": start}, fds)
            got = protocol.receive(ahead.channel)
        except (OSError, protocol.ProtocolError):
            got = None
        if got is None or "resumed" not in got[0]:
            self._end_reader(ahead)
            return None, f" (the reader declined: {got[0].get('stale') if got else 'it went away'})"
        ahead.channel.close()
        return self._supervise(ahead.pid, ahead.pidfd, conn), f" (resumed in {got[0]['resumed']:.3f} s)"

    def _drop_reader(self) -> None:
        if self.reader is not None:
            self._end_reader(self.reader)
            self.reader = None

    @staticmethod
    def _end_reader(ahead: _Reader) -> None:
        _signal_group(ahead.pid, signal.SIGKILL)  # gone already when it declined; else never to be asked
        ahead.channel.close()
        os.close(ahead.pidfd)
        try:
            os.waitpid(ahead.pid, 0)
        except ChildProcessError:
            pass

    def _after_run(self) -> None:
        """A run ended (its client has its status): what it changed is the record's now; watch it again and check
        every path now, while no request waits, so the next null request re-checks only what changes from here."""
        self._take_events()
        self._load_record()
        if self.record is not None and null_build.paths_difference(self.record) is None:
            self.pending = Changes()

    def _load_record(self) -> None:
        """(Re)read the record, watch everything it depends on, then count every path as changed: a change made
        before a directory was watched is caught by the first check, one made after it by the watcher."""
        self.record = null_build.Record.load(null_build.record_file(str(self.build_dir)))
        record_file = null_build.record_file(str(self.build_dir))
        paths = [record_file]
        if self.record is not None:
            paths += [*self.record.paths, *self.record.present]
        self.unwatched = not self.watcher.watch(paths)
        self.watched = sorted(set(paths) - {record_file})
        self.pending = Changes(overflow=True)  # every path counts as changed until checked


_LOOKS = 3  # tries at BUILD_DIR's lock for a null answer: a reader lets go of it once, when it has read


@contextmanager
def quiet_build_dir(build_dir: Path, reader: _Reader | None) -> Iterator[str | None]:
    """BUILD_DIR's lock held for a moment, or held by ``reader`` while it reads the graph (it writes nothing a null
    answer checks but a patch series it applies, which the check would see): None; else which run holds it, in
    words. A reader lets go of the lock when it has read, maybe between the try and the look at the holder (the
    kernel's /proc/locks then names nobody, or the reader has said it is ready): the lock is tried again."""
    holder = None
    for _ in range(_LOOKS):
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
    who = f"pid {holder}" if holder is not None else f"runs that each let go of it at once ({_LOOKS} tries)"
    yield f"BUILD_DIR's lock held by {who}"


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:  # gone already, or not yet its own group: the process itself
        try:
            os.kill(pid, sig)
        except OSError:
            pass


DEFAULT_IDLE_TIMEOUT = 3 * 3600.0


def main(args: Sequence[str]) -> int:
    """``serve [--detach] [--idle-timeout S] KEY=VALUE...``: serve this checkout's build for these variables."""
    import argparse

    parser = argparse.ArgumentParser(  # plain words: --help shows the description as it is written
        prog="python3 -m opencoti_build serve",
        description="Serve this checkout's build for these KEY=VALUE variables: a resident build server that "
                    "python3 -m opencoti_build build (or build/server/opencoti-client) sends builds to. "
                    "docs/server.md says what it saves.")
    parser.add_argument("--detach", action="store_true", help="run in the background (log: BUILD_DIR/server/KEY.log)")
    parser.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT, metavar="S",
                        help=f"exit after S seconds without a request (default {DEFAULT_IDLE_TIMEOUT:.0f})")
    parser.add_argument("--inherit", nargs=2, type=int, metavar=("LISTEN_FD", "LOCK_FD"), help=argparse.SUPPRESS)
    parser.add_argument("variables", nargs="*", metavar="KEY=VALUE")
    ns = parser.parse_args(list(args))
    project = Path.cwd()
    not_variables = [a for a in ns.variables if a not in protocol.variables([a])]
    if not_variables:
        return _refuse(f"serve takes KEY=VALUE variables only, not {not_variables[0]!r}: targets go to "
                       "`python3 -m opencoti_build build TARGET`")
    per_request = sorted(set(ns.variables) - set(protocol.configuration(ns.variables)))
    if per_request:
        return _refuse(f"{per_request[0]} picks what one request builds or prints, not the server's configuration: "
                       f"give it to `python3 -m opencoti_build build`")
    if not (project / "SConstruct").is_file():
        return _refuse(f"no SConstruct in {project}; run serve in the checkout's top directory")
    site = project / "site_scons"
    if Path(opencoti_build.__file__).resolve().parents[1] != site.resolve():
        # the build's modules must be this checkout's, as SCons imports them for a scons run here (not those of
        # the checkout the project was pip-installed from): start again with its site_scons first on the path
        path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
        os.execve(sys.executable, [sys.executable, "-m", "opencoti_build", "serve", *args],
                  dict(os.environ, PYTHONPATH=path))
    sys.path[:] = [p for p in sys.path if p not in ("", str(project))]  # a scons run has no checkout on its path
    if ns.inherit:  # re-executed after a change to its code: the socket and the lock are the old process's
        listener = socket.socket(fileno=ns.inherit[0])
        lock_fd = ns.inherit[1]
    else:
        try:
            listener, lock_fd = _bind(project, ns.variables)
        except _Refused as exc:
            return _refuse(str(exc))
        if ns.detach:
            if not _detach(project, ns.variables):
                return 0  # the parent: the server said it is ready
            locks.name_holder(lock_fd)  # the lock file names the server, not the parent that bound it
    warm_imports()
    where = protocol.server_file(project, ns.variables, ".sock")
    fast_client, how = native_client.install(where.parent)  # again after a restart: client.c may have changed
    if not ns.inherit:
        vars_text = " ".join(ns.variables)
        print(f"build server for {project}{' ' + vars_text if vars_text else ''}: pid {os.getpid()}, socket {where};"
              f" stop: python3 -m opencoti_build stop{' ' + vars_text if vars_text else ''}", flush=True)
        print(f"fast client: {fast_client} [TARGETS] [KEY=VALUE...]" if fast_client else f"no fast client: {how}",
              flush=True)
        _ready()
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    try:
        server = Server(project, ns.variables, listener, lock_fd, ns.idle_timeout)
        server.serve()
    except Restart:
        print(f"{time.strftime('%H:%M:%S')} the server's code changed: restarting", file=sys.stderr, flush=True)
        os.set_inheritable(listener.fileno(), True)
        os.set_inheritable(lock_fd, True)
        os.execv(sys.executable, [sys.executable, "-m", "opencoti_build", "serve", "--idle-timeout",
                                  str(ns.idle_timeout), "--inherit", str(listener.fileno()), str(lock_fd),
                                  *ns.variables])
    except Stop:
        pass
    except Unwatchable as exc:
        where.unlink(missing_ok=True)
        return _refuse(str(exc))
    where.unlink(missing_ok=True)  # still under the lock: no other server has bound it
    return 0


class _Refused(Exception):
    pass


def _refuse(line: str) -> int:
    print(f"opencoti-build: {line}", file=sys.stderr)
    return 1


def _raise_stop(signum: int, frame: object) -> None:
    raise Stop


# what the server relies on in BUILD_DIR, beside its own directory: the build lock it takes for a null answer, the
# record it answers from, the sconsign its reader loads
BOOKKEEPING = (build_lock.LOCK_NAME, null_build.RECORD_NAME, engine.SCONSIGN_DB)


def _bind(project: Path, variable_args: Sequence[str]) -> tuple[socket.socket, int]:
    """Check that no one else owns or may write what the server trusts (server/boundary.py), take the
    configuration's server lock, then its socket (a stale one, from a killed server, is replaced)."""
    directory = protocol.server_dir(project, variable_args)
    shown = protocol.shown_server_dir(variable_args)
    build_dir, shown_build = directory.parent, protocol.build_dir_arg(variable_args)
    try:
        boundary.check_build_dir(build_dir, shown_build, BOOKKEEPING)
        dir_fd = boundary.open_server_dir(directory, shown)  # made 0700 when absent, BUILD_DIR too
        try:  # again: a BUILD_DIR that was absent may have been made by another meanwhile
            boundary.check_build_dir(build_dir, shown_build, BOOKKEEPING)
        except boundary.Unsafe:
            os.close(dir_fd)
            raise
    except boundary.Unsafe as exc:
        raise _Refused(str(exc)) from None
    except OSError as exc:
        raise _Refused(f"cannot create {directory}: {exc.strerror}") from None
    try:
        return _lock_and_listen(dir_fd, variable_args)
    except OSError as exc:
        raise _Refused(f"cannot serve from {shown}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)


def _lock_and_listen(dir_fd: int, variable_args: Sequence[str]) -> tuple[socket.socket, int]:
    key = protocol.configuration_key(variable_args)
    lock_fd = os.open(key + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, boundary.PRIVATE_FILE,
                      dir_fd=dir_fd)
    if not locks.try_exclusive(lock_fd):
        holder = locks.named_holder(lock_fd)
        os.close(lock_fd)
        vars_text = " ".join(variable_args)
        raise _Refused(f"a build server for this checkout and configuration runs already (pid {holder or '?'}); "
                       f"stop it with `python3 -m opencoti_build stop{' ' + vars_text if vars_text else ''}`")
    os.fchmod(lock_fd, boundary.PRIVATE_FILE)
    locks.name_holder(lock_fd)
    name = protocol.socket_name(variable_args)
    try:  # a killed server's: the lock says none serves it now
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o777 & ~boundary.PRIVATE_FILE)  # the socket runs builds as this user: 0600, whatever the umask
    try:
        listener.bind(protocol.short_path(dir_fd, name))
    finally:
        os.umask(old_umask)
    listener.listen(16)
    return listener, lock_fd


_ready_fd = -1  # a detached server's pipe to the waiting parent
_log_fd = -1  # ...and its log, stdout's once the banner is out


def _detach(project: Path, variable_args: Sequence[str]) -> bool:
    """Fork into the background (True in the server); the parent returns False once the server is ready."""
    global _ready_fd, _log_fd
    log = protocol.server_file(project, variable_args, ".log")
    read_end, write_end = os.pipe()
    streams.flush()
    if os.fork():
        os.close(write_end)
        said = os.read(read_end, 1)
        os.close(read_end)
        if not said:
            print(f"opencoti-build: the build server did not start; see {log}", file=sys.stderr)
            raise SystemExit(1)
        return False
    os.close(read_end)
    os.setsid()  # no terminal's signals, and it outlives the shell that started it
    _ready_fd = write_end
    _log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, boundary.PRIVATE_FILE)
    os.fchmod(_log_fd, boundary.PRIVATE_FILE)  # whatever the umask, or the mode an older server left it
    streams.stdin_from_null()
    streams.point({2: _log_fd})
    return True


def _ready() -> None:
    """Tell a waiting ``serve --detach`` parent the server is up (its banner went to the terminal first)."""
    global _ready_fd, _log_fd
    streams.flush()
    if _ready_fd >= 0:
        streams.point({1: _log_fd}, close=True)
        os.write(_ready_fd, b"1")
        os.close(_ready_fd)
        _ready_fd = _log_fd = -1


def _run_scons(become) -> None:
    """In a forked child: ``become()`` the run, run SCons's ``main`` as the ``scons`` command does, exit with its
    status (never returns into the server)."""
    code = 2
    try:
        become()
        try:
            SCons.Script.Main.main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if not isinstance(exc.code, int | None):
                print(exc.code, file=sys.stderr)
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - whatever happens, the child must not return into the server
        traceback.print_exc()
    finally:
        streams.flush()
        os._exit(code)
