"""opencoti_build.locks: the one flock module the build lock, the server's lock, the temporaries and the cosmocc
download share. A lock belongs to an open file, so two opens in this process stand for two processes."""
from __future__ import annotations

import os
from pathlib import Path

from opencoti_build import locks


def test_a_held_lock_is_not_taken_again_and_is_free_once_its_file_is_closed(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    with locks.holding(path, 0o600) as fd:
        assert locks.holder_now(path) == os.getpid() and not locks.is_free(path)
        other = os.open(path, os.O_RDONLY)
        try:
            assert not locks.try_exclusive(other)
        finally:
            os.close(other)
        assert os.fstat(fd).st_mode & 0o777 == 0o600
    assert locks.is_free(path) and locks.holder_now(path) is None
    assert locks.is_free(tmp_path / "absent")


def test_the_file_names_its_holder_and_a_replaced_file_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        assert locks.named_holder(fd) is None and locks.named_in(path) is None
        assert locks.try_exclusive(fd)
        locks.name_holder(fd)
        assert locks.named_holder(fd) == locks.named_in(path) == os.getpid()
        assert not locks.replaced(path, fd)
        path.unlink()
        assert locks.replaced(path, fd) and locks.named_in(path) is None
    finally:
        os.close(fd)
