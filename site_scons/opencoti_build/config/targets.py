"""Which parts of the build the command line asks for, so the others are never read (no probes, no I/O)."""
from __future__ import annotations

import os
from collections.abc import Iterable

from opencoti_build.errors import UserError
from opencoti_build.gpu import backends

# Every target name the build defines (its aliases); anything else must be a path.
NAMES: tuple[str, ...] = ("host", "compiledb", "compile", "apply", "reset", *backends.NAMES, "backends", "package",
                          "verify", "native", "native-cuda")


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def asks_for(targets: Iterable[object], names: Iterable[str], outputs: Iterable[str], project: str) -> bool:
    """True when a target is one of ``names``, or a path at, under or above one of ``outputs``."""
    names, outputs = set(names), list(outputs)
    for target in map(str, targets):
        if target in names:
            return True
        path = os.path.normpath(os.path.join(project, target))
        if any(inside(path, out) or inside(out, path) for out in outputs):
            return True
    return False


def check_known(targets: Iterable[object], outputs: Iterable[str], project: str) -> None:
    """UserError naming the first target that is no target name, no existing path and no path at, under
    or above one of ``outputs`` (what the build writes): a misspelled target, refused before any work."""
    outputs = [os.path.normpath(os.path.join(project, out)) for out in outputs]
    for target in map(str, targets):
        if target in NAMES:
            continue
        path = os.path.normpath(os.path.join(project, target))
        if os.path.lexists(path) or any(inside(path, out) or inside(out, path) for out in outputs):
            continue
        raise UserError(f"unknown target {target!r}: no such target or file; the targets are {', '.join(NAMES)} "
                        "or a path the build writes (`scons -h` says what each target builds)")
