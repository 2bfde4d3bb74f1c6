"""Which parts of the build the command line asks for, so the others are never read (no probes, no I/O)."""
from __future__ import annotations

import os
from collections.abc import Iterable


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
