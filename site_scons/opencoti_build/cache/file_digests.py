"""SHA-256 digests of files the build has just read or written whole, so SCons need not read them again.

The packager reads the model once and writes the artifact once, hashing both as it goes. SCons
would otherwise read both again to sign them (its MD5 content signature, which it records for every
node). A digest is remembered with the file's stat identity as the packager saw it (device, inode,
size, mtime and ctime in ns: the model's while it was read, unchanged from before the read to
after it; the artifact's right after its rename) and is given back only while the file still has
that identity. Any write, truncation, chmod or replacement moves one of them, so a changed file is
hashed again as usual; only a write within the same kernel timestamp tick goes unseen, as it does
for make, Ninja and SCons' own content-timestamp decider.

Signatures given this way read ``sha256:<hex>``: never equal to an MD5 signature, so a comparison
across the two kinds counts as a change (a rebuild), never as a match.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from opencoti_build.files import Identity, identity

PREFIX = "sha256:"


class Digests:
    """The digests one run knows: path -> (the stat identity it had, its ``sha256:`` signature)."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[Identity, str]] = {}

    def remember(self, path: Path | str, st: os.stat_result, sha256: str) -> None:
        """``path`` had the SHA-256 ``sha256`` while it had the stat ``st``."""
        self._known[os.path.abspath(path)] = (identity(st), PREFIX + sha256)

    def known(self, path: Path | str) -> str | None:
        """The remembered signature of ``path``, if it still has the stat it had then; else None."""
        entry = self._known.get(os.path.abspath(path))  # (no stat for a file never remembered: every node asks)
        if entry is None:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        return entry[1] if identity(st) == entry[0] else None

    def signature(self, path: Path | str) -> str:
        """``path``'s ``sha256:`` signature: the remembered one, else read and hashed now (and remembered)."""
        found = self.known(path)
        if found is not None:
            return found
        with open(path, "rb", buffering=0) as f:
            before = os.fstat(f.fileno())
            digest = hashlib.file_digest(f, "sha256").hexdigest()
            if identity(os.fstat(f.fileno())) == identity(before):
                self.remember(path, before, digest)
        return PREFIX + digest
