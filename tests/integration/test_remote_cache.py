"""The Redis tier of the object cache: opencoti_build.cache.remote_cache on its own, then whole builds of the
miniature tree against a redis-server this module starts on 127.0.0.1 (a free port) and stops by PID."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import servers
from opencoti_build.cache import cache_entry, remote_cache
from opencoti_build.report import summary

from scons_runs import MINI_TREE, SharedTierCheckouts, scons, scons_command
from scons_runs import output_digests as digests
from scons_runs import shared_tier_counts as tier_line

REDIS_SERVER = shutil.which("redis-server")
needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="needs redis-server (scripts/install-deps)")


class RedisServer(servers.RedisServer):
    def keys(self) -> list[str]:
        return sorted(k.decode() for k in self.client.keys(remote_cache.KEY_PREFIX + "*"))


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


@needs_redis
def test_push_pull_limit_and_drop(redis_server: RedisServer, tmp_path: Path) -> None:
    said: list[str] = []
    remote = remote_cache.Remote(redis_server.url, said.append, max_entry=1000)
    small, big = tmp_path / "small.o", tmp_path / "big.o"
    small.write_bytes(b"s" * 1000)
    big.write_bytes(b"b" * 1001)
    assert remote.push_file("k1", str(small)) and not remote.push_file("k1", str(small))  # the first push stays
    assert not remote.push_file("k2", str(big)) and remote.skipped == 1
    assert remote.skipped_note() == (f"NOTE: cache: 1 entries larger than 0 MiB were not pushed to {redis_server.url} "
                                     "(kept in the local cache only)")
    value, missing = remote.pull(["k1", "k2"])
    assert missing is None and remote_cache.unpack(value, "k1")[1] == small.read_bytes()
    remote.drop("k1", value + b"other")  # not the value that is there: kept
    assert remote.pull(["k1"]) == [value]
    remote.drop("k1", value)
    assert remote.pull(["k1"]) == [None] and said == []


# --- whole builds -----------------------------------------------------------------------------------

class Warm(SharedTierCheckouts):
    """One redis-server filled by a cold build of a private copy of the mini tree (its outputs: the reference).
    Redis is a shared tier: every build here signs what it pushes and trusts the same key (``keys``)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.server = RedisServer()
        self.url = self.server.url
        first = self.build(root / "first", f"CACHE_URL={self.server.url}", *self.keys)
        self.steps = summary.parse(first.stdout)["compiled"]
        self.reference = digests(root / "first" / "out")


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Warm]:
    if REDIS_SERVER is None:
        pytest.skip("needs redis-server (scripts/install-deps)")
    ws = Warm(tmp_path_factory.mktemp("warm-redis"))
    yield ws
    ws.server.stop()


def test_a_second_clone_with_an_empty_local_cache_compiles_nothing(warm: Warm) -> None:
    _, (hits, misses, corrupt, pushed) = warm.clone_from_the_tier()
    assert hits == len(warm.server.keys()) and (misses, corrupt, pushed) == (0, 0, 0)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_corrupt_remote_entry_is_reported_once_and_never_used(warm: Warm, damage: str) -> None:
    key = warm.server.keys()[0 if damage == "flip" else -1]
    value = warm.server.client.get(key)
    bad = value[:40] + bytes([value[40] ^ 0x01]) + value[41:] if damage == "flip" else value[: len(value) // 2]
    warm.server.client.set(key, bad)
    proc = warm.clone_build()
    warned = [line for line in proc.stdout.splitlines() if line.startswith("WARN: cache: corrupt entry")]
    short = key[len(remote_cache.KEY_PREFIX):]
    assert len(warned) == 1 and short in warned[0] and warm.server.url in warned[0], proc.stdout
    assert digests(warm.root / "clone-build" / "out") == warm.reference
    assert tier_line(proc.stdout, warm.server.url)[2] == 1
    remote_cache.unpack(warm.server.client.get(key), short)  # removed, rebuilt and pushed again whole


@needs_redis
def test_a_full_server_stops_the_pushes_with_one_warn_and_still_serves_reads(redis_server: RedisServer,
                                                                             tmp_path: Path) -> None:
    said: list[str] = []
    remote = remote_cache.Remote(redis_server.url, said.append)
    first = tmp_path / "first.o"
    first.write_bytes(b"f" * 100)
    assert remote.push_file("k0", str(first))
    used = int(redis_server.client.info("memory")["used_memory"])
    redis_server.client.config_set("maxmemory-policy", "noeviction")
    redis_server.client.config_set("maxmemory", str(used))  # full: every write is refused with OOM
    big = tmp_path / "big.o"
    big.write_bytes(os.urandom(1 << 20))
    assert not remote.push_file("k1", str(big)) and not remote.push_file("k2", str(big))
    assert len(said) == 1 and said[0].startswith(f"WARN: cache: CACHE_URL {redis_server.url} refused a push (OutOfMemoryError: command not allowed when used memory"), said
    assert "unreachable" not in said[0] and said[0].endswith("nothing more is pushed there this run, entries are "
                                                             "still read from it")
    value, missing = remote.pull(["k0", "k1"])
    assert missing is None and remote_cache.unpack(value, "k0")[1] == first.read_bytes() and remote.enabled


@needs_redis
def test_redis_killed_mid_build_costs_one_warn(warm: Warm, redis_server: RedisServer) -> None:
    build = warm.root / "killed"
    argv, env = scons_command("-j2", f"SRC={warm.src}", f"CACHE_URL={redis_server.url}", *warm.keys, build=build)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not redis_server.keys() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(redis_server.proc.pid, signal.SIGKILL)  # after the first push landed
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out
    warned = [line for line in out.splitlines() if line.startswith("WARN:")]
    assert len(warned) == 1 and warned[0].startswith(f"WARN: cache: CACHE_URL {redis_server.url} unreachable ("), out
    assert digests(build / "out") == warm.reference


@needs_redis
def test_two_builds_at_once_leave_every_entry_whole(warm: Warm, redis_server: RedisServer) -> None:
    cache = warm.root / "shared-local"
    runs = []
    for name in ("one", "two"):
        argv, env = scons_command("-j2", f"SRC={warm.src}", f"CACHE_URL={redis_server.url}", f"CACHE_DIR={cache}",
                                  *warm.keys, build=warm.root / name)
        runs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=600)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outputs
    said = [line for o in outputs for line in o.splitlines() if "WARN" in line or "Traceback" in line]
    assert not said, said
    for name in ("one", "two"):
        assert digests(warm.root / name / "out") == warm.reference
    local = [p for p in cache.rglob("*") if p.is_file() and p.parent != cache and not p.name.startswith(".")]
    assert len(local) == len(redis_server.keys()) == len(warm.server.keys())
    for entry in local:
        cache_entry.content_signature(entry, "sha256")  # raises CorruptEntry
    for key in redis_server.keys():
        remote_cache.unpack(redis_server.client.get(key), key.removeprefix(remote_cache.KEY_PREFIX))


@pytest.mark.parametrize("how", ["command line", "environment"])
def test_a_bad_cache_url_is_one_line_and_builds_nothing(tmp_path: Path, how: str) -> None:
    args, extra = (["CACHE_URL=http://cache:6379"], {}) if how == "command line" else (
        [], {"OPENCOTI_CACHE_URL": "http://cache:6379"})
    proc = scons(f"SRC={MINI_TREE}", *args, build=tmp_path, check=False, env_extra=extra)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"scons: error: CACHE_URL=http://cache:6379 is not a cache URL; use CACHE_URL={remote_cache.URL_FORMS}, "
        "or leave it empty"]
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_the_command_line_wins_over_the_environment(tmp_path: Path) -> None:
    proc = scons("-q", f"SRC={MINI_TREE}", "CACHE_URL=", build=tmp_path, check=False,
                 env_extra={"OPENCOTI_CACHE_URL": "http://cache:6379"})
    assert "CACHE_URL" not in proc.stderr and proc.returncode == 1  # read, validated, found not up to date
