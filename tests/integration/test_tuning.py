"""TinyBLAS's per-variant -mtune flags as upstream's BUILD.mk, fitted to what the toolchain knows (tuning.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from opencoti_build.cache.launchers import FAT_LAUNCHER_ENV
from opencoti_build.cosmo import tuning
from opencoti_build.report import summary

from scons_runs import MINI_TREE, PROJECT, scons


def test_the_probe_asks_the_driver_once_per_toolchain(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    driver = tmp_path / "cosmocc"
    driver.write_text(f'#!/bin/sh\necho "$1" >> {calls}\n[ "$1" != -Xx86_64-mtune=znver4 ] && exit 0\n'
                      "echo \"cc1: error: bad value 'znver4' for '-mtune=' switch\" >&2; exit 1\n")
    driver.chmod(0o755)
    cache = tmp_path / "b" / "tuning-probe.json"
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)}
    assert tuning.probe(str(driver), ["znver4", "znver3"], env, cache) == {"znver4": False, "znver3": True}
    assert tuning.probe(str(driver), ["znver4", "znver3"], env, cache) == {"znver4": False, "znver3": True}
    assert sorted(calls.read_text().split()) == ["-Xx86_64-mtune=znver3", "-Xx86_64-mtune=znver4"]
    assert list(json.loads(cache.read_text()).values()) == [{"znver3": True, "znver4": False}]


def test_the_stand_ins_gcc_tunes_zen4_for_znver3_and_says_so_in_verbose(tmp_path: Path) -> None:
    proc = scons("-n", "VERBOSE=1", f"SRC={MINI_TREE}", "CACHE_DIR=", build=tmp_path / "b")
    assert "tuning: the toolchain has no -mtune=znver4; its TinyBLAS kernels tuned for znver3" in proc.stdout
    # the fat driver's own command lines (VERBOSE also shows each half's gcc line, with the -X flags translated)
    lines = {line.split()[-1].rsplit("/", 1)[-1]: line for line in summary.unprefixed(proc.stdout)
             if "tinyblas_cpu_" in line and "-Xx86_64-mavx" in line}
    assert "-Xx86_64-mtune=skylake" in lines["tinyblas_cpu_sgemm_amd_avx2.cpp"]
    assert "-Xx86_64-mtune=znver4" not in proc.stdout.replace("no -mtune=znver4", "")
    assert lines["tinyblas_cpu_sgemm_amd_zen4.cpp"].count("-Xx86_64-mtune=znver3") == 2  # build default + variant
    quiet = scons("-n", f"SRC={MINI_TREE}", "CACHE_DIR=", build=tmp_path / "b")
    assert "tuning:" not in quiet.stdout


def test_a_probe_asks_the_compiler_not_the_launcher_and_a_failure_is_no_answer(tmp_path: Path) -> None:
    """A launcher (CCWRAPPER: distcc, a remote that may fail) never answers a probe; a failure that does not name
    the flag is an error and is not kept (taken as "unknown", it would tune the objects otherwise)."""
    launcher = tmp_path / "failing-launcher"
    launcher.write_text("#!/bin/sh\necho 'distcc[1] ERROR: compile failed on 127.0.0.1' >&2\nexit 100\n")
    launcher.chmod(0o755)
    driver = PROJECT / "site_scons" / "cosmocc_shim" / "bin" / "cosmocc"  # the stand-in runs halves behind it
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path), FAT_LAUNCHER_ENV: str(launcher)}
    cache = tmp_path / "b" / "tuning-probe.json"
    assert tuning.probe(str(driver), ["znver4", "znver3"], env, cache) == {"znver4": False, "znver3": True}

    broken = tmp_path / "broken-cosmocc"
    broken.write_text("#!/bin/sh\necho 'cosmocc: No space left on device' >&2\nexit 1\n")
    broken.chmod(0o755)
    fresh = tmp_path / "c" / "tuning-probe.json"
    with pytest.raises(tuning.ProbeError) as raised:
        tuning.probe(str(broken), ["znver3"], env, fresh)
    assert str(raised.value) == (f"tuning probe `{broken} -Xx86_64-mtune=znver3 -c` failed: cosmocc: No space left "
                                 "on device; check that the toolchain compiles an empty C file")
    assert not fresh.exists()
