"""Signed cache entries against a writer whose compiler is evil (docs/scale.md, "Signed entries").

CI (the trusted key) fills a redis-server on 127.0.0.1 (a free port, stopped by PID) and a CACHE_DIR shared
through a group (setgid, group-writable). Then an evil writer, whose ``g++`` first on PATH compiles a different
main.cpp under the same command line (so the same keys), pushes its main.cpp.o pair to both, signed by a key nobody
trusts; an attacker with Redis access also rewrites one of the pair unsigned. A reader with CACHE_TRUSTED_KEYS
links none of it: one WARN per problem and tier, main.cpp built locally, outputs equal to CI's clean build, and its
signed pushes replace the evil entries, so the next readers compile nothing. Without trusted keys the shared
CACHE_DIR is not read (one WARN). Keys are made with the commands docs/scale.md gives (openssl).
"""
from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import servers
from opencoti_build.cache import cache_entry, remote_cache, signing
from opencoti_build.report import summary

from scons_runs import MINI_TREE, scons

MAIN = "llamafile/main.cpp"
MARK = b"opencoti-evil-writer-was-here"
EVIL_GXX = """#!/bin/bash
# g++ that compiles another main.cpp under the same command line: the object cache's keys cannot tell
args=()
for arg in "$@"; do
    [[ "$arg" == */{main} ]] && arg={evil}
    args+=("$arg")
done
exec {gxx} "${{args[@]}}"
"""


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_keys(keys: Path, name: str) -> tuple[Path, Path]:
    """(private, public) PEM files, made as docs/scale.md says."""
    private, public = keys / f"{name}.pem", keys / f"{name}.pub"
    openssl("genpkey", "-algorithm", "ed25519", "-out", str(private))
    openssl("pkey", "-in", str(private), "-pubout", "-out", str(public))
    return private, public


def share_with_a_group(path: Path) -> str:
    """Make ``path`` a directory a group shares (setgid, group-writable), as a team sets one up: a group not the
    user's own private group (root may pick any; others one they belong to), else writable by others."""
    me = pwd.getpwuid(os.geteuid()).pw_name
    gids = [g.gr_gid for g in grp.getgrall()] if os.geteuid() == 0 else os.getgroups()
    shared = [gid for gid in gids if grp.getgrgid(gid).gr_name not in (me, "root")]
    if shared:
        os.chown(path, -1, shared[0])
        path.chmod(0o2775)
    else:
        path.chmod(0o1777)
    reason = signing.shared_reason(os.stat(path))
    assert reason is not None
    return reason


def digests(out: Path) -> dict[str, str]:
    root = out / "o"
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def warnings(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("WARN:")]


@dataclass
class Poisoned:
    root: Path
    server: servers.RedisServer
    trusted: Path  # CI's public key
    signing_key: Path  # CI's private key
    shared: Path  # the group's CACHE_DIR
    shared_reason: str
    reference: dict[str, str]  # CI's clean build
    steps: int
    evil_keys: list[str]  # the Redis keys of the evil main.cpp.o pair

    def build(self, name: str, *args: str, **kw) -> subprocess.CompletedProcess[str]:
        shutil.rmtree(self.root / name, ignore_errors=True)
        return scons(f"SRC={MINI_TREE}", *args, build=self.root / name, **kw)

    def trusting(self) -> str:
        return f"CACHE_TRUSTED_KEYS={self.trusted}"


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Poisoned]:
    if shutil.which("redis-server") is None or shutil.which("openssl") is None:
        pytest.skip("needs redis-server and openssl (scripts/install-deps)")
    root = tmp_path_factory.mktemp("signed")
    keys = root / "keys"
    keys.mkdir(mode=0o700)
    ci_private, ci_public = make_keys(keys, "ci")
    evil_private, _ = make_keys(keys, "evil")
    server = servers.RedisServer()
    try:
        shared = root / "shared"
        shared.mkdir()
        reason = share_with_a_group(shared)
        url = f"CACHE_URL={server.url}"
        # CI: trusted key, signs what it pushes to Redis and to the group's CACHE_DIR
        ci = scons(f"SRC={MINI_TREE}", url, f"CACHE_DIR={shared}", f"CACHE_SIGNING_KEY={ci_private}",
                   f"CACHE_TRUSTED_KEYS={ci_public}", build=root / "ci")
        reference = digests(root / "ci" / "out")
        # the evil writer: its g++ compiles another main.cpp; it reads nothing (no trusted keys) and pushes the
        # main.cpp.o pair, signed by its own key, over CI's entries in both shared tiers
        evil_bin = root / "evil-bin"
        evil_bin.mkdir()
        evil_main = root / "evil-main.cpp"
        evil_main.write_text(f'#include "{MINI_TREE / MAIN}"\n'
                             f'extern "C" __attribute__((used)) const char opencoti_evil[] = "{MARK.decode()}";\n')
        gxx = evil_bin / "g++"
        gxx.write_text(EVIL_GXX.format(main=MAIN, evil=evil_main, gxx=shutil.which("g++")))
        gxx.chmod(0o755)
        target = root / "evil" / "out" / "o" / "llamafile" / "main.cpp.o"
        evil = scons(f"SRC={MINI_TREE}", url, f"CACHE_DIR={shared}", f"CACHE_SIGNING_KEY={evil_private}",
                     str(target), build=root / "evil",
                     env_extra={"PATH": f"{evil_bin}{os.pathsep}{os.environ['PATH']}"})
        assert MARK in target.read_bytes() and summary.parse(evil.stdout)["compiled"] == 1, evil.stdout
        assert f"CACHE_DIR {shared} is shared ({reason}) and CACHE_TRUSTED_KEYS is not set" in evil.stdout
        pushed = [k for k in server.client.keys(remote_cache.KEY_PREFIX + "*")
                  if MARK in zstd_frame(server.client.get(k))]
        assert len(pushed) == 1, "the evil x86-64 main.cpp.o was not pushed"
        # ...and an attacker with Redis access rewrites the twin, unsigned (the build itself never pushes unsigned)
        twin = [k for k in server.client.keys(remote_cache.KEY_PREFIX + "*")
                if twin_of(server, k, pushed[0])]
        assert len(twin) == 1
        key = twin[0].decode().removeprefix(remote_cache.KEY_PREFIX)
        _, content, mode = remote_cache.unpack(server.client.get(twin[0]), key)
        server.client.set(twin[0], remote_cache.pack(content, mode, key))
        yield Poisoned(root, server, ci_public, ci_private, shared, reason, reference,
                       summary.parse(ci.stdout)["compiled"], [k.decode() for k in pushed + twin])
    finally:
        server.stop()


def zstd_frame(value: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdDecompressor().decompress(value[:-32])


def twin_of(server: servers.RedisServer, key: bytes, evil: bytes) -> bool:
    """Whether ``key`` holds the .aarch64 main.cpp.o the evil writer pushed with ``evil`` (signed by the same key)."""
    if key == evil:
        return False
    mine, theirs = zstd_frame(server.client.get(key)), zstd_frame(server.client.get(evil))
    keyid = slice(-(cache_entry.KEYID_BYTES + 1 + cache_entry.SIGNATURE_BYTES), -(1 + cache_entry.SIGNATURE_BYTES))
    return mine[keyid] == theirs[keyid]


@pytest.fixture(scope="module")
def reader(poisoned: Poisoned) -> subprocess.CompletedProcess[str]:
    """A reader trusting CI's key and signing with it, run once over the poisoned tiers: what the later tests see
    comes from its run, whichever of them runs first."""
    return poisoned.build("reader", f"CACHE_URL={poisoned.server.url}", f"CACHE_DIR={poisoned.shared}",
                          poisoned.trusting(), f"CACHE_SIGNING_KEY={poisoned.signing_key}")


def test_a_reader_trusting_ci_links_nothing_the_evil_writer_pushed(poisoned: Poisoned,
                                                                  reader: subprocess.CompletedProcess[str]) -> None:
    said = warnings(reader.stdout)
    local = [w for w in said if w.startswith("WARN: cache: untrusted entry in local: ")]
    remote = [w for w in said if w.startswith(f"WARN: cache: untrusted entry in {poisoned.server.url}: ")]
    assert len(said) == 3 and len(local) == 1 and len(remote) == 2, reader.stdout  # one per problem and tier
    assert "is signed by key" in local[0] and f"which CACHE_TRUSTED_KEYS={poisoned.trusted} does not hold" in local[0]
    assert sorted("is unsigned" in w for w in remote) == [False, True]
    assert all(w.endswith("(more like it are counted in the cache line)") and "main.cpp.o" in w for w in said)
    counts = summary.parse(reader.stdout)
    assert " / 2 untrusted" in reader.stdout and (counts["compiled"], counts["cached"]) == (1, poisoned.steps - 1)
    got = digests(poisoned.root / "reader" / "out")
    assert got == poisoned.reference  # CI's clean build, byte for byte
    assert MARK not in (poisoned.root / "reader" / "out" / "o" / "llamafile" / "llamafile").read_bytes()
    # nothing unvouched stays or is passed on: the reader's signed pushes replaced the evil entries in both tiers
    trust = signing.Policy(signing.load_trusted(poisoned.trusted), shared=True)
    for key in poisoned.server.client.keys(remote_cache.KEY_PREFIX + "*"):
        remote_cache.unpack(poisoned.server.client.get(key), key.decode().removeprefix(remote_cache.KEY_PREFIX), trust)
    for entry in (p for p in poisoned.shared.rglob("*") if p.is_file() and p.parent != poisoned.shared):
        cache_entry.check_trailer(entry, trust)


def test_entries_ci_signed_are_restored_from_redis_and_from_the_group_cache(
        poisoned: Poisoned, reader: subprocess.CompletedProcess[str]) -> None:
    """After the reader replaced the evil entries with its own, signed by CI's key: a build trusting that key is
    restored from either tier, compiling nothing."""
    assert reader.returncode == 0, reader.stdout + reader.stderr
    for name, args in (("from-redis", [f"CACHE_URL={poisoned.server.url}"]),
                       ("from-group", [f"CACHE_DIR={poisoned.shared}"])):
        proc = poisoned.build(name, *args, poisoned.trusting())
        counts = summary.parse(proc.stdout)
        assert (counts["compiled"], counts["cached"]) == (0, poisoned.steps), proc.stdout
        assert warnings(proc.stdout) == [] and "untrusted" not in proc.stdout, proc.stdout
        assert digests(poisoned.root / name / "out") == poisoned.reference


def test_a_group_cache_without_trusted_keys_is_not_read(poisoned: Poisoned) -> None:
    proc = poisoned.build("untrusting", "-n", f"CACHE_DIR={poisoned.shared}")
    assert warnings(proc.stdout) == [
        f"WARN: cache: CACHE_DIR {poisoned.shared} is shared ({poisoned.shared_reason}) and CACHE_TRUSTED_KEYS is not "
        f"set: not reading it, and nothing is pushed to it unsigned (set CACHE_TRUSTED_KEYS=FILE, or `chmod go-w "
        f"{poisoned.shared}` if it is yours alone, docs/scale.md; CACHE_SIGNING_KEY=PEM to push)"], proc.stdout
    assert re.search(rf"^would compile {poisoned.steps}, restore 0 from cache", proc.stdout, re.M), proc.stdout


@pytest.mark.parametrize("name", ["CACHE_SIGNING_KEY", "CACHE_TRUSTED_KEYS"])
def test_a_bad_key_file_is_one_line_and_writes_nothing(poisoned: Poisoned, name: str) -> None:
    bad = poisoned.root / "keys" / "not-a-key.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n")
    proc = poisoned.build("refused", f"{name}={bad}", check=False)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"scons: error: {name}={bad} ") and "openssl" in proc.stderr
    assert "not base64" not in proc.stderr + proc.stdout
    assert not (poisoned.root / "refused" / "out").exists() and not (poisoned.root / "refused" / "cache").exists()
