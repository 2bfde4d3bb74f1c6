"""opencoti_build.server.null_answer.build_dir_held: when the server may answer a null request from the record. Under
BUILD_DIR's lock, or while its own reader holds the lock reading the graph; never while another run holds it; and
a reader that lets go of the lock between the server's try and its look at the holder does not cost the answer
(the CI failure where a null request after a build 'ran in the reader')."""
from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from opencoti_build.incremental import build_lock
from opencoti_build.server import null_answer
from opencoti_build.server.supervisor import Reader, Request


@pytest.fixture
def build_dir(tmp_path: Path) -> Path:
    (tmp_path / build_lock.LOCK_NAME).write_text("")
    return tmp_path


@pytest.fixture
def channel() -> Iterator[tuple[socket.socket, socket.socket]]:
    server_end, reader_end = socket.socketpair()
    yield server_end, reader_end
    server_end.close()
    reader_end.close()


def _reader(channel: socket.socket, pid: int) -> Reader:
    return Reader(pid, -1, channel, Request([], "/", {}))


@contextmanager
def _held(build_dir: Path) -> Iterator[None]:
    """The lock held through a descriptor of its own (flock: another open file description conflicts, in this
    process too); /proc/locks names this process."""
    fd = os.open(build_dir / build_lock.LOCK_NAME, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)


def _lock_free(build_dir: Path) -> bool:
    with build_lock.briefly(build_dir) as held:
        return held


def test_a_free_lock_is_held_while_the_answer_is_given(build_dir: Path) -> None:
    with null_answer.build_dir_held(build_dir, None) as busy:
        assert busy is None and not _lock_free(build_dir)
    assert _lock_free(build_dir)


def test_the_servers_reader_reading_under_the_lock_lets_the_answer_be_given(build_dir: Path, channel) -> None:
    with _held(build_dir), null_answer.build_dir_held(build_dir, _reader(channel[0], os.getpid())) as busy:
        assert busy is None


@pytest.mark.parametrize("who", ["another run", "a reader that has read"])
def test_another_run_holding_the_lock_refuses_the_answer(build_dir: Path, channel, who: str) -> None:
    reader = _reader(channel[0], os.getpid() + 1 if who == "another run" else os.getpid())
    reader.ready = who != "another run"  # it has read and let go: the lock's holder now is another run
    with _held(build_dir), null_answer.build_dir_held(build_dir, reader) as busy:
        assert busy == f"BUILD_DIR's lock held by pid {os.getpid()}"


@pytest.mark.parametrize("window", ["gone from /proc/locks", "ready said"])
def test_a_reader_that_lets_go_between_the_try_and_the_look_costs_no_answer(build_dir: Path, channel, monkeypatch,
                                                                            window: str) -> None:
    """The reader holds the lock at the server's try, then lets go (and says it is ready) before the server looks
    at the holder, or just after: the server tries the lock again and answers under it."""
    reader = _reader(channel[0], os.getpid())
    tries = []
    briefly = build_lock.briefly

    @contextmanager
    def reader_holds_at_the_first_try(path: Path | str) -> Iterator[bool]:
        tries.append(path)
        if len(tries) == 1:
            yield False  # the reader's lock, still held at this try
            return
        with briefly(path) as held:
            yield held

    monkeypatch.setattr(build_lock, "briefly", reader_holds_at_the_first_try)
    if window == "ready said":  # the look saw the reader hold it; its "ready" came just after
        monkeypatch.setattr(build_lock, "holder_now", lambda path: reader.pid)
        channel[1].sendall(b"ready")
    with null_answer.build_dir_held(build_dir, reader) as busy:
        assert busy is None and len(tries) == 2
        with briefly(build_dir) as held:  # answered under the lock
            assert not held


def test_a_lock_let_go_at_every_look_is_no_answer_without_it(build_dir: Path, monkeypatch) -> None:
    @contextmanager
    def never_held(path: Path | str) -> Iterator[bool]:
        yield False

    monkeypatch.setattr(build_lock, "briefly", never_held)
    monkeypatch.setattr(build_lock, "holder_now", lambda path: None)
    with null_answer.build_dir_held(build_dir, None) as busy:
        assert busy is not None and "let go" in busy
