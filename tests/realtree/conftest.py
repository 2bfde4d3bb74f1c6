"""The real-tree tier builds over a persistent cache, so a rerun costs minutes, not the cold build's ten or more.

Where that cache is cold (a fresh machine, CI) these tests are skipped, saying so, unless ``--long`` is given:
``scripts/test --long`` (or ``python3 -m pytest --long tests/realtree``) builds them cold and leaves the cache
warm for the runs after it. A build that completes marks the cache warm (native_support.PersistentBuild).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from native_support import PersistentBuild


def persistent_build(pytestconfig: pytest.Config, lane: str, cold_cost: str) -> PersistentBuild:
    """``lane``'s cache (OPENCOTI_<LANE>_CACHE, default ~/.cache/opencoti/<lane>-cache) and build directory
    (OPENCOTI_<LANE>_BUILD, default <lane>-realtree beside it); the test is skipped while it is cold, unless --long."""
    var = f"OPENCOTI_{lane.upper()}"
    cache = Path(os.environ.get(f"{var}_CACHE", Path.home() / ".cache" / "opencoti" / f"{lane}-cache"))
    persistent = PersistentBuild(cache, Path(os.environ.get(f"{var}_BUILD", cache.parent / f"{lane}-realtree")))
    if not persistent.warm and not pytestconfig.getoption("long"):
        pytest.skip(f"the {lane} real-tree cache {cache} is cold (a cold build takes {cold_cost} on 2 cores); "
                    "`scripts/test --long` builds it, and later runs take this tier")
    return persistent


@pytest.fixture(scope="session")
def native_realtree(pytestconfig: pytest.Config) -> PersistentBuild:
    """The native lane's persistent build of the sdist's llama.cpp."""
    return persistent_build(pytestconfig, "native", "10+ minutes")


@pytest.fixture(scope="session")
def fat_realtree(pytestconfig: pytest.Config) -> PersistentBuild:
    """The fat lane's persistent build of a private copy of the sdist's llama.cpp (native_support.private_checkout)."""
    return persistent_build(pytestconfig, "fat", "an hour or more")


@pytest.fixture(scope="session")
def real_fat(pytestconfig: pytest.Config) -> PersistentBuild:
    """The fat lane's persistent build of a private copy of the sdist's llama.cpp with a real cosmocc
    (tests/realtree/test_real_cosmocc.py): OPENCOTI_REALFAT_CACHE and OPENCOTI_REALFAT_BUILD."""
    return persistent_build(pytestconfig, "realfat", "about 80 minutes")
