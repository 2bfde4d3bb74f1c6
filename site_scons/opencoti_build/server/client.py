"""``build`` and ``stop``: the build server's client, light enough that its own start is a null request's cost.

``build [TARGETS] [KEY=VALUE...] [scons options]`` sends the command line, directory, environment and its
stdin, stdout and stderr to the server for this checkout and these variables, and exits with the build's
status; the output is the run's own, written straight to this process's terminal or pipes. With no server for
them (none started, another configuration, options that move the project: ``-C``, ``-f``, ...), it runs
``python3 -m SCons`` with the same arguments in its place, so the answer is always a build's. A server directory
that is not this user's alone (owned by another user, open to others: server/boundary.py) is an error, status 2
in one line: the request, with the environment, is sent to no socket there, and no build runs in its place.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from opencoti_build import locks
from opencoti_build.server import boundary, protocol

_RETRIES = 100  # a server restarting for new code answers again within a second or so


def _connect(variable_args: Sequence[str]) -> socket.socket | None:
    """A connection to this configuration's server; None when there is none. boundary.Unsafe when its directory or
    socket is not this user's alone, or another user listens on it: nothing may be sent there."""
    shown = protocol.shown_server_dir(variable_args)
    dir_fd = boundary.open_socket_dir(protocol.server_dir(os.getcwd(), variable_args), shown)
    if dir_fd is None:
        return None
    try:
        return _connect_in(dir_fd, shown, protocol.socket_name(variable_args))
    finally:
        os.close(dir_fd)


def _connect_in(dir_fd: int, shown: str, name: str) -> socket.socket | None:
    """A connection to the server listening on socket ``name`` of the open server directory (shown as ``shown``);
    None when nobody listens there; boundary.Unsafe as :func:`_connect`."""
    if not boundary.socket_there(dir_fd, name, shown):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(protocol.short_path(dir_fd, name))
    except OSError:  # nobody listening on it (a killed server's)
        sock.close()
        return None
    try:
        boundary.check_server_peer(sock, os.path.join(shown, name))
    except boundary.Unsafe:
        sock.close()
        raise
    return sock


def _unsafe(exc: boundary.Unsafe) -> int:
    print(f"opencoti-build: {exc.for_client()}", file=sys.stderr)
    return 2


def _plain_scons(args: Sequence[str]) -> int:
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "SCons", *args])
    return 127  # not reached


def started_environment(block_file: str = "/proc/self/environ") -> dict[str, str]:
    """The environment this process was started with, as the C client started by the same shell sends it.

    Python adds to ``os.environ`` as it starts: LC_CTYPE=C.UTF-8 where the locale is C or POSIX (PEP 538), which
    would make the two clients' requests differ and each switch between them a full run. The kernel keeps the block
    ``execve`` was given; its entries are read as ``os.environ`` reads them (the first of a repeated name; one
    without ``=`` left out). ``os.environ`` where the block cannot be read."""
    try:
        with open(block_file, "rb") as fh:
            block = fh.read()
    except OSError:
        return dict(os.environ)
    environment: dict[str, str] = {}
    for entry in block.split(b"\0"):
        name, equals, value = entry.partition(b"=")
        if equals:
            environment.setdefault(os.fsdecode(name), os.fsdecode(value))
    return environment


def build_main(args: Sequence[str]) -> int:
    args = list(args)
    variable_args = protocol.configuration(args)
    request = {"op": "build", "argv": args, "cwd": os.getcwd(), "env": started_environment()}
    for _ in range(_RETRIES):
        try:
            sock = _connect(variable_args)
        except boundary.Unsafe as exc:
            return _unsafe(exc)
        if sock is None:
            return _plain_scons(args)
        with sock:
            answer = _request(sock, request)
        if answer is None:
            print("opencoti-build: the build server went away during the build; run the build again",
                  file=sys.stderr)
            return 2
        if "status" in answer:
            return int(answer["status"])
        if "refused" in answer:  # another user's server (its socket made reachable by hand)
            print(f"opencoti-build: {answer['refused']}", file=sys.stderr)
            return 2
        if "fallback" in answer:
            return _plain_scons(args)
        time.sleep(0.02)  # "retry": the server restarts for new code; its socket stays bound meanwhile
    return _plain_scons(args)


def _request(sock: socket.socket, request: dict) -> dict | None:
    """Send the request with this process's stdin, stdout and stderr; wait for the answer, passing Ctrl-C on."""
    try:
        protocol.send(sock, request, fds=(0, 1, 2))
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed without reading it: what it said first (a refusal) is still to be read
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        while True:
            try:
                got = protocol.receive(sock)
                return None if got is None else got[0]
            except KeyboardInterrupt:  # the run's process group gets it, as a terminal's Ctrl-C would
                try:
                    protocol.send(sock, {"signal": int(signal.SIGINT)})
                except OSError:
                    return None
            except (OSError, protocol.ProtocolError):
                return None
    finally:
        signal.signal(signal.SIGINT, previous)


def stop_main(args: Sequence[str]) -> int:
    """``stop [KEY=VALUE...]``: stop the build server for this checkout and these variables; with none, every server
    of this checkout (in the default BUILD_DIR's server directory), each named by its variables."""
    variable_args = protocol.configuration(args)
    if len(protocol.variables(args)) != len(args):
        print("opencoti-build: stop takes the server's KEY=VALUE variables only", file=sys.stderr)
        return 1
    if not args:
        return _stop_all()
    try:
        sock = _connect(variable_args)
    except boundary.Unsafe as exc:
        return _unsafe(exc)
    if sock is None:
        print("no build server runs for this checkout and configuration")
        return 0
    stopped = _stop(sock)
    if isinstance(stopped, str):
        print(f"opencoti-build: {stopped}", file=sys.stderr)
        return 2
    _wait_for_exit(protocol.server_file(os.getcwd(), variable_args, ".lock"))
    print(f"stopped the build server (pid {stopped})" if stopped else "the build server went away")
    return 0


def _stop(sock: socket.socket) -> int | str | None:
    """Ask the server on ``sock`` to stop: its PID, None when it went away without saying, or its refusal (a str)."""
    with sock:
        try:
            protocol.send(sock, {"op": "stop"})
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            got = protocol.receive(sock)
        except (OSError, protocol.ProtocolError):
            got = None
    if got and "refused" in got[0]:
        return str(got[0]["refused"])
    pid = got[0].get("stopped") if got else None
    return pid if isinstance(pid, int) else None


def _stop_all() -> int:
    """A bare ``stop``: every server listening in this checkout's ``build/server``, each line naming the variables it
    serves (from its command line: ``serve`` takes them as arguments) unless it serves none."""
    shown = protocol.shown_server_dir([])
    directory = protocol.server_dir(os.getcwd(), [])
    running: list[tuple[str, socket.socket, list[str] | None]] = []
    try:
        dir_fd = boundary.open_socket_dir(directory, shown)
        if dir_fd is not None:
            try:
                for name in sorted(n for n in os.listdir(dir_fd) if n.endswith(".sock")):
                    sock = _connect_in(dir_fd, shown, name)
                    if sock is not None:
                        running.append((name, sock, _configuration_of(dir_fd, name)))
            finally:
                os.close(dir_fd)
    except boundary.Unsafe as exc:
        for _, sock, _ in running:
            sock.close()
        return _unsafe(exc)
    if not running:
        print(f"no build server runs for this checkout (none listens in {shown})")
        return 0
    status = 0
    for name, sock, which in running:
        stopped = _stop(sock)
        if isinstance(stopped, str):
            print(f"opencoti-build: {stopped}", file=sys.stderr)
            status = 2
            continue
        _wait_for_exit(directory / (name[: -len(".sock")] + ".lock"))
        served = "" if which == [] else f" for {' '.join(which)}" if which else f" of configuration {name[:-5]}"
        print(f"stopped the build server{served} (pid {stopped})" if stopped else
              f"the build server{served} went away")
    return status


def _configuration_of(dir_fd: int, name: str) -> list[str] | None:
    """The variables the server listening on socket ``name`` of the open server directory serves, read from the
    command line of the PID its lock names (``serve [options] KEY=VALUE...``, kept through a restart for new code);
    None when that cannot be read or does not give that socket's key."""
    key = name[: -len(".sock")]
    try:
        fd = os.open(key + ".lock", os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            pid = locks.named_holder(fd)
        finally:
            os.close(fd)
        if pid is None:
            return None
        argv = [a.decode(errors="surrogateescape") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
    except (OSError, ValueError):
        return None
    if "serve" not in argv:
        return None
    variables = protocol.configuration(argv[argv.index("serve") + 1:])
    return variables if protocol.configuration_key(variables) == key else None


def _wait_for_exit(lock: os.PathLike[str] | str, seconds: float = 10.0) -> None:
    """Until the server has let go of its lock (it exits right after answering): a new serve may start then."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not locks.is_free(lock):
        time.sleep(0.01)
