"""The directories a run is the first to create, removed again when the run is refused.

A run takes BUILD_DIR's lock and makes its scratch directory and the cache's config before it reads the
SConscripts, and most refusals (no source tree at SRC, a bad CUDA_ARCHS, a MODEL that is not there) come while
reading them. A refused run must leave the disk as it found it, so what it created from nothing goes again: only
directories that did not exist when the run started, never an existing one. A directory under this run's lock
(BUILD_DIR) goes whole; one that other runs may write into at the same moment (a CACHE_DIR they share) loses only the
files this run writes there and the directories left empty, so another run's entries are never taken with it.
"""
from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
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
    """Taken before the run's first write: ``locked`` directories (only this run writes there), ``shared`` ones
    with the names of the files this run writes into them."""

    def __init__(self, locked: Iterable[Path | str], shared: Mapping[Path | str, Iterable[str]] | None = None) -> None:
        self.locked = sorted({root for root in map(missing_root, locked) if root is not None})
        self.shared = {Path(path).absolute(): (root, tuple(names)) for path, names in (shared or {}).items()
                       if (root := missing_root(path)) is not None}

    def undo(self) -> None:
        """Remove what this run created (see the module docstring)."""
        for root in self.locked:
            shutil.rmtree(root, ignore_errors=True)
        for path, (root, names) in self.shared.items():
            for name in names:
                (path / name).unlink(missing_ok=True)
            for directory in (path, *path.parents):  # the empty ones, up to the root this run created
                try:
                    directory.rmdir()
                except OSError:
                    break  # not empty (another run's), or gone
                if directory == root:
                    break
