"""TinyBLAS's per-variant -mtune flags as upstream's BUILD.mk, fitted to what the toolchain knows (tuning.py).

In-process checks of the core here; the real builds and tools: tests/integration/test_tuning.py.
"""
from __future__ import annotations

from opencoti_build.cosmo import tuning
from opencoti_build.tree import sources


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
