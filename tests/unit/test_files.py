"""A file's stat identity and SHA-256, computed in one place (opencoti_build/files.py)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from opencoti_build import files


def test_the_digest_is_the_bytes_sha256(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    data = bytes(range(256)) * 40_000  # several of hashlib's reads
    path.write_bytes(data)
    assert files.sha256(path) == files.sha256(str(path)) == hashlib.sha256(data).hexdigest()


def test_the_identity_moves_with_a_replacement_or_a_longer_write_not_with_a_read(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one")
    first = files.identity(os.stat(path))
    path.read_bytes()
    assert files.identity(os.stat(path)) == first
    (tmp_path / "new").write_bytes(b"one")
    os.replace(tmp_path / "new", path)  # both existed at once: another inode
    assert files.identity(os.stat(path)) != first
    second = files.identity(os.stat(path))
    path.write_bytes(b"one more")
    assert files.identity(os.stat(path)) != second  # the size moved
    st = os.stat(path)
    assert files.identity(st) == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
