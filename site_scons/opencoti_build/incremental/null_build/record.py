"""The null build's record: the signature of a path, the record a run writes and reads, where it lives.

The record holds no secret: the command line's variables and the environment are kept as keyed digests
(opencoti_build.incremental.private: names in the clear, values HMAC'd under the key beside the record), and the
record and its key are the user's alone (0600). A path whose stat was taken within its timestamp tick
(opencoti_build.incremental.timestamps) is kept in ``unsettled``: its stat does not vouch for its bytes, so the
record does not answer for it (git's racily-clean rule).
"""
from __future__ import annotations

import hashlib
import marshal
import os
import stat as stat_mod
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from opencoti_build.incremental import private, timestamps

RECORD_NAME = ".null-build"
KEY_SUFFIX = ".key"  # BUILD_DIR/.null-build.key: the key of the record's digests
FORMAT = 6  # 3: the fields by name; 4: no top-level targets (no "is up to date" lines); 5: digests, unsettled paths;
# 6: the lines before the summary
_VOLATILE_ENV = {"_", "OLDPWD"}  # set by the shell per command, read by nothing here
Signature = tuple | None


def now_ns() -> int:
    """The clock a path is looked at by (before its stat): what its signature vouches for is judged against it."""
    return time.time_ns()


def _listing(path: str, hidden: tuple[str, ...]) -> str | None:
    try:
        # a __pycache__ appears when a package is first imported, mid-run: bytecode follows the recorded .py files
        names = sorted(n for n in os.listdir(path) if n != "__pycache__" and not under(os.path.join(path, n), hidden))
    except OSError:
        return None
    return hashlib.sha256("\0".join(names).encode(errors="surrogateescape")).hexdigest()


def _signed(path: str, listed: bool, hidden: tuple[str, ...]) -> tuple[Signature, os.stat_result | None]:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None, None
    kind = stat_mod.S_IFMT(st.st_mode)
    if kind == stat_mod.S_IFDIR:
        return ("d", st.st_ino, _listing(path, hidden) if listed else None), None
    return (kind, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode & 0o7777), st


def signature(path: str, listed: bool, hidden: tuple[str, ...] = ()) -> Signature:
    """What must stay the same about ``path``: see the module docstring. A listing leaves out the entries
    under ``hidden`` (the build's own outputs and scratch: a cold build creates them beside its inputs)."""
    return _signed(path, listed, hidden)[0]


def signed(path: str, listed: bool, hidden: tuple[str, ...] = ()) -> tuple[Signature, int]:
    """(``path``'s signature, the moment from which it vouches for the file's bytes: a file's stat does once its
    timestamp tick is over, timestamps.settles_at_ns; a directory's identity and listing at once, 0)."""
    sig, st = _signed(path, listed, hidden)
    return sig, 0 if st is None else timestamps.settles_at_ns(st)


def environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in _VOLATILE_ENV}


def sealed(key: bytes, args: Iterable[str], environ: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command line and environment as a record keeps them: each value a keyed digest (private.py)."""
    return private.digested_arguments(key, args), private.digested_environment(key, environment(environ))


@dataclass
class Record:
    args: list[str]  # sealed: see :func:`sealed`
    cwd: str
    environ: dict[str, str]  # sealed
    interpreter: str
    paths: dict[str, Signature]
    listed: set[str]
    present: list[str]  # files that must exist, whatever their stat (SCons' own sconsign)
    hidden: tuple[str, ...]  # outputs and scratch, left out of directory listings
    replay: list[tuple[int, str]]  # (1 stdout | 2 stderr, text), in the order written
    steps: int
    reading: set[str] = field(default_factory=set)  # what the SConscripts read, listed or ran, and the code
    reading_found: set[str] = field(default_factory=set)  # what they only stat'ed: its existence counts
    memo: dict[str, str] = field(default_factory=dict)  # what reading computed (see :func:`carry_over`)
    unsettled: set[str] = field(default_factory=set)  # stat'ed within their timestamp tick: the record cannot vouch
    end_lines: list[str] = field(default_factory=list)  # printed before the summary, as a null build prints them
    key: bytes = field(default=b"", compare=False, repr=False)  # of the digests: kept beside the record, not in it

    @classmethod
    def _stored(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "key"]

    def dump(self, path: str) -> None:
        # a mapping of the fields by name (sets as sorted lists: marshal keeps no set order), so a record of
        # another shape is refused by its keys, not by counting tuple positions
        fields_ = {name: getattr(self, name) for name in self._stored()}
        data = marshal.dumps({"format": FORMAT, **{k: sorted(v) if isinstance(v, set) else v for k, v in fields_.items()}})
        private.write(path, data)

    @classmethod
    def load(cls, path: str) -> Record | None:
        """The record at ``path`` with the key of its digests; None when either is missing or of another shape."""
        key = private.read_key(key_file(path))
        try:
            with open(path, "rb") as handle:
                data = marshal.loads(handle.read())
        except (OSError, EOFError, ValueError, TypeError):
            return None
        names = cls._stored()
        if (key is None or not isinstance(data, dict) or data.get("format") != FORMAT
                or sorted(data) != sorted(["format", *names])):
            return None
        sets = {f.name for f in fields(cls) if f.type == "set[str]"}
        values: dict[str, Any] = {name: set(data[name]) if name in sets else data[name] for name in names}
        return cls(**values, key=key)


def interpreter(scons_version: str) -> str:
    """What runs the build: the recorded run's and this one's must be the same."""
    return f"{sys.executable} {sys.version} SCons {scons_version}"


def under(path: str, places: tuple[str, ...]) -> bool:
    """``path`` is one of ``places``, inside one (a directory), or a sibling temporary of one (``name.tmp``)."""
    return any(path == p or path.startswith(p) and path[len(p)] in (os.sep, ".") for p in places)


def record_file(build_dir: str) -> str:
    return os.path.join(build_dir, RECORD_NAME)


def key_file(record_path: str) -> str:
    """Where the key of ``record_path``'s digests is kept (beside it: a sibling the recorder never observes)."""
    return record_path + KEY_SUFFIX

