"""What a host binary's strings say: option names compiled in, llamafile version.

A cosmopolitan APE is not something `nm` reads, so (like the seed's `strings -n4 | grep -x`
check) this looks at the NUL-terminated strings in the raw bytes. A string counts as present
when it is followed by a NUL, i.e. it ends a printable run: the linker's tail merging may store
"-m" as the end of a longer literal, so also requiring a NUL before it would miss real options.
"""
from __future__ import annotations

import mmap
import re
from collections.abc import Iterable
from pathlib import Path

from opencoti_build.errors import UserError

_VERSION = re.compile(rb"llamafile v(\d+)\.(\d+)\.(\d+)(?![\d.])")


class HostError(UserError):
    """The host binary cannot be read. The message is one line naming it."""


def _mapped(path: Path) -> mmap.mmap:
    try:
        with open(path, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:  # ValueError: mmap of an empty file
        reason = getattr(exc, "strerror", None) or "empty file"
        raise HostError(f"host binary {path}: cannot read: {reason}") from exc


def missing_strings(path: Path | str, words: Iterable[str]) -> list[str]:
    """The ``words`` (in the order given, without repeats) that ``path`` holds no NUL-terminated copy of."""
    wanted = list(dict.fromkeys(words))
    mapped = _mapped(Path(path))
    try:
        # word + NUL anywhere: the word ends a printable run, i.e. it is (a tail of) a string
        return [w for w in wanted if mapped.find(w.encode("utf-8") + b"\0") < 0]
    finally:
        mapped.close()


def llamafile_version(path: Path | str) -> str | None:
    """``MAJOR.MINOR.PATCH`` from the binary's "llamafile vX.Y.Z" string, or None if it has none."""
    mapped = _mapped(Path(path))
    try:
        match = _VERSION.search(mapped)
        return None if match is None else ".".join(str(int(g)) for g in match.groups())
    finally:
        mapped.close()
