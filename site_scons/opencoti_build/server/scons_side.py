"""What the build server needs of SCons, which this package never imports: ``opencoti_scons/server_hooks.py`` gives
it (``serve`` starts there), so the server's daemon, supervision and request loop are plain Python below it."""
from __future__ import annotations

import socket
from collections.abc import Callable
from typing import NoReturn, Protocol


class SConsSide(Protocol):
    @property
    def running(self) -> str:
        """The interpreter and SCons release this server runs, as the null build's record names them: a record
        another one wrote is never answered from."""

    @property
    def sconsign(self) -> str:
        """The name of SCons's signature database in BUILD_DIR: when it changes another build ran, and a reader's
        reading no longer holds."""

    def warm_imports(self) -> None:
        """Import what every run imports, once: SCons's script layer and all of the build's own modules."""

    def as_request(self, start: float) -> None:
        """In a forked run whose descriptors, directory and environment are the request's: the rest of becoming its
        run (its clock started when the client asked; SConstruct's startup answer: a server's child)."""

    def as_reader(self, channel: socket.socket) -> None:
        """In a forked run with the request's directory and environment: become its reader, which reads the graph
        ahead and waits on ``channel`` for the request (opencoti_scons/reader.py)."""

    def run_scons(self, become: Callable[[], None]) -> NoReturn:
        """In a forked child: ``become()`` the run, run SCons's ``main`` as the ``scons`` command does and exit with
        its status; never returns into the server, whatever happens."""
