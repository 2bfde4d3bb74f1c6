"""opencoti_build.gpu.toolchains: where nvcc, hipcc and glslc are looked for, absent vs broken, and what CUDA DSOs link.

In-process checks of the core here; the real builds and tools: tests/integration/test_toolchains.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from opencoti_build.gpu.toolchains import ToolchainBroken, cuda, locate, vulkan

from samples import program


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


def test_cuda_path_without_nvcc_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ToolchainBroken) as broken:
        cuda.probe({"CUDA_PATH": str(tmp_path), "ENV": {"PATH": ""}})
    assert str(broken.value) == (f"CUDA_PATH={tmp_path} has no executable bin/nvcc; point it at a CUDA 12.x/13.x "
                                 f"toolkit, or leave it empty to search {cuda.DEFAULT_CUDA_PATH} and the usual places")
