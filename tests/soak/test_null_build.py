"""The null build's fast path (opencoti_build/incremental/null_build/) against a full SCons evaluation.

A differential test: seeded random rounds, each applying one mutation to a private checkout (SConstruct,
SConscripts, site_scons and the miniature tree, in a git repository), then asking a full evaluation
(`scons -q`, which never takes the fast path) whether the targets are current, and building. The fast
path may answer "nothing to do" only when `scons -q` says current; a build after which `scons -q` says
current must have done nothing; the run after a successful build must take the fast path (it is not
merely always off). Every ``CLEAN_EVERY`` rounds and at the end, the outputs equal a clean build's. The
rounds run in ``STREAMS`` streams side by side, each on a checkout of its own with a seed of its own.

A run takes a slice of the 200 rounds under the commit's seed, ``--long`` all of them; ``--seed`` replays a run
(tests/conftest.py, docs/testing.md).
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from null_build_checkout import MUTATIONS, Checkout, assert_equals_clean_build, prepare
from scons_runs import summary

ROUNDS, ROUNDS_PER_RUN = 200, 32
STREAMS = 4
CLEAN_EVERY = 25


def run_stream(co: Checkout, seed: int, stream: int, rounds: int) -> int:
    """One stream of the differential test: ``rounds`` seeded rounds on its checkout; its fast rounds."""
    fast_rounds = 0
    history: list[str] = []
    for number in range(1, rounds + 1):
        did = co.rng.choice(MUTATIONS)(co)
        history.append(f"{number}: {did}")
        label = f"seed {seed} stream {stream} round {number} ({did}; before: {history[-6:-1]})"
        question = co.run("-q")
        assert question.returncode in (0, 1, 2), label  # 2: the tree no longer builds (a deleted source)
        before = co.record_stat()
        build = co.run()
        fast = before is not None and co.record_stat() == before and build.returncode == 0
        if fast:
            fast_rounds += 1
            assert question.returncode == 0, f"{label}: fast path said nothing to do, scons -q said not current"
        counts = summary.parse(build.stdout)
        if question.returncode == 0:
            assert build.returncode == 0 and counts and counts["compiled"] == counts["cached"] == 0, \
                f"{label}: scons -q said current, the build did work:\n{build.stdout}{build.stderr}"
        if build.returncode != 0:
            assert co.deleted, f"{label}: the build failed:\n{build.stdout}{build.stderr}"
            continue
        after, why = co.record_stat(), co.why_not_fast()
        assert why is None, f"{label}: the run after a successful build would take the full path: {why}"
        if not fast:  # a fast build was itself that run
            assert co.run().returncode == 0 and co.record_stat() == after, \
                f"{label}: the run after a successful build did not take the fast path"
        if question.returncode != 0:  # otherwise the build did nothing (asserted): the tree is as scons -q saw it
            assert co.run("-q").returncode == 0, f"{label}: not current after a successful build"
        if number % CLEAN_EVERY == 0 and not co.deleted:
            assert_equals_clean_build(co, label)
    for path, data in co.deleted.items():
        path.write_bytes(data)
    co.run(check=True)
    assert_equals_clean_build(co, f"seed {seed} stream {stream} end")
    return fast_rounds


@pytest.mark.skipif(not shutil.which("glslc"), reason="the rounds build the Vulkan DSO too (glslc)")
def test_fast_path_agrees_with_a_full_evaluation(tmp_path: Path, seed: int,
                                                  soak_count: Callable[[int, int], int]) -> None:
    # The rounds run as STREAMS independent streams, each its own checkout and seed, side by side: a round is
    # mostly SCons reading the SConscripts on one core, so the streams share the machine's cores. They share
    # one object cache (keys do not depend on the checkout's path), as two checkouts of a team may.
    rounds = soak_count(ROUNDS, ROUNDS_PER_RUN)
    counts = [rounds // STREAMS + (stream < rounds % STREAMS) for stream in range(STREAMS)]
    # The first checkout builds alone: the others' first builds then come from the cache, not four cold builds.
    checkouts = [prepare(tmp_path / "co0", tmp_path / "cache", seed, 0)]
    with ThreadPoolExecutor(max_workers=min(STREAMS, max(2, os.cpu_count() or 2))) as pool:
        checkouts += pool.map(lambda stream: prepare(tmp_path / f"co{stream}", tmp_path / "cache", seed, stream),
                              range(1, STREAMS))
        streams = [pool.submit(run_stream, co, seed, stream, count)
                   for stream, (co, count) in enumerate(zip(checkouts, counts)) if count]
        fast_rounds = [future.result() for future in streams]  # the first failing stream's assertion
    assert sum(counts) == rounds
    assert sum(fast_rounds) > 0, "the fast path never answered in any round"
