"""opencoti_build.gpu.toolchains: where nvcc, hipcc and glslc are looked for, absent vs broken, and what CUDA DSOs link.

In-process checks of the core here; the real builds and tools: tests/integration/test_toolchains.py.
"""
from __future__ import annotations

import subprocess
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


def test_one_install_under_two_names_is_one_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/usr/local/cuda -> cuda-13.0: found through either name (the variable, a default, PATH), it is the same program
    and root, so the commands and the outputs are the same; a program that is itself a link keeps its own name."""
    real = tmp_path / "cuda-13.0"
    nvcc = program(real / "bin" / "nvcc")
    (tmp_path / "cuda").symlink_to(real)
    named = locate({"CUDA_PATH": str(tmp_path / "cuda"), "ENV": {"PATH": ""}}, "CUDA_PATH", "nvcc", (), "HINT")
    direct = locate({"CUDA_PATH": str(real), "ENV": {"PATH": ""}}, "CUDA_PATH", "nvcc", (), "HINT")
    default = locate({"CUDA_PATH": "", "ENV": {"PATH": ""}}, "CUDA_PATH", "nvcc", [str(tmp_path / "cuda")], "HINT")
    on_path = locate({"CUDA_PATH": "", "ENV": {"PATH": str(tmp_path / "cuda" / "bin")}}, "CUDA_PATH", "nvcc", (), "HINT")
    assert named.program == direct.program == default.program == on_path.program == str(nvcc)
    assert named.root == direct.root == default.root == str(real) and on_path.root is None
    assert named.searched == f"CUDA_PATH={tmp_path / 'cuda'}"  # what the user gave, in messages
    (real / "bin" / "nvcc++").symlink_to("nvcc")  # a driver may act on the name it is started by
    assert locate({"X": str(tmp_path / "cuda"), "ENV": {}}, "X", "nvcc++", (), "").program == str(real / "bin" / "nvcc++")
    glslc = program(tmp_path / "sdk-1.4" / "bin" / "glslc")
    (tmp_path / "sdk").symlink_to(tmp_path / "sdk-1.4")
    asked = []
    monkeypatch.setattr(vulkan, "run", lambda argv, environ: asked.append(argv) or subprocess.CompletedProcess(
        argv, 0, "shaderc v2025.1\n", ""))
    # the SDK's include/ and lib/ that backends/vulkan passes are the real ones too
    assert vulkan.probe({"VULKAN_SDK": str(tmp_path / "sdk"), "ENV": {"PATH": ""}}) == vulkan.GlslcToolchain(
        str(glslc), "shaderc v2025.1", "glslc shaderc v2025.1", str(tmp_path / "sdk-1.4"))
    assert asked == [[str(glslc), "--version"]]


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
