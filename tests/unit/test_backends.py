"""opencoti_build.gpu.backends: the registry every part of the build reads, and its device-code readers.

In-process checks of the core here; the real builds and tools: tests/integration/test_backends.py.
"""
from __future__ import annotations

from pathlib import Path

from opencoti_build.config import targets
from opencoti_build.gpu import backends


def test_build_order_and_names_are_the_registry_s() -> None:
    assert backends.NAMES == ("cuda", "rocm", "vulkan")
    assert [b.dso_name for b in backends.BACKENDS] == ["ggml-cuda.so", "ggml-rocm.so", "ggml-vulkan.so"]
    assert set(backends.NAMES) <= set(targets.NAMES)
    # ggml-rocm.so is HIP-compiled ggml-cuda: the loader asks it for the CUDA names
    assert backends.get("rocm").entry_points == ("ggml_backend_cuda_init", "ggml_backend_cuda_reg")
    assert backends.get("vulkan").entry_points == ("ggml_backend_vulkan_init", "ggml_backend_vulkan_reg")


def test_no_toolchain_message_names_every_backend_and_its_variable() -> None:
    assert backends.none_built_hint() == (
        "no CUDA, ROCm or Vulkan toolchain was found (see the WARN lines); install one, "
        "point CUDA_PATH/ROCM_PATH/VULKAN_SDK at it, or pass CPU_ONLY=1")


def test_missing_sources_skip_rocm_and_vulkan_only(tmp_path: Path) -> None:
    assert backends.get("cuda").why_not_buildable(str(tmp_path)) is None
    assert backends.get("rocm").why_not_buildable(str(tmp_path)).startswith("no ggml-cuda sources in ")
    assert backends.get("vulkan").why_not_buildable(str(tmp_path)).endswith("ggml-vulkan.cpp does not exist")
