"""The Redis tier of the object cache: opencoti_build.cache.remote_cache on its own (URLs, values, counters, timeouts).

In-process checks of the core here; the real builds and tools: tests/integration/test_remote_cache.py.
"""
from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from bench import servers
from opencoti_build.cache import cache_entry, remote_cache
from opencoti_build.errors import UserError


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379", "redis://cache.example:6380/2", "redis://:s3cret@h:1/0",
                                 "rediss://h:6379", "redis://user:pw@h:1"])
def test_a_redis_url_is_accepted(url: str) -> None:
    assert remote_cache.check_url(url) == url


@pytest.mark.parametrize("url", ["redis://h", "redis://:6379", "redis://h:port", "redis://h:1/db",
                                 "redis://h:1/1/2", "redis://h:1?ssl=1", "redis://h:99999"])
def test_a_malformed_url_is_one_line_naming_the_variable_and_the_form(url: str) -> None:
    with pytest.raises(UserError) as err:
        remote_cache.check_url(url)
    assert str(err.value).startswith(f"CACHE_URL={url} is not a Redis URL; use CACHE_URL=redis://")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("url", ["http://h:6379", "h:6379"])
def test_a_url_of_no_cache_names_both_forms(url: str) -> None:
    with pytest.raises(UserError) as err:
        remote_cache.check_url(url)
    assert str(err.value) == (f"CACHE_URL={url} is not a cache URL; use CACHE_URL={remote_cache.URL_FORMS}, or leave "
                              "it empty")


def test_a_password_never_reaches_a_message() -> None:
    assert remote_cache.shown("redis://:s3cret@h:1/0") == "redis://:***@h:1/0"
    assert remote_cache.shown("redis://u:s3cret@h:1") == "redis://u:***@h:1"
    with pytest.raises(UserError, match=r"CACHE_URL=redis://:\*\*\*@h:x ") as err:
        remote_cache.check_url("redis://:s3cret@h:x")
    assert "s3cret" not in str(err.value)


def test_a_value_restores_content_and_mode_and_refuses_any_damage() -> None:
    data = bytes(range(256)) * 8
    value = remote_cache.pack(data, 0o100755, "k")
    blob, content, mode = remote_cache.unpack(value, "k")
    assert (content, mode) == (data, 0o755) and blob == cache_entry.seal(data, "k")
    with pytest.raises(cache_entry.CorruptEntry, match="^j holds the entry stored under key k"):
        remote_cache.unpack(value, "j")  # a value swapped into another key
    for i in range(len(value)):  # every single flipped byte, every truncation
        for bad in (value[:i] + bytes([value[i] ^ 0x10]) + value[i + 1:], value[:i]):
            with pytest.raises(cache_entry.CorruptEntry, match="^k"):
                remote_cache.unpack(bad, "k")


def test_counts_make_one_line() -> None:
    local, remote = remote_cache.TierCounts(), remote_cache.TierCounts()
    local.add("hits", 12)
    local.add("misses", 3)
    remote.add("pushed")
    assert remote_cache.tiers_line([("local", local), ("redis://h:1", remote)]) == (
        "cache: local 12 hits / 3 misses / 0 corrupt / 0 pushed; redis://h:1 0 hits / 0 misses / 0 corrupt / 1 pushed")


def test_a_server_with_nothing_listening_costs_one_warn(tmp_path: Path) -> None:
    said: list[str] = []
    url = f"redis://127.0.0.1:{servers.free_port()}"
    remote = remote_cache.Remote(url, said.append)
    target = tmp_path / "x.o"
    target.write_bytes(b"x")
    start = time.monotonic()
    assert remote.pull(["a", "b"]) is None and remote.pull(["a"]) is None and not remote.push_file("a", str(target))
    assert time.monotonic() - start < remote_cache.CONNECT_TIMEOUT_S + 1
    assert len(said) == 1 and said[0].startswith(f"WARN: cache: CACHE_URL {url} unreachable (")
    assert said[0].endswith("); building with the local cache only") and not remote.enabled


def test_a_server_that_never_answers_times_out_once() -> None:
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        said: list[str] = []
        remote = remote_cache.Remote(f"redis://127.0.0.1:{silent.getsockname()[1]}", said.append)
        start = time.monotonic()
        assert remote.pull(["a"]) is None and remote.pull(["b"]) is None
        assert time.monotonic() - start < remote_cache.READ_TIMEOUT_S + remote_cache.CONNECT_TIMEOUT_S + 1
        assert len(said) == 1 and "unreachable (" in said[0]
