"""The null build's record: the signature of a path, the record a run writes and reads, where it lives."""
from __future__ import annotations

import hashlib
import marshal
import os
import stat as stat_mod
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

RECORD_NAME = ".null-build"
FORMAT = 4  # 3: the fields by name; 4: no top-level targets (no "is up to date" lines)
_VOLATILE_ENV = {"_", "OLDPWD"}  # set by the shell per command, read by nothing here
Signature = tuple | None


def _listing(path: str, hidden: tuple[str, ...]) -> str | None:
    try:
        # a __pycache__ appears when a package is first imported, mid-run: bytecode follows the recorded .py files
        names = sorted(n for n in os.listdir(path) if n != "__pycache__" and not under(os.path.join(path, n), hidden))
    except OSError:
        return None
    return hashlib.sha256("\0".join(names).encode(errors="surrogateescape")).hexdigest()


def signature(path: str, listed: bool, hidden: tuple[str, ...] = ()) -> Signature:
    """What must stay the same about ``path``: see the module docstring. A listing leaves out the entries
    under ``hidden`` (the build's own outputs and scratch: a cold build creates them beside its inputs)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    kind = stat_mod.S_IFMT(st.st_mode)
    if kind == stat_mod.S_IFDIR:
        return ("d", st.st_ino, _listing(path, hidden) if listed else None)
    return (kind, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode & 0o7777)


def environment(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in _VOLATILE_ENV}


@dataclass
class Record:
    args: list[str]
    cwd: str
    environ: dict[str, str]
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

    def dump(self, path: str) -> None:
        # a mapping of the fields by name (sets as sorted lists: marshal keeps no set order), so a record of
        # another shape is refused by its keys, not by counting tuple positions
        fields_ = {f.name: getattr(self, f.name) for f in fields(self)}
        data = marshal.dumps({"format": FORMAT, **{k: sorted(v) if isinstance(v, set) else v for k, v in fields_.items()}})
        staged = f"{path}.{os.getpid()}.tmp"
        with open(staged, "wb") as out:
            out.write(data)
        os.replace(staged, path)

    @classmethod
    def load(cls, path: str) -> Record | None:
        try:
            with open(path, "rb") as handle:
                data = marshal.loads(handle.read())
        except (OSError, EOFError, ValueError, TypeError):
            return None
        names = [f.name for f in fields(cls)]
        if not isinstance(data, dict) or data.get("format") != FORMAT or sorted(data) != sorted(["format", *names]):
            return None
        sets = {f.name for f in fields(cls) if f.type == "set[str]"}
        values: dict[str, Any] = {name: set(data[name]) if name in sets else data[name] for name in names}
        return cls(**values)


def interpreter(scons_version: str) -> str:
    """What runs the build: the recorded run's and this one's must be the same."""
    return f"{sys.executable} {sys.version} SCons {scons_version}"


def under(path: str, places: tuple[str, ...]) -> bool:
    """``path`` is one of ``places``, inside one (a directory), or a sibling temporary of one (``name.tmp``)."""
    return any(path == p or path.startswith(p) and path[len(p)] in (os.sep, ".") for p in places)


def record_file(build_dir: str) -> str:
    return os.path.join(build_dir, RECORD_NAME)

