"""Helpers of the tests that run the real build (scons subprocesses) on copies of the miniature tree."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench.sharedbench import cache_keys  # the same key pair the bench makes; tests import it from here
from opencoti_build.config import buildvars, versioning
from opencoti_build.report import summary

PROJECT = Path(__file__).resolve().parents[1]
MINI_TREE = PROJECT / buildvars.MINI_TREE
MINI_VERSION = versioning.llamafile_version(MINI_TREE)
# The CUDA 13 toolkit the CUDA tests compile with (they skip without it).
NVCC13_ROOT = Path(os.environ.get("OPENCOTI_TEST_CUDA13", "/usr/local/cuda-13.0"))


def scons_command(*args: str, build: Path, home: Path | None = None, project: Path = PROJECT,
                  env_extra: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of a scons run on ``project`` with outputs under ``build`` (BUILD_DIR, dists, cache unless given)."""
    defaults = {
        "BUILD_DIR": str(build / "out"),
        "CACHE_DIR": str(build / "cache"),
        "DIST_DIR": str(build / "dist"),
        "BACKEND_DIST_DIR": str(build / "vendors-dist"),
        "COMPILEDB": str(build / "compile_commands.json"),
    }
    given = {a.split("=", 1)[0] for a in args if "=" in a and not a.startswith("-")}
    argv = [sys.executable, "-m", "SCons", "-C", str(project), "-Q"]
    argv += [f"{k}={v}" for k, v in defaults.items() if k not in given] + list(args)
    # The stand-in, explicitly: tests never download cosmocc (a test of provisioning overrides this).
    env = dict(os.environ, HOME=str(home or build / "home"), OPENCOTI_COSMOCC="stand-in")
    for name in ("OPENCOTI_CACHE_URL", "OPENCOTI_CACHE_SIGNING_KEY", "OPENCOTI_CACHE_TRUSTED_KEYS", "OPENCOTI_CACHE_TOKEN",
                 "OPENCOTI_CACHE_TOKEN_FILE", "OPENCOTI_CACHE_TOKEN_HEADER", "OPENCOTI_CACHE_TLS_CA",
                 "OPENCOTI_CACHE_TLS_CERT", "OPENCOTI_CACHE_TLS_KEY"):
        env.pop(name, None)  # a developer's shared cache, keys and credentials stay out of the tests (they pass their own)
    env.update(env_extra or {})
    Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
    return argv, env


def scons(*args: str, build: Path, home: Path | None = None, check: bool = True, project: Path = PROJECT,
          env_extra: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run scons on ``project`` with outputs under ``build`` (BUILD_DIR, dists, cache unless given)."""
    argv, env = scons_command(*args, build=build, home=home, project=project, env_extra=env_extra)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"scons {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def compiled(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The fat objects a build compiled (one ``FATCC <x86 object> (+ .aarch64)`` line each)."""
    return sorted(line.split()[1] for line in summary.unprefixed(proc.stdout) if line.startswith("FATCC "))


def dso_paths(backend: str, build: Path) -> tuple[Path, Path]:
    """(the DSO under BACKEND_DIST_DIR, its mirror under HOME) of a scons run with outputs under ``build``."""
    name = f"ggml-{backend}.so"
    return (build / "vendors-dist" / "llamafile" / backend / MINI_VERSION / name,
            build / "home" / ".llamafile" / "v" / MINI_VERSION / name)


BUILD_FILES = ("SConstruct", "build.SConscript")
BUILD_DIRS = ("host", "backends", "package", "native", "site_scons", "vendors")
NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", "sources", "dist", "applied-series.json")
# (file in the tree, lines appended): __FILE__ in host C (the fat build and every DSO's ggml core),
# Vulkan's C++, and ggml-cuda's host and device code (nvcc and hipcc)
FILE_PROBES = (
    ("llama.cpp/ggml/src/ggml.c", "const char *opencoti_probe_c = __FILE__;\n"),
    ("llama.cpp/ggml/src/ggml-vulkan/ggml-vulkan.cpp", "const char *opencoti_probe_vk = __FILE__;\n"),
    ("llama.cpp/ggml/src/ggml-cuda/scale.cu",
     'extern "C" const char *opencoti_probe_cu = __FILE__;\n'
     "__global__ void opencoti_probe_kernel(char *p) {\n"
     "    const char *f = __FILE__;\n"
     "    for (int i = 0; f[i]; ++i) p[i] = f[i];\n"
     "}\n"),
)


def copy_checkout(dest: Path) -> Path:
    """What a second clone holds for a build: the build description and the fixture."""
    for name in BUILD_FILES:
        shutil.copy2(PROJECT / name, dest / name)
    for name in BUILD_DIRS:
        shutil.copytree(PROJECT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "dist"))
    return dest


def clone(dest: Path) -> Path:
    """What the build reads, copied to ``dest``, with the miniature tree (+ the probes) at tests/fixtures."""
    dest.mkdir(parents=True)
    for name in BUILD_FILES:
        shutil.copy2(PROJECT / name, dest / name)
    for name in BUILD_DIRS:
        shutil.copytree(PROJECT / name, dest / name, ignore=NOT_COPIED, symlinks=True)
    tree = dest / "tests" / "fixtures" / "llamafile-mini"
    shutil.copytree(MINI_TREE, tree, symlinks=True)
    for rel, lines in FILE_PROBES:
        with open(tree / rel, "a", encoding="utf-8") as fh:
            fh.write("\n" + lines)
    return dest


def output_digests(out: Path) -> dict[str, str]:
    """sha256 of every file under a BUILD_DIR's o/ (objects, their .aarch64 twins, archives, links)."""
    root = out / "o"
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def shared_tier_counts(stdout: str, url: str) -> tuple[int, int, int, int]:
    """(hits, misses, corrupt, pushed) of the shared tier at ``url`` (Redis, REAPI) in a build's cache line."""
    found = re.search(rf"^cache: local .*; {re.escape(url)} (\d+) hits / (\d+) misses / (\d+) corrupt / (\d+) pushed$",
                      stdout, re.M)
    assert found, stdout
    return tuple(int(n) for n in found.groups())  # type: ignore[return-value]


class SharedTierCheckouts:
    """What the shared tiers' tests (Redis, REAPI) build: a private copy of the mini tree, a key pair every build signs
    with and trusts (a shared tier is read only signed), and a second clone of the project at another path. ``url``
    is the tier's CACHE_URL, set by the test module."""

    url = ""
    steps = 0  # what the first build pushed (set by the test module) ...
    reference: dict[str, str] = {}  # ... and its outputs' digests

    def __init__(self, root: Path) -> None:
        self.root = root
        self.src = root / "src"
        shutil.copytree(MINI_TREE, self.src)
        self.keys = cache_keys(root / "keys")
        self.clone = root / "second-clone-at-another-path"
        self.clone.mkdir()
        copy_checkout(self.clone)

    def build(self, build: Path, *args: str, project: Path | None = None, **kw) -> subprocess.CompletedProcess[str]:
        return scons("-j2", f"SRC={self.src}", *args, build=build, **({"project": project} if project else {}), **kw)

    def clone_build(self) -> subprocess.CompletedProcess[str]:
        """A build in the second clone with an empty local cache (OPENCOTI_CACHE_URL names the tier, and the
        environment the keys)."""
        build = self.root / "clone-build"
        shutil.rmtree(build, ignore_errors=True)
        keys = {f"OPENCOTI_{arg.split('=', 1)[0]}": arg.split("=", 1)[1] for arg in self.keys}
        return self.build(build, project=self.clone, env_extra={"OPENCOTI_CACHE_URL": self.url, **keys})

    def clone_from_the_tier(self) -> tuple[subprocess.CompletedProcess[str], tuple[int, int, int, int]]:
        """The second clone's build with an empty local cache: nothing compiled, every step restored, its outputs
        (both halves of the fat objects among them) the first build's; the run, and its tier counts (hits, misses,
        corrupt, pushed)."""
        proc = self.clone_build()
        counts = summary.parse(proc.stdout)
        assert (counts["compiled"], counts["cached"]) == (0, self.steps), proc.stdout
        got = output_digests(self.root / "clone-build" / "out")
        assert got == self.reference and any("/.aarch64/" in name for name in got)
        return proc, shared_tier_counts(proc.stdout, self.url)
