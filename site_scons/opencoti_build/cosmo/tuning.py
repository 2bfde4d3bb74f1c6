"""TinyBLAS's per-variant ``-Xx86_64-mtune=`` flags (upstream's BUILD.mk), fitted to the toolchain.

Upstream tunes each CPU variant for its CPU (sandybridge … znver4). A compiler that does not know a
name refuses the whole compile, and the stand-in's gcc 12 has no znver4; so each name is probed
once per toolchain (the answers are kept in BUILD_DIR, keyed by the driver's identity) and an
unknown one is replaced by the nearest the compiler knows, or dropped (tuning never changes what
the code computes). ``VERBOSE=1`` says which.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from opencoti_build.cache.launchers import FAT_LAUNCHER_ENV
from opencoti_build.errors import UserError, stop_if_interrupted
from opencoti_build.files import identity
from opencoti_build.incremental import private

PREFIX = "-Xx86_64-mtune="
# Nearest older -mtune names, best first: same vendor's previous core, then a generic one of its era.
NEAREST: Mapping[str, tuple[str, ...]] = {
    "znver4": ("znver3", "znver2", "znver1"),
    "alderlake": ("icelake-client", "skylake"),
    "cannonlake": ("skylake-avx512", "skylake"),
    "skylake": ("haswell",),
    "bdver2": ("bdver1", "btver2"),
    "sandybridge": ("corei7-avx", "corei7"),
}


def wanted(flag_lists: Iterable[Sequence[str]]) -> set[str]:
    """Every -mtune name in ``flag_lists``, with the names that may replace it."""
    names: set[str] = set()
    for flags in flag_lists:
        for flag in flags:
            if flag.startswith(PREFIX):
                cpu = flag[len(PREFIX):]
                names |= {cpu, *NEAREST.get(cpu, ())}
    return names


class ProbeError(UserError):
    """A probe failed for another reason than the compiler refusing the name (one line)."""


def probe(driver: str, names: Iterable[str], env: Mapping[str, str], cache: Path | None) -> dict[str, bool]:
    """Which ``names`` the fat driver accepts as ``-Xx86_64-mtune=``; answers kept in ``cache`` (None: a dry run,
    which keeps nothing and probes in the system's temporary directory, since BUILD_DIR/tmp is not made).

    The probes ask this machine's compiler, never a launcher (CCWRAPPER: a remote compile that fails is no answer
    about the compiler), and only a refusal that names the flag counts as "unknown": any other failure is a
    ProbeError and nothing is kept, since a wrong answer would tune, and so change, the objects."""
    try:
        key = f"{driver}:{':'.join(map(str, identity(os.stat(driver))))}"
    except OSError:
        key = driver
    try:
        known = json.loads(cache.read_text()).get(key, {}) if cache is not None else {}
    except (OSError, ValueError):
        known = {}
    missing = sorted(set(names) - set(known))
    if missing:
        with tempfile.TemporaryDirectory(dir=env.get("TMPDIR") if cache is not None else None) as scratch:
            source = Path(scratch) / "empty.c"
            source.write_text("int opencoti_tune_probe;\n")

            local = {**{k: v for k, v in env.items() if k != FAT_LAUNCHER_ENV}, "TMPDIR": scratch}

            def accepts(cpu: str) -> bool:
                out = Path(scratch) / cpu / "probe.o"
                out.parent.mkdir()
                argv = [driver, f"{PREFIX}{cpu}", "-c", "-o", str(out), str(source)]
                done = subprocess.run(argv, env=local, capture_output=True, text=True, errors="replace")
                stop_if_interrupted(done.returncode)
                if done.returncode == 0:
                    return True
                if "mtune" in done.stderr and cpu in done.stderr:  # gcc: bad value 'x' for '-mtune=' switch
                    return False
                first = next((line for line in done.stderr.splitlines() if line.strip()), f"exit {done.returncode}")
                raise ProbeError(f"tuning probe `{' '.join(argv[:2])} -c` failed: {first.strip()}; "
                                 "check that the toolchain compiles an empty C file")

            with ThreadPoolExecutor(max_workers=4) as pool:
                known.update(zip(missing, pool.map(accepts, missing)))
        if cache is None:
            return {name: known[name] for name in names}
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            private.write(cache, json.dumps({key: known}, sort_keys=True).encode())  # BUILD_DIR's: the user's alone
        except OSError:
            pass  # a lost cache only costs a probe
    return {name: known[name] for name in names}


def fit(flags: Sequence[str], accepted: Mapping[str, bool], say: Callable[[str], None] = lambda line: None,
        what: str = "") -> list[str]:
    """``flags`` with each -mtune the toolchain lacks replaced by the nearest it knows, or dropped."""
    out = []
    for flag in flags:
        if not flag.startswith(PREFIX) or accepted.get(flag[len(PREFIX):], True):
            out.append(flag)
            continue
        cpu = flag[len(PREFIX):]
        near = next((n for n in NEAREST.get(cpu, ()) if accepted.get(n)), None)
        say(f"tuning: the toolchain has no -mtune={cpu}; {what} tuned for {near}" if near
            else f"tuning: the toolchain has no -mtune={cpu} nor a near one; {what} untuned")
        if near:
            out.append(PREFIX + near)
    return out
