"""A file's stat identity and SHA-256, computed in one place (opencoti_build/files.py)."""
from __future__ import annotations

import hashlib
import os
import time
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


def test_the_stamp_is_the_whole_identity_so_a_kept_future_mtime_still_shows_an_edit(tmp_path: Path) -> None:
    path = tmp_path / "ggml.h"
    path.write_text("one")
    future = time.time_ns() + 365 * 86400 * 10**9  # a tree from a machine whose clock runs a year ahead
    os.utime(path, ns=(future, future))
    before = files.stamp(os.stat(path))
    path.write_text("two")  # `cp -p`, `rsync -t`: the same size and the (future) mtime put back
    os.utime(path, ns=(future, future))
    after = os.stat(path)
    assert after.st_mtime_ns == future and files.stamp(after) != before  # the ctime moved; max(mtime, ctime) did not
    assert files.stamp(after) == files.stamp(os.stat(path)) and isinstance(files.stamp(after), int)


def test_the_stamp_packs_every_field_apart_even_before_1970() -> None:
    def st(mtime: int, ctime: int, size: int, ino: int, dev: int) -> os.stat_result:
        return os.stat_result((0o100644, ino, dev, 1, 0, 0, size, 0, 0, 0, 0, 0, 0, 0, 0, mtime, ctime))

    stamps = {files.stamp(st(*fields)) for fields in [(1, 2, 3, 4, 5), (2, 1, 3, 4, 5), (1, 2, 3, 5, 4), (-1, 2, 3, 4, 5),
                                                      (1, 2, 4, 4, 5), (1, 2, 3, 4, 6)]}
    assert len(stamps) == 6
