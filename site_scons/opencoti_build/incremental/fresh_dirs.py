"""The directories a run is the first to create, removed again when the run is refused.

A run takes BUILD_DIR's lock and makes its scratch directory and the cache's config before it reads the
SConscripts, and most refusals (no source tree at SRC, a bad CUDA_ARCHS, a MODEL that is not there) come while
reading them. A refused run must leave the disk as it found it, so what it created from nothing goes again: only
directories that did not exist when the run started (everything in them is this run's), never an existing one.
"""
from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path


def missing_root(path: Path | str) -> Path | None:
    """The outermost directory of ``path`` (itself included) that does not exist; None when ``path`` exists."""
    path = Path(path).absolute()
    if path.exists():
        return None
    root = path
    while not root.parent.exists():
        root = root.parent
    return root


class FreshDirs:
    """Taken before the run's first write: the roots it would be the first to create."""

    def __init__(self, paths: Iterable[Path | str]) -> None:
        self.roots = sorted({root for root in map(missing_root, paths) if root is not None})

    def undo(self) -> None:
        """Remove what this run created under each root (the lock's holder is this run: nobody else wrote there)."""
        for root in self.roots:
            shutil.rmtree(root, ignore_errors=True)
