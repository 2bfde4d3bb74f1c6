"""Shared test helpers: run the real build (scons subprocess) on copies of the miniature tree."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opencoti_build import summary, versioning

PROJECT = Path(__file__).resolve().parents[1]
MINI_TREE = PROJECT / "tests" / "fixtures" / "llamafile-mini"
MINI_VERSION = versioning.llamafile_version(MINI_TREE)
# The CUDA 13 toolkit the CUDA tests compile with (they skip without it).
NVCC13_ROOT = Path(os.environ.get("OPENCOTI_TEST_CUDA13", "/usr/local/cuda-13.0"))


# The groups that take longest on 2 cores, longest first: scripts/test hands groups to workers in collection
# order (--no-loadscope-reorder), so these start at once and the short modules fill in around them.
LONGEST_GROUPS = ("tests/test_native_realtree.py", "tests/test_null_build.py", "faults-kill", "faults-cache",
                  "faults-remote")


def xdist_group(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return str(marker.args[0]) if marker is not None and marker.args else ""


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist's ``--dist loadgroup`` (scripts/test), a module's tests run on one worker, in order,
    with its module fixtures built once, unless they name an ``xdist_group`` of their own (the fault suite's
    workspaces: each group keeps its seeded trials' order, so a failure reproduces). The longest groups
    come first."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    rank = {group: n for n, group in enumerate(LONGEST_GROUPS)}
    items.sort(key=lambda item: rank.get(xdist_group(item), len(rank)))  # stable: each group keeps its order


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
    env.pop("OPENCOTI_CACHE_URL", None)  # a developer's shared cache stays out of the tests (they pass their own)
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


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A private copy of the miniature tree, free to edit."""
    copy = tmp_path / "src"
    shutil.copytree(MINI_TREE, copy)
    return copy


@pytest.fixture(scope="session")
def built_mini(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One clean build of the miniature tree in place (read-only for the tests that use it)."""
    build = tmp_path_factory.mktemp("built-mini")
    scons(f"SRC={MINI_TREE}", build=build)
    return build


@pytest.fixture(scope="session")
def nvcc13() -> Path:
    """nvcc of the CUDA 13 toolkit at NVCC13_ROOT (env OPENCOTI_TEST_CUDA13); the test is skipped without it."""
    nvcc = NVCC13_ROOT / "bin" / "nvcc"
    if not nvcc.exists():
        pytest.skip(f"needs nvcc 13 at {nvcc} (or set OPENCOTI_TEST_CUDA13)")
    return nvcc


def dso_paths(backend: str, build: Path) -> tuple[Path, Path]:
    """(the DSO under BACKEND_DIST_DIR, its mirror under HOME) of a scons run with outputs under ``build``."""
    name = f"ggml-{backend}.so"
    return (build / "vendors-dist" / "llamafile" / backend / MINI_VERSION / name,
            build / "home" / ".llamafile" / "v" / MINI_VERSION / name)


def copy_checkout(dest: Path) -> Path:
    """What a second clone holds for a build: the build description and the fixture."""
    for name in ("SConstruct", "build.SConscript"):
        shutil.copy2(PROJECT / name, dest / name)
    for name in ("site_scons", "host", "backends", "package", "native", "vendors"):
        shutil.copytree(PROJECT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "dist"))
    return dest
