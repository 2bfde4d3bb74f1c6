"""The process's standard streams, redirected in one place.

A build server's processes move their streams more than a command does: a detached server writes to its log, a
run forked for a request writes to the client's terminal or pipes, a reader keeps what its reading prints until its
request comes, a null answer writes to the client for a moment, and the null build's recorder keeps a copy of what
a run prints while it reads. Two layers move together: the descriptors 0, 1 and 2 (what a subprocess inherits and
what the C library writes to) and Python's ``sys.stdin``, ``sys.stdout`` and ``sys.stderr`` (what ``print`` writes
to). SCons's ``revert_io`` puts ``sys.__stdout__`` and the like back when a run ends, so a run's own streams are
recorded there too (``originals``).
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol, TextIO


class Writable(Protocol):
    """What may stand for ``sys.stdout`` or ``sys.stderr``: a text stream, or a reader's capture of what is written."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


def point(targets: Mapping[int, int], *, close: bool = False) -> None:
    """Make each standard descriptor of ``targets`` (0, 1 or 2) a copy of the descriptor it maps to; ``close``: close
    those afterwards (they were passed or opened for this alone)."""
    for number, fd in targets.items():
        os.dup2(fd, number)
    if close:
        for fd in set(targets.values()):
            os.close(fd)


def stdin_from_null() -> None:
    """Descriptor 0 on /dev/null: a process in the background reads no terminal."""
    point({0: os.open(os.devnull, os.O_RDONLY)}, close=True)


def replace(*, stdin: TextIO | None = None, stdout: Writable | None = None, stderr: Writable | None = None,
            originals: bool = False) -> None:
    """Python's streams replaced by those given; ``originals``: ``sys.__stdout__`` and the like too, which SCons's
    ``revert_io`` restores when a run ends."""
    for name, stream in (("stdin", stdin), ("stdout", stdout), ("stderr", stderr)):
        if stream is not None:
            setattr(sys, name, stream)
            if originals:
                setattr(sys, f"__{name}__", stream)


def encoding() -> str:
    """The encoding of the standard streams, as the interpreter chose it (``PYTHONIOENCODING`` first)."""
    return os.environ.get("PYTHONIOENCODING") or sys.stdout.encoding


def reopen() -> None:
    """Python's standard streams opened again on descriptors 0-2 as an interpreter starting now would open them:
    a terminal line-buffered, ``PYTHONUNBUFFERED`` honoured (the environment is the request's)."""
    chosen = encoding()
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    replace(stdin=open(0, encoding=chosen, closefd=False),  # noqa: SIM115
            stdout=io.TextIOWrapper(open(1, "wb", buffering=0 if unbuffered else -1, closefd=False),  # noqa: SIM115
                                    encoding=chosen, line_buffering=os.isatty(1), write_through=unbuffered),
            stderr=open(2, "w", buffering=1, encoding=chosen, errors="backslashreplace", closefd=False),  # noqa: SIM115
            originals=True)


@contextlib.contextmanager
def written_to(fds: Sequence[int]) -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` on the descriptors ``fds`` (stdout's, stderr's; kept open) for the block,
    then flushed and put back; the process's own descriptors are left alone."""
    swapped = [io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding=sys.stdout.encoding,
                                errors="backslashreplace") for fd in fds]
    saved = sys.stdout, sys.stderr
    replace(stdout=swapped[0], stderr=swapped[1])
    try:
        yield
    finally:
        replace(stdout=saved[0], stderr=saved[1])
        for stream in swapped:
            try:
                stream.flush()
            except OSError:
                pass


def flush() -> None:
    """``sys.stdout`` and ``sys.stderr`` flushed, whatever they are writing to now: before a fork, so that no
    buffered line is written by both processes, and before a process ends without Python's own exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
