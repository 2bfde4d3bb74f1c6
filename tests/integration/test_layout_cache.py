"""One cache for every layout: a build filled the cache with the defaults (SRC inside the checkout, BUILD_DIR=build);
the same sources in another checkout, with SRC outside the checkout (absolute, or relative to it), with
BUILD_DIR=build-other, or with an absolute BUILD_DIR elsewhere compile nothing from it and give the same bytes:
every object and twin, the thin binary, each DSO whose toolchain is here, and the artifacts. The same again with
an empty local cache in front of the Redis tier. (The keys: opencoti_build/cache/cache_entry.py neutral_command.)
"""
from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import servers

from scons_runs import cache_keys, clone, scons

FIXTURE = Path("tests") / "fixtures" / "llamafile-mini"


@dataclass(frozen=True)
class Layout:
    checkout: Path
    src: str  # as given on the command line
    build_dir: str


def layouts(root: Path, first: Path, second: Path, outside: Path) -> dict[str, Layout]:
    return {
        "defaults": Layout(first, str(FIXTURE), "build"),
        "another checkout": Layout(second, str(FIXTURE), "build"),
        "SRC outside": Layout(first, str(outside), "build"),
        "SRC outside, relative": Layout(first, os.path.relpath(outside, first), "build"),
        "BUILD_DIR=build-other": Layout(first, str(FIXTURE), "build-other"),
        "BUILD_DIR elsewhere": Layout(first, str(FIXTURE), str(root / "elsewhere" / "out")),
    }


def have_gpu_toolchain() -> bool:
    return bool(shutil.which("glslc") or shutil.which("hipcc") or shutil.which("nvcc") or glob.glob("/usr/local/cuda*/bin/nvcc"))


def build(layout: Layout, root: Path, cache: Path, *extra: str) -> tuple[str, dict[str, str]]:
    """A build of ``layout`` from a fresh BUILD_DIR and dist dirs: (its output, sha256 of every output by name)."""
    out = layout.checkout / layout.build_dir
    dist, backends = root / "dist", root / "vendors-dist"
    for path in (out, dist, backends):
        shutil.rmtree(path, ignore_errors=True)
    gpu = [] if have_gpu_toolchain() else ["CPU_ONLY=1"]
    proc = scons("-j2", "package", "CUDA_ARCHS=80", *gpu, f"SRC={layout.src}", f"BUILD_DIR={layout.build_dir}",
                 f"CACHE_DIR={cache}", f"DIST_DIR={dist}", f"BACKEND_DIST_DIR={backends}",
                 f"COMPILEDB={root / 'compile_commands.json'}", *extra,
                 build=root, home=root / "home", project=layout.checkout)
    found = {}
    for name, top in (("o", out / "o"), ("backends", out / "backends"), ("dist", dist), ("vendors", backends)):
        for path in sorted(top.rglob("*")):
            if path.is_file():
                found[f"{name}/{path.relative_to(top)}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return proc.stdout, found


@dataclass
class Filled:
    """The layouts, and one cache (local, and Redis when redis-server is here) filled by the defaults' build."""

    root: Path
    cases: dict[str, Layout]
    cache: Path
    want: dict[str, str]  # the defaults' outputs
    redis: servers.RedisServer | None


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Filled]:
    root = tmp_path_factory.mktemp("layouts")
    first = clone(root / "a" / "x")
    second = clone(root / "bbbbbbbbbbbbbbbb" / "second-checkout")
    outside = root / "trees" / "llamafile-mini"
    shutil.copytree(first / FIXTURE, outside)  # the same bytes, __FILE__ probes included
    cases = layouts(root, first, second, outside)
    redis = servers.RedisServer() if shutil.which("redis-server") and importlib.util.find_spec("redis") else None
    try:
        url = [f"CACHE_URL={redis.url}", *cache_keys(root / "keys")] if redis else []  # Redis: signed entries only
        _, want = build(cases["defaults"], root, root / "cache", *url)  # fills both tiers
        assert any(name.endswith(".llamafile") for name in want) and any("/.aarch64/" in name for name in want)
        yield Filled(root, cases, root / "cache", want, redis)
    finally:
        if redis:
            redis.stop()


def misses(stdout: str, tier: str = "local") -> int:
    """A tier's misses in the build's cache line: every step that could come from the cache and did not."""
    found = re.search(rf"[:;] {re.escape(tier)} [1-9]\d* hits / (\d+) misses", stdout)
    assert found, stdout
    return int(found.group(1))


def test_every_layout_builds_from_one_local_cache_and_gives_the_same_bytes(filled: Filled) -> None:
    for name, layout in filled.cases.items():
        stdout, got = build(layout, filled.root, filled.cache)
        assert misses(stdout) == 0 and "FATCC" not in stdout, f"{name}:\n{stdout}"
        differ = sorted(k for k in set(got) | set(filled.want) if got.get(k) != filled.want.get(k))
        assert not differ, f"{name}: {len(differ)} outputs differ from the defaults' build: {differ[:8]}"


def test_every_layout_builds_from_the_redis_tier_alone(filled: Filled) -> None:
    if filled.redis is None:
        pytest.skip("needs redis-server and the redis client (scripts/install-deps)")
    for name, layout in filled.cases.items():
        local = filled.root / "empty-cache"
        shutil.rmtree(local, ignore_errors=True)
        stdout, got = build(layout, filled.root, local, f"CACHE_URL={filled.redis.url}",
                            *cache_keys(filled.root / "keys"))
        assert misses(stdout, filled.redis.url) == 0 and "FATCC" not in stdout, f"{name}:\n{stdout}"
        assert got == filled.want, f"{name}: outputs differ from the defaults' build"


def test_a_cold_build_in_another_layout_compiles_the_same_objects_and_twins(filled: Filled) -> None:
    """Not from the cache: SRC outside the checkout and given relative, BUILD_DIR elsewhere and named otherwise,
    compiled cold, give the defaults' objects, twins and thin binary byte for byte (the canonical prefix maps)."""
    layout = Layout(filled.cases["defaults"].checkout, filled.cases["SRC outside, relative"].src,
                    str(filled.root / "cold" / "out-elsewhere"))
    out = Path(layout.build_dir)
    proc = scons("-j2", f"SRC={layout.src}", f"BUILD_DIR={layout.build_dir}", "CACHE_DIR=",
                 f"COMPILEDB={filled.root / 'cold.json'}", build=filled.root, home=filled.root / "home",
                 project=layout.checkout)
    assert "FATCC" in proc.stdout
    got = {f"o/{p.relative_to(out / 'o')}": hashlib.sha256(p.read_bytes()).hexdigest()
           for p in sorted((out / "o").rglob("*")) if p.is_file()}
    want = {name: digest for name, digest in filled.want.items() if name.startswith("o/")}
    assert any("/.aarch64/" in name for name in got)
    differ = sorted(k for k in got if got[k] != want.get(k))  # (the defaults' package run wrote more under o/)
    assert not differ, f"{len(differ)} of {len(got)} host outputs differ from the defaults' build: {differ[:8]}"
