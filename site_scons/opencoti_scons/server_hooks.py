"""The build server's SCons side: what ``opencoti_build.server`` (the daemon, its supervision of runs and its request
loop, plain Python) asks of SCons, and the ``serve`` command's entry, which hands it over (docs/server.md)."""
from __future__ import annotations

import atexit
import importlib
import os
import pkgutil
import socket
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn

import SCons
import SCons.Script
import SCons.Script.Main

import opencoti_build
import opencoti_scons
from opencoti_build import streams
from opencoti_build.incremental import null_build
from opencoti_build.server import serve
from opencoti_scons import engine, reader, startup


class SConsHooks:
    """opencoti_build.server.scons_side.SConsSide over the SCons this process imported."""

    @property
    def running(self) -> str:
        return null_build.interpreter(SCons.__version__)

    @property
    def sconsign(self) -> str:
        return engine.SCONSIGN_DB

    def warm_imports(self) -> None:
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
        from opencoti_build.artifacts import provenance

        provenance.import_libraries()  # the SBOM's and the Statement's (0.1 s a package run imported them lazily)

    def as_request(self, start: float) -> None:
        engine.restart_clock(start)
        startup.enter(startup.Startup(startup.Kind.SERVER_CHILD))

    def as_reader(self, channel: socket.socket) -> None:
        startup.enter(startup.Startup(startup.Kind.READER, reader.start(channel)))

    def run_scons(self, become: Callable[[], None]) -> NoReturn:
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


def main(args: Sequence[str]) -> int:
    """``python3 -m opencoti_build serve``: opencoti_build/server/serve.py with this SCons."""
    return serve.main(args, SConsHooks())
