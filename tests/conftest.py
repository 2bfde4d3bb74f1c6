"""The test tiers (docs/testing.md) and the fixtures every tier shares.

A test's tier is the directory it lives in, and each tier is also a marker (``-m unit`` ...):

- ``tests/unit/``: in-process tests of the core; they start no process (tests/unit/conftest.py refuses one).
- ``tests/integration/``: real builds of the miniature tree with the real compilers.
- ``tests/soak/``: the seeded fault-injection and differential suites. A test marked
  ``trials(full=N, per_run=K)`` runs K trials (``--long``: N) under a seed derived from the commit, so every
  landing tries new schedules; the seed is printed at the end, and ``--seed S`` replays a run.
- ``tests/realtree/``: builds of a real llama.cpp tree over a persistent cache; they run where that cache is
  warm, or with ``--long`` (which warms it).
"""
from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import leftovers
from scons_runs import MINI_TREE, NVCC13_ROOT, PROJECT, scons

TIERS = ("unit", "integration", "soak", "realtree")
# The seed when the checkout is no git repository (a tarball): fixed, and printed like any other.
FALLBACK_SEED = 20261203
# The groups that take longest on 2 cores, longest first: scripts/test hands groups to workers in collection
# order (--no-loadscope-reorder), so these start at once and the short modules fill in around them.
LONGEST_GROUPS = ("tests/realtree/test_native_realtree.py", "tests/soak/test_null_build.py", "faults-kill",
                  "faults-cache", "faults-remote")
_SEED = pytest.StashKey[int]()
_STATUS = pytest.StashKey[frozenset[str] | None]()  # the checkout's git status when the run started
_LEFT = pytest.StashKey[list[str]]()  # what the run left in it


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opencoti", "opencoti test tiers (docs/testing.md)")
    group.addoption("--long", action="store_true",
                    help="the soak tier at full counts, and the real-tree tier even when its cache is cold")
    group.addoption("--seed", type=int, default=None,
                    help="the soak tier's seed (default: derived from the commit, printed at the end)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "trials(full, per_run): a seeded soak family; `trial` runs per_run "
                                       "trials per run, full with --long")
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: a test of the {tier} tier (tests/{tier}/, docs/testing.md)")


def soak_seed(config: pytest.Config) -> int:
    """--seed, else the commit's first 32 bits (each landing gets new schedules), else FALLBACK_SEED."""
    if _SEED not in config.stash:
        seed = config.getoption("seed")
        if seed is None:
            try:
                head = subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "HEAD"], capture_output=True,
                                      text=True).stdout.strip()
            except OSError:
                head = ""
            seed = int(head[:8], 16) if len(head) >= 8 else FALLBACK_SEED
        config.stash[_SEED] = seed
    return config.stash[_SEED]


def trial_count(config: pytest.Config, full: int, per_run: int) -> int:
    """How many trials a soak family runs: its full count with --long, its slice otherwise."""
    return full if config.getoption("long") else min(per_run, full)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("trials")
    if marker is not None and "trial" in metafunc.fixturenames:
        metafunc.parametrize("trial", range(trial_count(metafunc.config, **marker.kwargs)))


def tier_of(item: pytest.Item) -> str:
    parts = Path(str(item.path)).relative_to(PROJECT / "tests").parts
    if len(parts) < 2 or parts[0] not in TIERS:
        raise pytest.UsageError(f"{item.nodeid}: a test belongs under one of tests/{{{','.join(TIERS)}}}/")
    return parts[0]


def xdist_group(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    return str(marker.args[0]) if marker is not None and marker.args else ""


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test gets its tier's marker. Under pytest-xdist's ``--dist loadgroup`` (scripts/test), a module's
    tests run on one worker, in order, with its module fixtures built once, unless they name an
    ``xdist_group`` of their own (the fault suite's workspaces: each group keeps its seeded trials' order, so
    a failure reproduces). The longest groups come first."""
    for item in items:
        tier = tier_of(item)
        item.add_marker(tier)
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    rank = {group: n for n, group in enumerate(LONGEST_GROUPS)}
    items.sort(key=lambda item: rank.get(xdist_group(item), len(rank)))  # stable: each group keeps its order


def tier_dir_in(arg: str, tier: str) -> bool:
    """Whether the command-line path ``arg`` (``path[::test]``) takes in tests/<tier>/ or part of it."""
    path = Path(arg.split("::", 1)[0]).resolve()
    tier_dir = PROJECT / "tests" / tier
    return path == tier_dir or path in tier_dir.parents or tier_dir in path.parents


def soak_line(config: pytest.Config) -> str:
    long = config.getoption("long")
    counts = "full counts (--long)" if long else "a slice of each family (--long: full counts)"
    replay = f"scripts/test{' --long' if long else ''} --seed {soak_seed(config)} tests/soak"
    return f"soak: seed {soak_seed(config)}, {counts}; replay: {replay}"


def runs_soak(config: pytest.Config) -> bool:
    return any(tier_dir_in(arg, "soak") for arg in config.args)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [soak_line(config)] if runs_soak(config) else []


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the run's own process, not a pytest-xdist worker
        session.config.stash[_STATUS] = leftovers.status(PROJECT)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The tiers leave the checkout as they found it (tests/leftovers.py): a run that left anything there fails,
    naming it (in the summary below)."""
    before = session.config.stash.get(_STATUS, None)
    after = leftovers.status(PROJECT) if before is not None else None
    left = leftovers.left(before, after) if before is not None and after is not None else []
    if left:
        session.config.stash[_LEFT] = left
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The seed again at the end, where -q (scripts/test) shows it: the header is hidden under -q. Then what the run
    left in the checkout, if anything."""
    if runs_soak(config):
        terminalreporter.write_line(soak_line(config))
    left = config.stash.get(_LEFT, [])
    if left:
        terminalreporter.section("left in the checkout", sep="=", red=True, bold=True)
        terminalreporter.write_line(f"the run changed {len(left)} entr{'y' if len(left) == 1 else 'ies'} of "
                                    f"`git status --porcelain --ignored` in {PROJECT}; a test must write under its "
                                    "tmp_path (another process writing there meanwhile shows up too: rerun):")
        for line in left:
            terminalreporter.write_line(f"  {line}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # noqa: ANN201 (a hook wrapper)
    """A failed soak test says how to replay it: its module (whose trials share workspaces), in order, under
    this run's seed and counts."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and item.get_closest_marker("soak") is not None:
        counts = " --long" if item.config.getoption("long") else ""
        module = item.nodeid.split("::", 1)[0]
        report.sections.append(("soak", f"replay: scripts/test -n 0{counts} --seed {soak_seed(item.config)} {module}"))


@pytest.fixture(scope="session")
def seed(pytestconfig: pytest.Config) -> int:
    """The soak tier's seed for this run (see soak_seed)."""
    return soak_seed(pytestconfig)


@pytest.fixture(scope="session")
def soak_count(pytestconfig: pytest.Config) -> Callable[[int, int], int]:
    """trial_count for a family that counts its own rounds: ``soak_count(full, per_run)``."""
    return lambda full, per_run: trial_count(pytestconfig, full, per_run)


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
