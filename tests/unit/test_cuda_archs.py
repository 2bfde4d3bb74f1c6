"""CUDA architecture tables: per toolkit and host, overrides, spellings.

In-process checks of the core here; the real builds and tools: tests/integration/test_cuda_archs.py.
"""
from __future__ import annotations

import pytest

from opencoti_build.gpu import cuda_archs
from opencoti_build.gpu.cuda_archs import CudaArch, CudaArchError, gencode_flags, selected_archs

NVCC_13_VERSION = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""


def sms(version: tuple[int, int], machine: str, override: str = "") -> list[str]:
    return [a.sm for a in selected_archs(version, machine, override)]


def test_cuda12_is_sass_for_turing_to_hopper_without_compression() -> None:
    flags = gencode_flags((12, 6), "x86_64")
    assert flags == [w for n in (75, 80, 86, 89, 90) for w in ("-gencode", f"arch=compute_{n},code=sm_{n}")]
    assert sms((12, 9), "x86_64") == ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90"]  # 12.x never gets sm_120
    assert sms((12, 6), "aarch64") == sms((12, 6), "x86_64")


def test_cuda13_x86_adds_sm120f_and_compresses() -> None:
    flags = gencode_flags((13, 0), "x86_64")
    assert flags[-3:] == ["-gencode", "arch=compute_120f,code=sm_120f", "--compress-mode=size"]
    assert sms((13, 0), "amd64") == ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_120f"]
    assert not any(w.startswith("code=compute") for w in flags)  # SASS only: no PTX


def test_cuda13_aarch64_replaces_the_list() -> None:
    assert gencode_flags((13, 0), "aarch64") == [
        "-gencode", "arch=compute_110f,code=sm_110f", "-gencode", "arch=compute_121a,code=sm_121a", "--compress-mode=size"]


def test_override_is_validated_against_the_toolkit() -> None:
    assert sms((13, 0), "x86_64", "80, 90,120f,80") == ["sm_80", "sm_90", "sm_120f"]
    assert sms((12, 8), "x86_64", "120a") == ["sm_120a"]
    with pytest.raises(CudaArchError, match=r"nvcc 13.0 cannot build sm_70 \(it builds 75, 80"):
        selected_archs((13, 0), "x86_64", "70,80")
    with pytest.raises(CudaArchError, match="nvcc 12.6 cannot build sm_120f"):
        selected_archs((12, 6), "x86_64", "120f")
    with pytest.raises(CudaArchError, match="'9x' is not an architecture"):
        selected_archs((13, 0), "x86_64", "80,9x")
    with pytest.raises(CudaArchError, match="sm_100 and sm_100f cannot be built together"):
        selected_archs((13, 0), "x86_64", "100,100f")


def test_unsupported_toolkits_and_hosts_are_named() -> None:
    with pytest.raises(CudaArchError, match="CUDA 11.8 is older than 12.0"):
        gencode_flags((11, 8), "x86_64")
    with pytest.raises(CudaArchError, match="no default architecture list for CUDA 14.0"):
        gencode_flags((14, 0), "x86_64")
    assert sms((14, 0), "x86_64", "90") == ["sm_90"]  # newer toolkits: the newest known accepted set
    with pytest.raises(CudaArchError, match="ppc64le"):
        gencode_flags((13, 0), "ppc64le")


def test_arch_spellings() -> None:
    assert CudaArch.parse("sm_121a") == CudaArch(121, "a")
    assert CudaArch.parse("compute_90").gencode == ("-gencode", "arch=compute_90,code=sm_90")
    assert cuda_archs.parse_nvcc_version(NVCC_13_VERSION) == (13, 0)
    with pytest.raises(CudaArchError, match="no 'release X.Y' line"):
        cuda_archs.parse_nvcc_version("clang version 15")


def test_table_builders_spell_every_number_and_variant() -> None:
    # (the tables are built once at import; these are the builders the tables above come from)
    assert cuda_archs._archs("75", "120f", "sm_121a") == (CudaArch(75), CudaArch(120, "f"), CudaArch(121, "a"))
    assert cuda_archs._with_variants((100, 103), ("", "f")) == frozenset(
        {CudaArch(100), CudaArch(100, "f"), CudaArch(103), CudaArch(103, "f")})


def test_defaults_need_no_override_and_gencode_flags_pass_one_on() -> None:
    assert [a.sm for a in selected_archs((13, 0), "x86_64")] == ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90",
                                                                   "sm_120f"]
    assert gencode_flags((13, 0), "aarch64", "90") == ["-gencode", "arch=compute_90,code=sm_90",
                                                       "--compress-mode=size"]


def test_only_cuda_13_compresses_its_fatbins() -> None:
    assert cuda_archs.compress_flags((12, 9)) == []  # 12.9 knows the flag; upstream passes it on 13 only
    assert cuda_archs.compress_flags((13, 0)) == ["--compress-mode=size"]
    assert cuda_archs.compress_flags((14, 2)) == []


def test_refusals_are_one_line_naming_the_variable_and_the_fix() -> None:
    with pytest.raises(CudaArchError, match=r"^`nvcc --version` printed no 'release X\.Y' line; is this nvcc\?$"):
        cuda_archs.parse_nvcc_version("nvcc: NVIDIA (R) Cuda compiler driver\n")
    with pytest.raises(CudaArchError, match="^CUDA_ARCHS names no architecture; write e.g. CUDA_ARCHS=80,90,120f "
                                            "or leave it empty$"):
        cuda_archs.parse_override(" , ,")
