"""The build server against one-shot scons: seeded differential rounds.

Each round applies one of the null build's differential mutations (tests/null_build_checkout.py: edits of
sources, headers, device code and the build's own code, touches, deletions, shadowing headers, globbed files,
variables, environment, the compiler, outputs, commits, the patch series, stray DSOs) to a private checkout,
asks a one-shot full evaluation (`scons -q`) whether the targets are current, then builds through the server
(through `python3 -m opencoti_build build` or the C client, picked per request by the seed). The server may answer from the record only when `scons -q` said current; when
`scons -q` said current the request must have done nothing; after a successful request `scons -q` must say
current and the next request must be answered from the record (the watcher is no mere "always run"). A mutation
of the variables gives another configuration: the client then runs scons itself, and the round restarts the
server for the new variables. Every ``CLEAN_EVERY`` rounds and at the end, the outputs equal a clean one-shot
build's.

A second family kills whatever holds the build directory's lock while a request is served (the reader building
it, a forked run, or the next reader reading ahead) with SIGKILL to its process group, at a seeded moment; the
request after it must build, leave `scons -q` current and give a clean build's outputs.

A run takes a slice of the rounds under the commit's seed, ``--long`` all of them; ``--seed`` replays a run.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from opencoti_build.incremental import build_lock
from opencoti_build.server import protocol, request_loop

from null_build_checkout import MUTATIONS, Checkout, assert_equals_clean_build, edit_header, edit_source, prepare
from scons_runs import summary
from server_runs import Server, build, native_build, popen_build, request_args, start

ROUNDS, ROUNDS_PER_RUN = 60, 8
CLEAN_EVERY = 10
KILLS, KILLS_PER_RUN = 12, 1


def run_rounds(co: Checkout, seed: int, rounds: int) -> None:
    """The rounds on one checkout, through a server started for its variables."""
    server: Server = start(co)
    history: list[str] = []
    try:
        for number in range(1, rounds + 1):
            did = co.rng.choice(MUTATIONS)(co)
            history.append(f"{number}: {did}")
            label = f"seed {seed} round {number} ({did}; before: {history[-6:-1]})"
            if server.variables != _variables(co):
                outside = build(co)  # another configuration: no server for it yet, so scons itself
                assert summary.parse(outside.stdout) or outside.returncode != 0, f"{label}: {outside.stderr}"
                server.stop()
                server = start(co)
            question = co.run("-q")
            assert question.returncode in (0, 1, 2), label  # 2: the tree no longer builds (a deleted source)
            answered = len(server.answers())
            client, other = co.rng.sample([build, lambda co: native_build(co, server)], 2)
            result = client(co)
            answers = server.answers()
            assert len(answers) == answered + 1, f"{label}: the request did not reach the server"
            counts = summary.parse(result.stdout)
            if answers[-1] == request_loop.NULL_ANSWER:
                assert question.returncode == 0, f"{label}: the server answered from the record, scons -q said not current"
            if question.returncode == 0:
                assert result.returncode == 0 and counts and counts["compiled"] == counts["cached"] == 0, \
                    f"{label}: scons -q said current, the request did work:\n{result.stdout}{result.stderr}"
            if result.returncode != 0:
                assert co.deleted, f"{label}: the request failed:\n{result.stdout}{result.stderr}"
                continue
            assert co.run("-q").returncode == 0, f"{label}: not current after a successful request"
            again = other(co)  # the record holds for either client: the same request
            assert again.returncode == 0 and server.answers()[-1] == request_loop.NULL_ANSWER, \
                f"{label}: the request after a successful one was not answered from the record:\n{again.stdout}"
            if number % CLEAN_EVERY == 0 and not co.deleted:
                assert_equals_clean_build(co, label)
        for path, data in co.deleted.items():
            path.write_bytes(data)
        assert build(co).returncode == 0
        assert_equals_clean_build(co, f"seed {seed} end")
    finally:
        server.stop()


def _variables(co: Checkout) -> list[str]:
    return protocol.configuration(request_args(co)[0])


@pytest.mark.skipif(not shutil.which("glslc"), reason="the rounds build the Vulkan DSO too (glslc)")
def test_the_server_agrees_with_a_full_evaluation_and_a_clean_build(tmp_path: Path, seed: int,
                                                                    soak_count: Callable[[int, int], int]) -> None:
    co = prepare(tmp_path / "co", tmp_path / "cache", seed, 0)
    co.rng = random.Random(f"{seed}/server")
    run_rounds(co, seed, soak_count(ROUNDS, ROUNDS_PER_RUN))



def kill_lock_holder(co: Checkout, server: Server) -> str | None:
    """SIGKILL the process group of the run that holds BUILD_DIR's lock now (never the server); what was killed."""
    pid = build_lock.holder_now(co.root / "out")
    if pid is None or pid == server.pid:
        return None  # nobody builds right now
    try:
        os.killpg(pid, signal.SIGKILL)  # the run and its compilers: each run is a process group of its own
    except ProcessLookupError:
        return None  # it ended between the look and the kill
    return f"pid {pid}"


@pytest.mark.skipif(not shutil.which("glslc"), reason="the requests build the Vulkan DSO too (glslc)")
def test_a_run_killed_while_it_serves_a_request_then_the_next_equals_a_clean_build(
        tmp_path: Path, seed: int, soak_count: Callable[[int, int], int]) -> None:
    co = prepare(tmp_path / "co", tmp_path / "cache", seed, 1)
    co.rng = random.Random(f"{seed}/server-kill")
    server = start(co)
    try:
        assert build(co).returncode == 0  # the server's first request: a reader reads ahead after it
        for number in range(1, soak_count(KILLS, KILLS_PER_RUN) + 1):
            did = co.rng.choice([edit_source, edit_header])(co)
            delay = co.rng.uniform(0.0, 0.8)
            label = f"seed {seed} kill {number} ({did}, {delay:.2f} s into the run)"
            request = popen_build(co)
            deadline = time.monotonic() + 10
            while build_lock.holder_now(co.root / "out") in (None, server.pid) and time.monotonic() < deadline \
                    and request.poll() is None:
                time.sleep(0.005)  # until a run (the reader resumed, or a forked run) holds BUILD_DIR
            time.sleep(delay)
            victim = kill_lock_holder(co, server)
            output, errors = request.communicate(timeout=900)
            # shown with a failure: which kills came before it, and what each request was served by
            print(f"{label}: {victim or 'nothing'} killed, the request {server.answers()[-1]}, "
                  f"status {request.returncode}")
            if victim is None:
                assert request.returncode == 0, f"{label}: {output}{errors}"
            after = build(co)  # served anew: by a forked run, or the reader forked since
            assert after.returncode == 0, f"{label} ({victim or 'nothing'} killed): {after.stdout}{after.stderr}"
            assert co.run("-q").returncode == 0, f"{label} ({victim or 'nothing'} killed): not current"
            assert_equals_clean_build(co, f"{label} ({victim or 'nothing'} killed)")
    finally:
        server.stop()
