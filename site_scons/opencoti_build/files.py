"""What identifies a file: its stat identity and its SHA-256, each computed in this one place.

The stat identity is what git's index compares (device, inode, size, mtime and ctime in ns, as a tuple, never a
max of them): any write, truncation, chmod, rename over or replacement moves one of them, while a read moves none.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

Identity = tuple[int, int, int, int, int]
_FIELD = (1 << 64) - 1


def identity(st: os.stat_result) -> Identity:
    """``st``'s (device, inode, size, mtime_ns, ctime_ns)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def stamp(st: os.stat_result) -> int:
    """``st``'s stat identity packed into one int, mtime first, 64 bits a field (so packing loses nothing).

    For SCons's stamp slot: SCons compares a file's stamp with 0, takes the largest over a directory's files and
    subtracts it from the clock, so the stamp must be a number; only its equality is ever used here.
    """
    packed = 0
    for part in (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_dev):
        packed = (packed << 64) | (part & _FIELD)
    return packed


def sha256(path: Path | str) -> str:
    """The SHA-256 of ``path``'s bytes (hex), read once without buffering beyond hashlib's own."""
    with open(path, "rb", buffering=0) as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
