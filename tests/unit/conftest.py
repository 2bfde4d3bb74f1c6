"""The unit tier starts no process: while one of its tests runs (setup and teardown included), starting a
subprocess, forking or exec'ing raises, so a test that needs a real build or tool fails here and belongs in
tests/integration/."""
from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path

import pytest

# The audit events (PEP 578) of every way CPython starts a process.
PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn",
                            "os.system", "os.exec", "os.startfile"})


class ProcessStarted(RuntimeError):
    """A unit test tried to start a process."""


class _Guard:
    """Refuses process starts while armed. An audit hook cannot be removed, so it is added once and armed
    only around unit tests (integration tests share the worker)."""

    armed = False

    @classmethod
    def hook(cls, event: str, args: tuple[object, ...]) -> None:
        if cls.armed and event in PROCESS_EVENTS:
            raise ProcessStarted(f"a unit test started a process ({event} {args[:1]!r}); "
                                 "move it to tests/integration/")


sys.addaudithook(_Guard.hook)


UNIT_DIR = Path(__file__).parent


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    # pytest calls this hook of every conftest it has loaded, for every test: arm only for this tier's own
    _Guard.armed = UNIT_DIR in Path(str(item.path)).parents
    try:
        yield
    finally:
        _Guard.armed = False


@pytest.fixture(autouse=True, scope="session")
def _signatures_outside_the_checkout(tmp_path_factory: pytest.TempPathFactory) -> Generator[None, None, None]:
    """SCons opens its signature database (``.sconsign.dblite``, created when absent) in the working directory the
    first time a node's stored record is asked for, as the tests over real SCons nodes do (test_progress,
    test_null_build_recorder, test_engine, ...): in a directory of the session's instead of the checkout's top."""
    import SCons.SConsign

    name = SCons.SConsign.DB_Name
    SCons.SConsign.DB_Name = str(tmp_path_factory.mktemp("sconsign") / ".sconsign")
    yield
    SCons.SConsign.DB_Name = name
