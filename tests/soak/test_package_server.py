"""The build server packaging a prebuilt host and a model against one-shot scons: seeded differential rounds.

A package run's reading takes only facts from HOST, MODEL and ARGS (the host's version and zip entries, the GGUF
version, the .args text: ``Recorder.derive``), so the server's reader builds a new host binary or new weights without
reading the SConscripts again while those facts hold. Each round rewrites one input, chosen by the seed: a new host
binary of the same version, one of the other version, a host that is no llamafile; new weights, a truncated model;
other .args, .args with an option the host lacks. Then, after a seeded pause (the reader still reading, or waiting),
it asks the server for ``package``. A request that succeeds must have written what a one-shot ``scons package`` of
the same inputs writes into a fresh BUILD_DIR, byte for byte, and the next request must be answered from the record;
one that fails must fail as that one-shot run fails (its status and its error line) and leave the artifacts as they
were.

A run takes a slice of the rounds under the commit's seed, ``--long`` all of them; ``--seed`` replays a run.
"""
from __future__ import annotations

import hashlib
import random
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opencoti_build.config import versioning
from opencoti_build.server import protocol, request_loop

from packaging_support import PLEDGE, as_llamafile, write_gguf
from scons_runs import MINI_TREE, PROJECT, scons_command
from server_runs import Server, client

ROUNDS, ROUNDS_PER_RUN = 40, 5
VERSION = versioning.llamafile_version(MINI_TREE)
OTHER_VERSION = "0.10.4"


@dataclass
class Inputs:
    root: Path
    rng: random.Random
    host: Path
    model: Path
    args: Path
    builds: int = 0

    def command(self, build: Path) -> tuple[list[str], dict[str, str]]:
        """``scons package`` of these inputs into ``build``: (argv, env)."""
        return scons_command("package", f"SRC={MINI_TREE}", "CPU_ONLY=1", "ARCH=x86_64", f"HOST={self.host}",
                             f"MODEL={self.model}", f"ARGS={self.args}", build=build, home=self.root / "home")


def new_host_same_version(inputs: Inputs) -> str:
    inputs.builds += 1
    as_llamafile(PLEDGE, inputs.host, VERSION, options=("-m", f"build {inputs.builds}"))
    return "a new host binary, the same version"


def host_of_another_version(inputs: Inputs) -> str:
    version = inputs.rng.choice([VERSION, OTHER_VERSION])
    as_llamafile(PLEDGE, inputs.host, version)
    return f"a host that says v{version}"


def host_that_is_no_llamafile(inputs: Inputs) -> str:
    shutil.copyfile(PLEDGE, inputs.host)  # no version string
    return "a host that is no llamafile"


def new_weights(inputs: Inputs) -> str:
    values = inputs.rng.randrange(8, 64)
    write_gguf(inputs.model, values=values)
    return f"a model of {values} weights"


def truncated_model(inputs: Inputs) -> str:
    data = inputs.model.read_bytes()
    inputs.model.write_bytes(data[: inputs.rng.randrange(8, max(9, len(data) - 1))])
    return "a truncated model"


def other_args(inputs: Inputs) -> str:
    options = inputs.rng.sample(["--strace", "--ftrace"], inputs.rng.randrange(0, 3))
    inputs.args.write_text("\n".join(["-m /zip/tiny.gguf", *options]) + "\n")
    return f".args with {options}"


def args_the_host_lacks(inputs: Inputs) -> str:
    inputs.args.write_text("-m /zip/tiny.gguf\n--no-such-option-anywhere\n")
    return ".args with an option the host lacks"


MUTATIONS: list[Callable[[Inputs], str]] = [new_host_same_version, new_host_same_version, host_of_another_version,
                                            host_that_is_no_llamafile, new_weights, new_weights, truncated_model,
                                            other_args, args_the_host_lacks]


def dist_files(build: Path) -> dict[str, str]:
    dist = build / "dist" / "llamafile"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(dist.iterdir())} if dist.is_dir() else {}


def error_line(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("scons: error:")]


def one_shot(inputs: Inputs, n: int) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """``scons package`` of the inputs as they are now, into a fresh BUILD_DIR: (its run, what it wrote)."""
    build = inputs.root / f"one-shot-{n}"
    argv, env = inputs.command(build)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    written = dist_files(build)
    shutil.rmtree(build, ignore_errors=True)  # a refused run writes nothing
    return proc, written


def test_the_servers_package_requests_agree_with_one_shot_runs(tmp_path: Path, seed: int,
                                                              soak_count: Callable[[int, int], int]) -> None:
    (tmp_path / "in").mkdir()
    inputs = Inputs(tmp_path, random.Random(f"{seed}/package-server"), tmp_path / "in" / "pledge",
                    tmp_path / "in" / "tiny.gguf", tmp_path / "in" / "strace.args")
    as_llamafile(PLEDGE, inputs.host, VERSION)
    write_gguf(inputs.model)
    other_args(inputs)
    argv, env = inputs.command(tmp_path / "b")
    args = argv[argv.index(str(PROJECT)) + 1:]
    variables = protocol.configuration(args)
    started = client(PROJECT, "serve", "--detach", "--idle-timeout", "900", *variables, env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    server = Server(PROJECT, variables, env)
    history: list[str] = []
    try:
        assert client(PROJECT, "build", *args, env=env).returncode == 0
        rounds = soak_count(ROUNDS, ROUNDS_PER_RUN)
        for number in range(1, rounds + 1):
            time.sleep(inputs.rng.choice([0, 0.3, 1.5]))  # the reader still reading, or waiting
            history.append(f"{number}: {inputs.rng.choice(MUTATIONS)(inputs)}")
            label = f"seed {seed} round {number} ({history[-1]}; before: {history[-6:-1]})"
            before = dist_files(tmp_path / "b")
            served = client(PROJECT, "build", *args, env=env)
            expected, written = one_shot(inputs, number)
            assert served.returncode == expected.returncode, f"{label}: {served.stdout}{served.stderr}"
            if served.returncode != 0:
                assert error_line(served.stderr) == error_line(expected.stderr) != [], label
                assert dist_files(tmp_path / "b") == before, f"{label}: a failed request changed the artifacts"
                continue
            now = dist_files(tmp_path / "b")
            assert {name: now.get(name) for name in written} == written, f"{label}: {server.build_lines()[-1]}"
            again = client(PROJECT, "build", *args, env=env)
            assert again.returncode == 0 and "PACKAGE" not in again.stdout, f"{label}: {again.stdout}"
            assert server.answers()[-1] == request_loop.NULL_ANSWER, f"{label}: {server.build_lines()[-1]}"
        # the full count is sure to have the reader build some (a slice may not): the rounds test what they claim
        assert rounds < ROUNDS or request_loop.READ_AHEAD in server.answers(), server.build_lines()
    finally:
        server.stop()
