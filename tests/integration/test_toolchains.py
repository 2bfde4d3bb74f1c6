"""opencoti_build.gpu.toolchains: where nvcc, hipcc and glslc are looked for, absent vs broken, and what CUDA DSOs link."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from opencoti_build import errors
from opencoti_build.gpu.toolchains import ToolchainBroken, cuda, vulkan

from samples import program

NVCC_12_6 = "#!/bin/sh\necho 'Cuda compilation tools, release 12.6, V12.6.85'\n"


def test_a_glslc_that_fails_is_broken_not_absent(tmp_path: Path) -> None:
    glslc = program(tmp_path / "bin" / "glslc", "#!/bin/sh\nexit 3\n")
    with pytest.raises(ToolchainBroken) as broken:
        vulkan.probe({"VULKAN_SDK": "", "ENV": {"PATH": str(glslc.parent)}})
    assert str(broken.value) == f"{glslc} --version failed (exit 3); reinstall glslc"


def test_cuda_toolkit_and_the_archs_asked_of_it(tmp_path: Path) -> None:
    nvcc = program(tmp_path / "cuda-12.6" / "bin" / "nvcc", NVCC_12_6)
    toolkit = cuda.probe({"CUDA_PATH": str(nvcc.parents[1]), "CUDA_ARCHS": "80,90", "ENV": dict(os.environ)})
    assert (toolkit.nvcc, toolkit.root, toolkit.version) == (str(nvcc), str(nvcc.parents[1]), (12, 6))
    assert toolkit.arch_names == ("sm_80", "sm_90")
    assert "arch=compute_90,code=sm_90" in toolkit.gencode
    assert toolkit.record == "CUDA 12.6" and toolkit.reproducible_flags == [cuda.OBJTEMP_FLAG]


@pytest.mark.skipif(any(Path(r, "bin", "nvcc").exists() for r in cuda.candidate_roots()), reason="a toolkit is installed")
def test_no_nvcc_anywhere_is_absent(tmp_path: Path) -> None:
    with pytest.raises(errors.Absent, match=r"^no nvcc in .* and PATH; set CUDA_PATH to a CUDA 12.x/13.x toolkit$"):
        cuda.probe({"CUDA_PATH": "", "ENV": {"PATH": str(tmp_path)}})


@pytest.mark.parametrize("stub", [None, "lib64/stubs", "targets/sbsa-linux/lib/stubs"])
def test_one_driver_stub_decision_for_both_lanes(tmp_path: Path, stub: str | None) -> None:
    root = tmp_path / f"cuda-{stub is not None}"
    nvcc = program(root / "bin" / "nvcc", NVCC_12_6)
    if stub:
        (root / stub).mkdir(parents=True)
        (root / stub / "libcuda.so").touch()
    toolkit = cuda.probe({"CUDA_PATH": str(root), "ENV": dict(os.environ)})
    linked = cuda.link_libraries(toolkit, cublas=False)
    assert linked.stub_dirs == ((str(Path(os.path.realpath(nvcc)).parents[1] / stub),) if stub else ())
    assert linked.defines == ([] if stub else ["GGML_CUDA_NO_VMM"])
    assert linked.cublas is None  # not asked for


def test_cublas_asked_of_a_toolkit_without_it_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cuda"
    program(root / "bin" / "nvcc", NVCC_12_6)
    toolkit = cuda.probe({"CUDA_PATH": str(root), "ENV": dict(os.environ)})
    monkeypatch.setattr(cuda.cublas_lookup, "wheel_roots", lambda major: [])  # this machine's wheel is not asked
    assert cuda.link_libraries(toolkit, cublas=True).cublas is None
    (root / "include").mkdir()
    (root / "include" / "cublas_v2.h").touch()
    (root / "lib64").mkdir()
    (root / "lib64" / "libcublas.so.12").touch()
    found = cuda.link_libraries(toolkit, cublas=True).cublas
    assert (found.include_dir, found.library) == (str(root / "include"), "libcublas.so.12")
