"""opencoti_build.toolchains: where nvcc, hipcc and glslc are looked for, absent vs broken, and what CUDA DSOs link."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from opencoti_build import errors
from opencoti_build.toolchains import ToolchainBroken, cuda, locate, vulkan

NVCC_12_6 = "#!/bin/sh\necho 'Cuda compilation tools, release 12.6, V12.6.85'\n"


def program(path: Path, script: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)
    return path


def test_an_explicit_install_is_the_only_place_looked(tmp_path: Path) -> None:
    on_path = program(tmp_path / "path" / "glslc")
    settings = {"VULKAN_SDK": str(tmp_path / "sdk"), "ENV": {"PATH": str(on_path.parent)}}
    with pytest.raises(ToolchainBroken) as broken:
        locate(settings, "VULKAN_SDK", "glslc", (), "HINT")
    assert str(broken.value) == f"VULKAN_SDK={tmp_path / 'sdk'} has no executable bin/glslc; HINT"
    in_sdk = program(tmp_path / "sdk" / "bin" / "glslc")
    found = locate(settings, "VULKAN_SDK", "glslc", (), "HINT")
    assert (found.program, found.root) == (str(in_sdk), str(tmp_path / "sdk"))


def test_defaults_come_before_path_and_path_says_no_root(tmp_path: Path) -> None:
    on_path = program(tmp_path / "path" / "hipcc")
    settings = {"ROCM_PATH": "", "ENV": {"PATH": str(on_path.parent)}}
    default = tmp_path / "rocm"
    found = locate(settings, "ROCM_PATH", "hipcc", [str(default)], "HINT")
    assert (found.program, found.root, found.searched) == (str(on_path), None, f"{default} and PATH")
    program(default / "bin" / "hipcc")
    assert locate(settings, "ROCM_PATH", "hipcc", [str(default)], "HINT").root == str(default)


def test_a_non_executable_file_is_not_a_toolchain(tmp_path: Path) -> None:
    glslc = program(tmp_path / "sdk" / "bin" / "glslc")
    glslc.chmod(0o644)
    with pytest.raises(ToolchainBroken):
        vulkan.probe({"VULKAN_SDK": str(tmp_path / "sdk"), "ENV": {"PATH": ""}})


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


def test_cuda_path_without_nvcc_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ToolchainBroken) as broken:
        cuda.probe({"CUDA_PATH": str(tmp_path), "ENV": {"PATH": ""}})
    assert str(broken.value) == (f"CUDA_PATH={tmp_path} has no executable bin/nvcc; point it at a CUDA 12.x/13.x "
                                 f"toolkit, or leave it empty to search {cuda.DEFAULT_CUDA_PATH} and the usual places")


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
