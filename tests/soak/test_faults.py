"""Fault injection: seeded random SIGKILLs, corrupt cache entries, tampered outputs, concurrent runs.

Every trial ends by comparing the build's outputs byte for byte with a clean build of the same
sources (outputs do not depend on BUILD_DIR or SRC, so one clean build per source state serves).
Each family runs a slice of its trials under the commit's seed, or all of them with ``--long``; ``--seed``
replays a run (tests/conftest.py, docs/testing.md).
"""
from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import servers
from opencoti_build.cache import cache_entry, remote_cache

from packaging_support import write_gguf
from scons_runs import MINI_TREE, PROJECT, cache_keys, copy_checkout, scons, scons_command

HEADER = "llama.cpp/ggml/include/ggml.h"
# Header variants whose every includer's object bytes differ (a top-level asm section), so an object
# compiled against another variant cannot pass for a current one.
VARIANTS = ("",) + tuple(f'\n__asm__(".section .opencoti_fault\\n.ascii \\"opencoti-fault-v{v}\\"\\n.previous");\n'
                         for v in (1, 2))


def digests(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (a BUILD_DIR's o/ or a dist dir)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def differing(got: dict[str, str], want: dict[str, str]) -> list[str]:
    return sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))


class Workspace:
    """A private source tree, BUILD_DIR and cache; one clean reference build per header variant."""

    def __init__(self, root: Path, references: dict[int, dict[str, str]]) -> None:
        self.root = root
        self.src = root / "src"
        shutil.copytree(MINI_TREE, self.src)
        self.pristine = (self.src / HEADER).read_text()
        self.references = references
        self.variant = 0

    @property
    def out(self) -> Path:
        return self.root / "b" / "out"

    @property
    def cache(self) -> Path:
        return self.root / "b" / "cache"

    def args(self, *extra: str) -> tuple[str, ...]:
        return ("-j2", f"SRC={self.src}", *extra)

    def set_variant(self, variant: int, mtime_ns: int | None = None) -> int:
        """Write header variant ``variant`` (with ``mtime_ns``: as `cp -p` of a saved copy); return the old mtime."""
        header = self.src / HEADER
        old = header.stat().st_mtime_ns
        header.write_text(self.pristine + VARIANTS[variant])
        if mtime_ns is not None:
            os.utime(header, ns=(mtime_ns, mtime_ns))
        self.variant = variant
        return old

    def build(self, *extra: str, project: Path = PROJECT, **kw) -> subprocess.CompletedProcess[str]:
        return scons(*self.args(*extra), build=self.root / "b", project=project, **kw)

    def start(self, *extra: str, build: Path | None = None, project: Path = PROJECT) -> subprocess.Popen[str]:
        argv, env = scons_command(*self.args(*extra), build=build or self.root / "b", project=project)
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

    def reference(self) -> dict[str, str]:
        if self.variant not in self.references:
            clean = self.root / f"reference-{self.variant}"
            scons(*self.args("CACHE_DIR="), build=clean)
            self.references[self.variant] = digests(clean / "out" / "o")
            shutil.rmtree(clean)
        return self.references[self.variant]

    def rebuild_equals_a_clean_build(self) -> None:
        """Build again: no traceback, the outputs a clean build gives, and then a run that finds nothing to do."""
        rebuilt = self.build()
        assert "Traceback" not in rebuilt.stdout + rebuilt.stderr
        self.assert_clean_equivalent()
        assert self.build("-q", check=False).returncode == 0, "a second run still finds work"

    def assert_clean_equivalent(self, out: Path | None = None) -> None:
        got = digests((out or self.out) / "o")
        bad = differing(got, self.reference())
        assert not bad, (f"{len(bad)} of {len(got)} outputs differ from a clean build of header variant "
                         f"{self.variant}: {bad[:8]}; variants in them: {self.variants_in((out or self.out) / 'o', bad)}")

    @staticmethod
    def variants_in(root: Path, names: list[str]) -> dict[str, list[str]]:
        found = {}
        for name in names[:8]:
            path = root / name
            data = path.read_bytes() if path.is_file() else b""
            found[name] = [f"v{v}" for v in (1, 2) if f"opencoti-fault-v{v}".encode() in data]
        return found


def kill(proc: subprocess.Popen[str], whole_group: bool) -> None:
    """SIGKILL scons and its compilers (a CI timeout) or scons alone (kill -9 of one pid; compilers live on)."""
    try:
        if whole_group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


class CheckoutWorkspace(Workspace):
    """The same, through the host lane's checkout mode: llama.cpp's own server from the tree's llama.cpp (LLAMACPP=)."""

    def args(self, *extra: str) -> tuple[str, ...]:
        return ("-j2", f"LLAMACPP={self.src / 'llama.cpp'}", *extra)


@pytest.fixture(scope="module")
def references() -> dict[int, dict[str, str]]:
    return {}


@pytest.fixture(scope="module")
def kill_space(tmp_path_factory: pytest.TempPathFactory, references) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("kill"), references)


@pytest.fixture(scope="module")
def checkout_kill_space(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return CheckoutWorkspace(tmp_path_factory.mktemp("checkout-kill"), {})


SCENARIOS = ("cold", "warm-cache", "header-edit", "edit-then-revert")
# Kill within about the time the scenario's build takes on 2 cores (later kills find it finished).
KILL_WINDOW_S = {"cold": 9.0, "warm-cache": 2.5, "header-edit": 4.0, "edit-then-revert": 4.0}


def kill_and_rebuild(ws: Workspace, trial: int, seed: int) -> None:
    """One trial: a scenario's build SIGKILLed at a random moment, then a rebuild that must equal a clean build."""
    rng = random.Random(f"{seed}-kill-{trial}")
    scenario = SCENARIOS[trial % len(SCENARIOS)]
    if scenario == "cold":
        shutil.rmtree(ws.root / "b", ignore_errors=True)
    elif scenario == "warm-cache":
        shutil.rmtree(ws.out, ignore_errors=True)
    before, saved_mtime = ws.variant, None
    if scenario in ("header-edit", "edit-then-revert"):
        saved_mtime = ws.set_variant(rng.choice([v for v in range(len(VARIANTS)) if v != before]))
    proc = ws.start()
    time.sleep(rng.uniform(0.3, KILL_WINDOW_S[scenario]))
    kill(proc, whole_group=rng.random() < 0.7)
    if scenario == "edit-then-revert":
        # an editor's undo (a new mtime), `cp -p` of the saved file (its old mtime), or the edit's own
        # mtime put back on the old bytes (same size: only the ctime tells them apart)
        edit_mtime = (ws.src / HEADER).stat().st_mtime_ns
        ws.set_variant(before, mtime_ns=rng.choice([None, saved_mtime, edit_mtime]))
    ws.rebuild_equals_a_clean_build()


@pytest.mark.xdist_group("faults-kill")
@pytest.mark.trials(full=52, per_run=4)
def test_sigkill_at_a_random_moment_then_rebuild_equals_a_clean_build(kill_space: Workspace, trial: int,
        seed: int) -> None:
    kill_and_rebuild(kill_space, trial, seed)


@pytest.mark.xdist_group("faults-checkout-kill")
@pytest.mark.trials(full=24, per_run=2)
def test_sigkill_in_the_checkout_lane_then_rebuild_equals_a_clean_build(checkout_kill_space: Workspace, trial: int,
        seed: int) -> None:
    """The same kills while the host lane builds llama.cpp's server from a checkout: its wrappers and fat objects."""
    kill_and_rebuild(checkout_kill_space, trial, seed)


# What a Ctrl-C's output may hold besides its one line: step lines and what a build says before its first step.
STEP_OR_PREAMBLE = ("[", "toolchain:", "NOTE:", "COMPILEDB ")


@pytest.mark.xdist_group("faults-kill")
@pytest.mark.trials(full=16, per_run=2)
def test_ctrl_c_at_a_random_moment_stops_in_one_line_then_rebuild_equals_a_clean_build(kill_space: Workspace,
        trial: int, seed: int) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it: scons and every compiler in flight."""
    ws = kill_space
    rng = random.Random(f"{seed}-ctrl-c-{trial}")
    scenario = SCENARIOS[trial % 3]  # cold, warm-cache, header-edit
    if scenario == "cold":
        shutil.rmtree(ws.root / "b", ignore_errors=True)
    elif scenario == "warm-cache":
        shutil.rmtree(ws.out, ignore_errors=True)
    else:
        ws.set_variant(rng.choice([v for v in range(len(VARIANTS)) if v != ws.variant]))
    proc = ws.start()
    time.sleep(rng.uniform(0.3, KILL_WINDOW_S[scenario]))  # (SCons's own first 0.1 s, its import, is its own)
    try:
        os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    output = proc.communicate(timeout=600)[0]
    assert "Traceback" not in output, output
    finished = re.search(r"^\d+ compiled, \d+ from cache, \d+ up to date in ", output, re.M)
    if proc.returncode != 0 and not finished:  # (a Ctrl-C after the summary stops only the exit: -SIGINT)
        said = [line for line in output.splitlines() if not line.startswith(STEP_OR_PREAMBLE)]
        assert proc.returncode == 2 and len(said) == 1, output
        assert said[0].startswith("interrupted: ") or said[0] == "scons: Build interrupted.", output
    ws.rebuild_equals_a_clean_build()


@pytest.fixture(scope="module")
def cache_space(tmp_path_factory: pytest.TempPathFactory, references) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("cache"), references)
    ws.build()
    return ws


def cache_entries(cache: Path) -> list[Path]:
    """The entries (hidden files are a push in flight or a dead one's leftovers)."""
    return sorted(p for p in cache.rglob("*") if p.is_file() and p.parent != cache and not p.name.startswith("."))


def assert_every_entry_verifies(cache: Path) -> None:
    for entry in cache_entries(cache):
        cache_entry.content_signature(entry, "sha256")  # raises CorruptEntry


@pytest.mark.xdist_group("faults-cache")
@pytest.mark.trials(full=20, per_run=2)
def test_a_corrupt_or_truncated_cache_entry_never_reaches_an_output(cache_space: Workspace, trial: int,
        seed: int) -> None:
    ws = cache_space
    rng = random.Random(f"{seed}-cache-{trial}")
    entry = rng.choice(cache_entries(ws.cache))
    data = bytearray(entry.read_bytes())
    if trial % 2:
        data = data[: rng.randrange(len(data))]
    else:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    entry.write_bytes(bytes(data))
    shutil.rmtree(ws.out)
    proc = ws.build()
    warned = [line for line in proc.stdout.splitlines() if line.startswith("WARN: cache: corrupt entry")]
    assert len(warned) == 1 and str(entry) in warned[0], proc.stdout
    ws.assert_clean_equivalent()
    assert_every_entry_verifies(ws.cache)  # removed, then pushed again whole


@pytest.mark.xdist_group("faults-cache")
@pytest.mark.trials(full=24, per_run=4)
def test_an_output_changed_by_hand_is_rebuilt(cache_space: Workspace, trial: int, seed: int) -> None:
    ws = cache_space
    rng = random.Random(f"{seed}-tamper-{trial}")
    outputs = sorted(p for p in (ws.out / "o").rglob("*") if p.is_file())
    if trial % 4 == 0:  # a twin every fourth trial, so they are never left out by chance
        outputs = [p for p in outputs if "/.aarch64/" in str(p)]
    victim = rng.choice(outputs)
    how = ("flip", "truncate", "empty", "delete")[trial % 4 if trial % 4 else rng.randrange(4)]
    if how == "delete":
        victim.unlink()
    else:
        data = bytearray(victim.read_bytes())
        if how == "flip":
            data[rng.randrange(len(data))] ^= 0xFF
        data = data if how == "flip" else data[: rng.randrange(len(data))] if how == "truncate" else b""
        victim.write_bytes(bytes(data))
    ws.build()
    ws.assert_clean_equivalent()


@pytest.mark.xdist_group("faults-cache")
@pytest.mark.trials(full=10, per_run=2)
def test_two_runs_at_once_in_one_build_dir(cache_space: Workspace, trial: int, seed: int) -> None:
    ws = cache_space
    rng = random.Random(f"{seed}-twice-{trial}")
    shutil.rmtree(ws.out, ignore_errors=True)
    if trial % 5 == 0:  # cold now and then; warm runs race over restores and pushes
        shutil.rmtree(ws.cache, ignore_errors=True)
    first = ws.start()
    time.sleep(rng.uniform(0, 1.5))
    second = ws.start()
    outputs = [p.communicate(timeout=600)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    assert not any("Traceback" in o for o in outputs), outputs
    ws.assert_clean_equivalent()
    assert_every_entry_verifies(ws.cache)


def outdated(data: bytes) -> bytes:
    """``data`` as the earlier entry format wrote it (no key in its trailer)."""
    return data + b"opencoti-cache-entry-v1\0" + len(data).to_bytes(8, "little") + hashlib.sha256(data).digest()


@pytest.mark.xdist_group("faults-cache")
def test_entries_of_the_earlier_format_are_quiet_misses_and_replaced(cache_space: Workspace) -> None:
    """Every entry left by the earlier format (both halves of every step): rebuilt without a WARN, and every entry
    replaced (a push overwrites what is not a valid entry: SCons stops asking at a step's first miss, so the
    other half's entry is never read)."""
    ws = cache_space
    for entry in cache_entries(ws.cache):
        entry.write_bytes(outdated(entry.read_bytes()[:64]))
    shutil.rmtree(ws.out)
    proc = ws.build()
    assert "WARN" not in proc.stdout, proc.stdout
    ws.assert_clean_equivalent()
    assert_every_entry_verifies(ws.cache)


@pytest.mark.xdist_group("faults-cache")
def test_what_dead_config_writes_left_in_the_cache_is_swept(cache_space: Workspace) -> None:
    ws = cache_space
    dead = ws.cache / ".config.k1l2m3n4.tmp"  # a run killed (or out of space) while writing it: no lock is held
    legacy, recent = ws.cache / ".config.abcd1234", ws.cache / ".config.efgh5678"  # older builds' unlocked writes
    for path in (dead, legacy, recent):
        path.write_text('{"prefix_len"')
    hour_ago = time.time() - 3700
    os.utime(legacy, (hour_ago, hour_ago))
    ws.build()
    assert not dead.exists() and not legacy.exists()
    assert recent.exists()  # it may be an older build's write in flight
    recent.unlink()


@pytest.fixture(scope="module")
def second_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_checkout(tmp_path_factory.mktemp("second-checkout-at-a-longer-path"))


@pytest.mark.xdist_group("faults-cache")
@pytest.mark.trials(full=10, per_run=2)
def test_two_checkouts_sharing_one_cache(cache_space: Workspace, second_checkout: Path, trial: int,
        seed: int) -> None:
    ws = cache_space
    rng = random.Random(f"{seed}-shared-{trial}")
    other = second_checkout / "build"
    for out in (ws.out, other):
        shutil.rmtree(out, ignore_errors=True)
    if trial % 5 == 0:  # cold now and then: two cold builds push the same entries at once
        shutil.rmtree(ws.cache, ignore_errors=True)
    first = ws.start()
    time.sleep(rng.uniform(0, 1.0))
    second = ws.start(f"BUILD_DIR={other}", f"CACHE_DIR={ws.cache}", project=second_checkout)
    outputs = [p.communicate(timeout=600)[0] for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    ws.assert_clean_equivalent()
    ws.assert_clean_equivalent(other)
    assert_every_entry_verifies(ws.cache)


@pytest.fixture(scope="module")
def package_space(tmp_path_factory: pytest.TempPathFactory, references, cache_space: Workspace) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("package"), references)
    shutil.copytree(cache_space.cache, ws.cache)  # entries are path-independent: the host comes from them
    ws.build()
    return ws


def verify_dist(ws: Workspace) -> None:
    """`opencoti-build verify` passes on every artifact that has a manifest (an artifact alone is unclaimed)."""
    dist = ws.root / "b" / "dist" / "llamafile"
    for manifest in dist.glob("*.MANIFEST.json"):
        artifact = manifest.with_name(manifest.name[: -len(".MANIFEST.json")])
        proc = subprocess.run([sys.executable, "-m", "opencoti_build", "verify", str(artifact), "--vendor-dist",
                               str(ws.root / "b" / "vendors-dist"), "--home", str(ws.root / "b" / "home")],
                              capture_output=True, text=True, cwd=PROJECT / "site_scons")
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.xdist_group("faults-cache")
@pytest.mark.trials(full=12, per_run=2)
def test_package_killed_at_a_random_moment_leaves_pairs_that_verify(package_space: Workspace, trial: int,
        seed: int) -> None:
    ws = package_space
    rng = random.Random(f"{seed}-package-{trial}")
    model, args = ws.root / "model.gguf", ws.root / "model.args"
    # a new model (read for its CRC-32, then copied), or only a new .args (the model's digests recorded: copied
    # and read once); the artifact's digest taken as it is written either way
    if not model.exists() or rng.random() < 0.5:
        write_gguf(model, values=(8 << 20) + 4096 * trial)  # 32 MiB of weights, other bytes every trial
    args.write_text(f"-m\n/zip/model.gguf\n--ctx-size\n{512 + trial}\n")
    argv = ("package", "CPU_ONLY=1", f"MODEL={model}", f"ARGS={args}")
    proc = ws.start(*argv)
    time.sleep(rng.uniform(0.2, 3.0))
    kill(proc, whole_group=True)
    verify_dist(ws)
    ws.build(*argv)
    dist = ws.root / "b" / "dist" / "llamafile"
    assert not [p.name for p in dist.iterdir() if p.name.endswith(".tmp")], "a temporary file outlived the next run"
    assert len(list(dist.glob("*.MANIFEST.json"))) == 2
    verify_dist(ws)


@pytest.fixture(scope="module")
def remote_space(tmp_path_factory: pytest.TempPathFactory, references) -> Iterator[tuple[Workspace, servers.RedisServer]]:
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server (scripts/install-deps)")
    pytest.importorskip("redis")
    server = servers.RedisServer()
    try:
        yield Workspace(tmp_path_factory.mktemp("remote"), references), server
    finally:
        server.stop()


def remote_tier(stdout: str, url: str) -> dict[str, int]:
    """The Redis tier's counters in a build's ``cache:`` line."""
    found = re.search(rf"^cache: local .*; {re.escape(url)} (\d+) hits / (\d+) misses / (\d+) corrupt / (\d+) pushed$",
                      stdout, re.M)
    assert found, stdout
    return dict(zip(("hits", "misses", "corrupt", "pushed"), map(int, found.groups())))


# What is in which tier when the build is killed: nothing anywhere (compiles, pushes to both tiers), the
# remote only (pulls filling the local tier), or a header edit over both (compiles among hits).
REMOTE_SCENARIOS = ("cold", "remote-only", "header-edit")
REMOTE_KILL_WINDOW_S = {"cold": 9.0, "remote-only": 3.0, "header-edit": 4.0}


@pytest.mark.xdist_group("faults-remote")
@pytest.mark.trials(full=15, per_run=3)
def test_sigkill_with_a_redis_tier_then_each_tier_alone_rebuilds_a_clean_build(remote_space, trial: int,
        seed: int) -> None:
    ws, server = remote_space
    rng = random.Random(f"{seed}-remote-{trial}")
    scenario = REMOTE_SCENARIOS[trial % len(REMOTE_SCENARIOS)]
    url = (f"CACHE_URL={server.url}", *cache_keys(ws.root))  # Redis is a shared tier: signed entries only
    shutil.rmtree(ws.out, ignore_errors=True)
    if scenario == "cold":
        server.client.flushall()
    if scenario != "header-edit":
        shutil.rmtree(ws.cache, ignore_errors=True)
    else:
        ws.set_variant(rng.choice([v for v in range(len(VARIANTS)) if v != ws.variant]))
    proc = ws.start(*url)
    time.sleep(rng.uniform(0.3, REMOTE_KILL_WINDOW_S[scenario]))
    kill(proc, whole_group=rng.random() < 0.7)

    rebuilt = ws.build(*url)
    assert "Traceback" not in rebuilt.stdout + rebuilt.stderr and "WARN" not in rebuilt.stdout, rebuilt.stdout
    ws.assert_clean_equivalent()
    assert_every_entry_verifies(ws.cache)
    for key in server.client.keys(remote_cache.KEY_PREFIX + "*"):  # raises CorruptEntry
        remote_cache.unpack(server.client.get(key), key.decode().removeprefix(remote_cache.KEY_PREFIX))
    # What the killed run and the rebuild left in Redis is right, not only whole: the remote tier alone
    # (an empty local cache, no outputs) gives a clean build's bytes
    shutil.rmtree(ws.out)
    shutil.rmtree(ws.cache)
    alone = ws.build(*url)
    assert remote_tier(alone.stdout, server.url)["hits"] > 0 and remote_tier(alone.stdout, server.url)["corrupt"] == 0
    ws.assert_clean_equivalent()


@pytest.fixture(scope="module")
def edit_space(tmp_path_factory: pytest.TempPathFactory, references) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("edit"), references)
    ws.build()
    return ws


# Save within about the time a header edit's build takes on 2 cores (a later save finds it finished).
EDIT_WINDOW_S = 5.0


@pytest.mark.xdist_group("faults-edit")
@pytest.mark.trials(full=24, per_run=3)
def test_an_input_saved_while_the_build_runs_is_never_recorded_or_cached_as_built(edit_space: Workspace, trial: int,
        seed: int) -> None:
    """An editor saves the header at a random moment of a build (build-on-save), then the user undoes the save or
    keeps it: the next build equals a clean build of what is there, and so does a build from the cache alone."""
    ws = edit_space
    rng = random.Random(f"{seed}-edit-{trial}")
    if trial % 3 == 0:
        shutil.rmtree(ws.out, ignore_errors=True)  # restores from the cache among the compiles
    started = rng.choice([v for v in range(len(VARIANTS)) if v != ws.variant])
    ws.set_variant(started)
    proc = ws.start()
    time.sleep(rng.uniform(0.2, EDIT_WINDOW_S))
    saved_over = ws.set_variant(rng.choice([v for v in range(len(VARIANTS)) if v != started]))  # the save
    output = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0 and "Traceback" not in output, output
    assert len([line for line in output.splitlines() if "changed while this build read them" in line]) <= 1, output
    # an undo (a new mtime), `cp -p` of the file the build started from (its mtime back), or the save kept
    how = rng.choice(["undo", "copy-back", "keep"])
    if how != "keep":
        ws.set_variant(started, mtime_ns=saved_over if how == "copy-back" else None)
    ws.rebuild_equals_a_clean_build()
    shutil.rmtree(ws.out)  # what the two builds pushed is right, not only whole: the cache alone gives a clean build
    assert "FATCC" not in ws.build().stdout
    ws.assert_clean_equivalent()


@pytest.fixture(scope="module")
def skew_space(tmp_path_factory: pytest.TempPathFactory, references) -> Workspace:
    """A tree unpacked from a machine whose clock runs ahead: every source file's mtime up to a year in the future."""
    ws = Workspace(tmp_path_factory.mktemp("skew"), references)
    rng = random.Random("skew")
    for path in (p for p in ws.src.rglob("*") if p.is_file()):
        ahead = time.time_ns() + rng.randrange(3600, 366 * 86400) * 10**9
        os.utime(path, ns=(ahead, ahead))
    first = ws.build()
    assert len([line for line in first.stdout.splitlines() if "s in the future" in line]) == 1, first.stdout
    return ws


@pytest.mark.xdist_group("faults-skew")
@pytest.mark.trials(full=16, per_run=2)
def test_an_edit_that_keeps_a_future_mtime_is_seen_in_inputs_and_outputs(skew_space: Workspace, trial: int,
        seed: int) -> None:
    """`cp -p`, `rsync -t`, `tar x` or `touch -r` keep a file's (future) mtime: the edit must still be seen, both in
    an input header (its dependents rebuilt) and in an output changed by hand (restored)."""
    ws = skew_space
    rng = random.Random(f"{seed}-skew-{trial}")
    future = time.time_ns() + rng.randrange(60, 366 * 86400) * 10**9
    if trial % 2 == 0:
        header = ws.src / HEADER
        os.utime(header, ns=(future, future))
        ws.build()
        ws.set_variant(rng.choice([v for v in range(len(VARIANTS)) if v != ws.variant]), mtime_ns=future)
    else:
        victim = rng.choice(sorted(p for p in (ws.out / "o").rglob("*") if p.is_file()))
        os.utime(victim, ns=(future, future))  # an output whose mtime lies ahead, recorded as such
        ws.build()
        data = bytearray(victim.read_bytes())
        data[rng.randrange(len(data))] ^= 0xFF
        victim.write_bytes(bytes(data))
        os.utime(victim, ns=(future, future))  # the hand edit's mtime put back
    ws.rebuild_equals_a_clean_build()


@pytest.fixture(scope="module")
def layout_space(tmp_path_factory: pytest.TempPathFactory, references) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp("layouts"), references)
    for checkout in LAYOUT_CHECKOUTS:  # two private checkouts: trees are copied into them
        (ws.root / checkout / "tests" / "fixtures").mkdir(parents=True)
        copy_checkout(ws.root / checkout)
    return ws


LAYOUT_CHECKOUTS = ("a", "checkouts/second-checkout-at-a-longer-path")


@pytest.mark.xdist_group("faults-layouts")
@pytest.mark.trials(full=16, per_run=2)
def test_random_layouts_against_one_cache_give_a_clean_builds_bytes(layout_space: Workspace, trial: int,
        seed: int) -> None:
    """Each trial: a random header variant and a random layout (which checkout, SRC inside it or outside,
    absolute or relative, BUILD_DIR relative or absolute, of any name), built against the one cache every trial
    shares: outputs = a clean build of that variant (a key shared by two layouts must mean the same bytes)."""
    ws = layout_space
    rng = random.Random(f"{seed}-layout-{trial}")
    ws.set_variant(rng.randrange(len(VARIANTS)))
    checkout = ws.root / rng.choice(LAYOUT_CHECKOUTS)
    where = rng.choice(["inside", "outside", "outside-relative"])
    if where == "inside":  # the workspace's tree, copied into the checkout
        src = checkout / "tests" / "fixtures" / "llamafile-mini"
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(ws.src, src, symlinks=True)
        given = str(src.relative_to(checkout)) if rng.random() < 0.5 else str(src)
    else:
        src = ws.src
        given = os.path.relpath(src, checkout) if where == "outside-relative" else str(src)
    name = rng.choice(["build", "build-other", "out", "b"])
    build_dir = name if rng.random() < 0.5 else str(ws.root / "outs" / name)
    out = checkout / build_dir if not os.path.isabs(build_dir) else Path(build_dir)
    try:
        shutil.rmtree(out, ignore_errors=True)
        built = scons("-j2", f"SRC={given}", f"BUILD_DIR={build_dir}", f"CACHE_DIR={ws.cache}",
                      build=ws.root / "b", project=checkout)
        assert "Traceback" not in built.stdout + built.stderr
        ws.assert_clean_equivalent(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if where == "inside":
            shutil.rmtree(src, ignore_errors=True)


def swap_values(rng: random.Random, items: list, value_of, put) -> tuple:
    """Swap the values of two items whose values differ (each stays whole and self-consistent)."""
    while True:
        a, b = rng.sample(items, 2)
        va, vb = value_of(a), value_of(b)
        if va != vb:
            put(a, vb)
            put(b, va)
            return a, b


@pytest.mark.xdist_group("faults-remote")
@pytest.mark.trials(full=16, per_run=2)
def test_swapped_cache_entries_never_reach_an_output(remote_space, trial: int, seed: int) -> None:
    """Two entries' contents swapped in CACHE_DIR, or two values in Redis (a restore from backup, a copy tool, a
    sharing layer's bug): each is refused as stored under another key, rebuilt and replaced."""
    ws, server = remote_space
    rng = random.Random(f"{seed}-swap-{trial}")
    url = (f"CACHE_URL={server.url}", *cache_keys(ws.root))  # Redis is a shared tier: signed entries only
    for path in (ws.out, ws.cache):
        shutil.rmtree(path, ignore_errors=True)
    server.client.flushall()
    ws.build(*url)  # both tiers hold this build's entries and no others (a swap of two the build never asks for
    shutil.rmtree(ws.out)  # would stay, unseen)
    if trial % 2 == 0:
        swapped = swap_values(rng, cache_entries(ws.cache), Path.read_bytes, Path.write_bytes)
        names = [p.name for p in swapped]
        proc = ws.build()  # the local tier alone
    else:
        shutil.rmtree(ws.cache)
        keys = sorted(server.client.keys(remote_cache.KEY_PREFIX + "*"))
        swapped = swap_values(rng, keys, server.client.get, server.client.set)
        names = [k.decode().removeprefix(remote_cache.KEY_PREFIX) for k in swapped]
        proc = ws.build(*url)
    warned = [line for line in proc.stdout.splitlines() if "holds the entry stored under key" in line]
    assert warned and all(any(n in line for n in names) for line in warned), proc.stdout
    assert re.search(r" [12] corrupt ", proc.stdout), proc.stdout
    ws.assert_clean_equivalent()
    assert_every_entry_verifies(ws.cache)  # replaced
    for key in server.client.keys(remote_cache.KEY_PREFIX + "*"):
        remote_cache.unpack(server.client.get(key), key.decode().removeprefix(remote_cache.KEY_PREFIX))


FULL_DISK_AT_SCONSIGN = """\
import errno
import SCons.dblite


def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", ".sconsign.tmp")


SCons.dblite._Dblite._pickle_dump = staticmethod(full)  # SCons's record write: the disk is full right then
"""


def test_a_full_disk_when_scons_writes_its_record_is_one_line_then_the_next_build_is_exact(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, {})
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(FULL_DISK_AT_SCONSIGN)
    ws.set_variant(1)
    proc = ws.build(check=False, env_extra={"PYTHONPATH": str(inject)})
    errors = [line for line in proc.stderr.splitlines() if line.startswith("scons:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert errors == ["scons: error: cannot write the build's record .sconsign.tmp: no space left on the device (disk "
                      "full); free space and run the build again (the next build redoes what this one built)"], errors
    ws.set_variant(0, mtime_ns=None)
    ws.rebuild_equals_a_clean_build()


FULL_CACHE_DISK = """\
import errno
from opencoti_build.cache import cache_entry


def full(source, entry, signer=None):
    raise OSError(errno.ENOSPC, "No space left on device", str(entry))


cache_entry.write_entry = full  # every push to the local cache: its disk is full
"""


def test_a_full_cache_disk_is_said_once_and_counted_and_the_build_goes_on(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, {})
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(FULL_CACHE_DISK)
    proc = ws.build(env_extra={"PYTHONPATH": f"{inject}:{PROJECT / 'site_scons'}"})
    warned = [line for line in proc.stdout.splitlines() if line.startswith("WARN")]
    assert len(warned) == 1 and "no space left on the device (disk full)" in warned[0], proc.stdout
    assert re.search(r"^cache: local 0 hits / 99 misses / 0 corrupt / 0 pushed / 99 failed pushes$", proc.stdout,
                     re.M), proc.stdout
    ws.assert_clean_equivalent()


def read_only_mount_works(path: Path) -> bool:
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro '{path}' '{path}'"],
                           capture_output=True)
    return probe.returncode == 0


def test_a_read_only_cache_is_read_and_never_written(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, {})
    ws.build()
    if not read_only_mount_works(ws.cache):
        pytest.skip("no mount namespace here (unshare -m) to make the cache read-only")
    before = digests(ws.cache)
    shutil.rmtree(ws.out)
    (ws.src / "llamafile" / "llamafile.c").write_text((ws.src / "llamafile" / "llamafile.c").read_text() + "\nint ro_probe;\n")
    argv, env = scons_command(*ws.args(), build=ws.root / "b")
    script = f"mount --bind -o ro '{ws.cache}' '{ws.cache}' && exec \"$@\""
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", *argv], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"NOTE: cache {ws.cache} is read-only for this user: entries are read, none are written" in proc.stdout
    assert "CACHED " in proc.stdout and "FATCC" in proc.stdout  # hits read; the edited file compiled
    assert "WARN" not in proc.stdout + proc.stderr
    assert digests(ws.cache) == before


@pytest.mark.parametrize("how", ["flip", "truncate", "delete-manifest"])
def test_a_tampered_artifact_is_reported_by_verify_and_redone_by_the_command_it_names(
        package_space: Workspace, how: str) -> None:
    ws = package_space
    model = write_gguf(ws.root / "model.gguf", values=4096)
    argv = ("package", "CPU_ONLY=1", f"MODEL={model}")
    ws.build(*argv)
    dist = ws.root / "b" / "dist" / "llamafile"
    artifact = sorted(dist.glob("opencoti-embedder-*.llamafile"))[0]
    good = artifact.read_bytes()
    if how == "flip":
        artifact.write_bytes(good[:4096] + bytes([good[4096] ^ 1]) + good[4097:])
    elif how == "truncate":
        artifact.write_bytes(good[:-100])
    else:
        Path(str(artifact) + ".MANIFEST.json").unlink()
    verify = ws.build("verify", *argv[1:], check=False)
    assert verify.returncode == 2
    if how == "delete-manifest":  # one line: what is missing and the command that writes it
        assert f"FAILED: {artifact}.MANIFEST.json: no such manifest; run `scons package` to write it" in verify.stdout
    else:
        assert (f"FAILED: {artifact} does not match {artifact.name}.MANIFEST.json; run `scons package` with the same "
                "variables to rewrite it and its manifest") in verify.stdout
    assert "PACKAGE" not in verify.stdout  # verify reads; it does not repair behind the user's back
    ws.build(*argv)
    assert artifact.read_bytes() == good
    assert "OK: " in ws.build("verify", *argv[1:]).stdout
