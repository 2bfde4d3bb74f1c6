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


@pytest.fixture(scope="session")
def native_realtree(pytestconfig: pytest.Config) -> PersistentBuild:
    """The native lane's persistent build of the sdist's llama.cpp (OPENCOTI_NATIVE_CACHE, OPENCOTI_NATIVE_BUILD);
    the test is skipped while it is cold, unless --long."""
    cache = Path(os.environ.get("OPENCOTI_NATIVE_CACHE", Path.home() / ".cache" / "opencoti" / "native-cache"))
    persistent = PersistentBuild(cache, Path(os.environ.get("OPENCOTI_NATIVE_BUILD", cache.parent / "native-realtree")))
    if not persistent.warm and not pytestconfig.getoption("long"):
        pytest.skip(f"the real-tree cache {cache} is cold (a cold build takes 10+ minutes on 2 cores); "
                    "`scripts/test --long` builds it, and later runs take this tier")
    return persistent


@pytest.fixture(scope="session")
def fat_realtree(pytestconfig: pytest.Config) -> PersistentBuild:
    """The fat lane's persistent build of a private copy of the sdist's llama.cpp (OPENCOTI_FAT_CACHE,
    OPENCOTI_FAT_BUILD; native_support.private_checkout); skipped while it is cold, unless --long."""
    cache = Path(os.environ.get("OPENCOTI_FAT_CACHE", Path.home() / ".cache" / "opencoti" / "fat-cache"))
    persistent = PersistentBuild(cache, Path(os.environ.get("OPENCOTI_FAT_BUILD", cache.parent / "fat-realtree")))
    if not persistent.warm and not pytestconfig.getoption("long"):
        pytest.skip(f"the fat real-tree cache {cache} is cold (a cold build takes an hour or more on 2 cores); "
                    "`scripts/test --long` builds it, and later runs take this tier")
    return persistent
