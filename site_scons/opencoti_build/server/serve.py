"""``python3 -m opencoti_build serve``: its arguments and the order a server starts in.

Checked first, before anything is bound or created: variables only, none that picks one request's work, a checkout's
top directory, this checkout's own modules. Then the configuration's lock and socket (listener.py), the process
detached when asked (daemon.py), the imports every run shares, the C client compiled beside the socket, the banner,
and the request loop (request_loop.py) until it stops, or re-executes for new code keeping its socket and lock.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from opencoti_build import project as checkout
from opencoti_build.server import daemon, listener, native_client, protocol
from opencoti_build.server.request_loop import Restart, Server, Stop, Unwatchable
from opencoti_build.server.scons_side import SConsSide

DEFAULT_IDLE_TIMEOUT = 3 * 3600.0


def parse(args: Sequence[str]) -> argparse.Namespace:
    """``serve [--detach] [--idle-timeout S] KEY=VALUE...`` (``--inherit``: a restart's own)."""
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
    return parser.parse_args(list(args))


def why_not_served(variable_args: Sequence[str], project: Path) -> str | None:
    """None when a server may serve ``project`` for these variables; else why not, with what to do instead."""
    not_variables = [a for a in variable_args if a not in protocol.variables([a])]
    if not_variables:
        return (f"serve takes KEY=VALUE variables only, not {not_variables[0]!r}: targets go to "
                "`python3 -m opencoti_build build TARGET`")
    per_request = sorted(set(variable_args) - set(protocol.configuration(variable_args)))
    if per_request:
        return (f"{per_request[0]} picks what one request builds or prints, not the server's configuration: "
                f"give it to `python3 -m opencoti_build build`")
    if not (project / "SConstruct").is_file():
        return f"no SConstruct in {project}; run serve in the checkout's top directory"
    return None


def main(args: Sequence[str], scons: SConsSide) -> int:
    """Serve this checkout's build for these variables: its exit status (a detached server's parent: 0 once the
    server is ready)."""
    ns = parse(args)
    project = Path.cwd()
    why_not = why_not_served(ns.variables, project)
    if why_not is not None:
        return _refuse(why_not)
    _run_this_checkouts_modules(project, args)
    sys.path[:] = [p for p in sys.path if p not in ("", str(project))]  # a scons run has no checkout on its path
    process = daemon.Daemon()
    if ns.inherit:  # re-executed after a change to its code: the socket and the lock are the old process's
        bound = listener.Bound.inherited(*ns.inherit)
    else:
        try:
            bound = listener.bind(project, ns.variables, listener.bookkeeping(scons.sconsign))
        except listener.Refused as exc:
            return _refuse(str(exc))
        if ns.detach and not process.detach(protocol.server_file(project, ns.variables, ".log"), bound):
            return 0  # the parent: the server said it is ready
    scons.warm_imports()
    where = protocol.server_file(project, ns.variables, ".sock")
    fast_client, how = native_client.install(where.parent)  # again after a restart: client.c may have changed
    if not ns.inherit:
        vars_text = "".join(f" {v}" for v in ns.variables)
        print(f"build server for {project}{vars_text}: pid {os.getpid()}, socket {where};"
              f" stop: python3 -m opencoti_build stop{vars_text}", flush=True)
        print(f"fast client: {fast_client} [TARGETS] [KEY=VALUE...]" if fast_client else f"no fast client: {how}",
              flush=True)
        process.ready()
    return _serve(project, ns, bound, scons)


def _serve(project: Path, ns: argparse.Namespace, bound: listener.Bound, scons: SConsSide) -> int:
    """Run the request loop until it stops (the socket removed, still under the lock: no other server has bound
    it) or its code changes (re-executed in place)."""
    where = protocol.server_file(project, ns.variables, ".sock")
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    try:
        Server(project, ns.variables, bound.listener, ns.idle_timeout, scons).serve()
    except Restart:
        daemon.restart(bound, ns.idle_timeout, ns.variables)
    except Stop:
        pass
    except Unwatchable as exc:
        where.unlink(missing_ok=True)
        return _refuse(str(exc))
    where.unlink(missing_ok=True)
    return 0


def _run_this_checkouts_modules(project: Path, args: Sequence[str]) -> None:
    """The build's modules must be this checkout's, as SCons imports them for a scons run here (not those of the
    checkout the project was pip-installed from): else start again with its site_scons first on the path."""
    site = project / "site_scons"
    if checkout.SITE_SCONS != site.resolve():
        path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
        os.execve(sys.executable, [sys.executable, "-m", "opencoti_build", "serve", *args],
                  dict(os.environ, PYTHONPATH=path))


def _refuse(line: str) -> int:
    print(f"opencoti-build: {line}", file=sys.stderr)
    return 1


def _raise_stop(signum: int, frame: object) -> NoReturn:
    raise Stop
