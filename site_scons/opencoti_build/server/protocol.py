"""Where a build server listens, and what goes over its socket.

One server per checkout and configuration: the socket is ``BUILD_DIR/server/<key>.sock``, ``key`` a digest of
the sorted ``KEY=VALUE`` variables (less those that pick what one request builds or prints), so a request with
other variables finds no server and runs ``scons`` itself.
Messages are length-prefixed JSON; a build request carries the client's stdin, stdout and stderr (SCM_RIGHTS),
which the forked run writes to directly (a terminal stays a terminal: colours, line buffering).

Kept free of the build's modules: the client imports this and nothing heavier.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_BUILD_DIR = "build"  # buildvars' default (tests/unit/test_server.py holds them equal)
SERVER_DIR = "server"
_LENGTH = struct.Struct(">I")
_MAX_MESSAGE = 16 << 20
# options that move the project or read another SConstruct: a server never runs such a request
LOCATING_OPTIONS = ("-C", "--directory", "-D", "-U", "-u", "--up", "--search-up", "-f", "--file", "--makefile",
                    "--sconstruct", "--interactive", "-Y", "--repository", "--srcdir")


class ProtocolError(Exception):
    """The other end sent something that is no message of this protocol, or went away mid-message."""


def moves_project(args: Sequence[str]) -> bool:
    """Whether a command line has an option of :data:`LOCATING_OPTIONS` (the server answers it "fallback")."""
    long_forms = tuple(o + "=" for o in LOCATING_OPTIONS if o.startswith("--"))
    return any(a in LOCATING_OPTIONS or a.startswith(long_forms) for a in args)


# variables that pick what one request builds or prints, not the configuration a server keeps (a subset of
# buildvars.NOT_SHAPING: tests/unit/test_server.py): `build compile FILE=x.c VERBOSE=1` goes to the server too
PER_REQUEST = frozenset(("FILE", "TRACE", "VERBOSE"))


def variables(args: Sequence[str]) -> list[str]:
    """The ``KEY=VALUE`` arguments of a command line (SCons reads them the same)."""
    return [a for a in args if "=" in a and not a.startswith("-")]


def configuration(args: Sequence[str]) -> list[str]:
    """The variables that make a configuration: a command line's, less those of :data:`PER_REQUEST`, sorted."""
    return sorted(a for a in variables(args) if a.partition("=")[0] not in PER_REQUEST)


def configuration_key(variable_args: Sequence[str]) -> str:
    """The key of a configuration (its variables, in any order)."""
    return hashlib.sha256("\0".join(sorted(variable_args)).encode(errors="surrogateescape")).hexdigest()[:16]


def build_dir_arg(variable_args: Sequence[str]) -> str:
    """BUILD_DIR as the variables give it (relative to the checkout unless absolute)."""
    build_dir = DEFAULT_BUILD_DIR
    for arg in variable_args:
        if arg.startswith("BUILD_DIR="):
            build_dir = arg.partition("=")[2]
    return build_dir


def server_dir(project: Path | str, variable_args: Sequence[str]) -> Path:
    """``BUILD_DIR/server`` for these variables (BUILD_DIR relative to the checkout unless absolute)."""
    return Path(project, build_dir_arg(variable_args), SERVER_DIR)


def shown_server_dir(variable_args: Sequence[str]) -> str:
    """``BUILD_DIR/server`` as a line to the user names it: as the variables give BUILD_DIR (as client.c does)."""
    return os.path.join(build_dir_arg(variable_args), SERVER_DIR)


def socket_name(variable_args: Sequence[str]) -> str:
    return configuration_key(variable_args) + ".sock"


def server_file(project: Path | str, variable_args: Sequence[str], suffix: str) -> Path:
    """The configuration's ``.sock``, ``.lock`` (held by its server while it runs; names its PID) or ``.log``."""
    return server_dir(project, variable_args) / (configuration_key(variable_args) + suffix)


def short_path(directory_fd: int, name: str) -> str:
    """A path to ``name`` in an open directory that fits in sun_path (108 bytes) wherever the checkout is."""
    return f"/proc/self/fd/{directory_fd}/{name}"


def frame(message: dict[str, Any]) -> bytes:
    """A message as it goes over the socket: its length, then its JSON."""
    data = json.dumps(message).encode()
    return _LENGTH.pack(len(data)) + data


def send(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    framed = frame(message)
    if fds:
        sent = socket.send_fds(sock, [framed], list(fds))
        framed = framed[sent:]
    if framed:
        sock.sendall(framed)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any], list[int]] | None:
    """The next message and the descriptors that came with it; None when the other end closed cleanly."""
    fds: list[int] = []
    head = b""
    while len(head) < _LENGTH.size:
        if max_fds and not fds:
            chunk, got, _, _ = socket.recv_fds(sock, _LENGTH.size - len(head), max_fds)
            fds.extend(got)
        else:
            chunk = sock.recv(_LENGTH.size - len(head))
        if not chunk:
            for fd in fds:
                os.close(fd)
            if head:
                raise ProtocolError("the connection closed mid-message")
            return None
        head += chunk
    (length,) = _LENGTH.unpack(head)
    if length > _MAX_MESSAGE:
        raise ProtocolError(f"a message of {length} bytes")
    body = b""
    while len(body) < length:
        chunk = sock.recv(min(length - len(body), 1 << 20))
        if not chunk:
            raise ProtocolError("the connection closed mid-message")
        body += chunk
    try:
        message = json.loads(body)
    except ValueError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message that is no JSON object")
    return message, fds
