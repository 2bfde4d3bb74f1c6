"""TinyBLAS's per-variant -mtune flags as upstream's BUILD.mk, fitted to what the toolchain knows (tuning.py)."""
from __future__ import annotations

import json
from pathlib import Path

from conftest import MINI_TREE, scons

from opencoti_build import sources, summary, tuning


def test_each_variant_asks_for_upstreams_cpu() -> None:
    tinyblas = next(p for p in sources.HOST_PROGRAM.packages if p.name == "tinyblas")
    want = {"tinyblas_cpu_sgemm_amd_avx": "sandybridge", "tinyblas_cpu_mixmul_amd_fma": "bdver2",
            "tinyblas_cpu_sgemm_amd_avx2": "skylake", "tinyblas_cpu_sgemm_amd_avxvnni": "alderlake",
            "tinyblas_cpu_mixmul_amd_avx512f": "cannonlake", "tinyblas_cpu_sgemm_amd_zen4": "znver4",
            "iqk_mul_mat_amd_avx2": "skylake", "iqk_mul_mat_amd_zen4": "skylake"}
    for name, cpu in want.items():
        _, target_arch = tinyblas.file_flags(f"llamafile/{name}.cpp")
        assert target_arch[0] == f"-Xx86_64-mtune={cpu}", name
    assert not any("mtune" in f for f in tinyblas.file_flags("llamafile/tinyblas_cpu_sgemm_arm82.cpp")[1])


def test_an_unknown_cpu_becomes_the_nearest_known_or_is_dropped() -> None:
    said: list[str] = []
    flags = ["-Xx86_64-mtune=znver4", "-Xx86_64-mavx2"]
    assert tuning.fit(flags, {"znver4": False, "znver3": True}, said.append, "x") == ["-Xx86_64-mtune=znver3", "-Xx86_64-mavx2"]
    assert tuning.fit(flags, {"znver4": False, "znver3": False, "znver2": False, "znver1": False}, said.append, "x") \
        == ["-Xx86_64-mavx2"]
    assert said == ["tuning: the toolchain has no -mtune=znver4; x tuned for znver3",
                    "tuning: the toolchain has no -mtune=znver4 nor a near one; x untuned"]
    assert tuning.fit(flags, {"znver4": True}) == flags


def test_the_probe_asks_the_driver_once_per_toolchain(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    driver = tmp_path / "cosmocc"
    driver.write_text(f'#!/bin/sh\necho "$1" >> {calls}\n[ "$1" != -Xx86_64-mtune=znver4 ]\n')
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
