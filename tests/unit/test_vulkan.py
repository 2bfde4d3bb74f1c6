"""`scons vulkan`: when there is no glslc to build with.

In-process checks of the core here; the real builds and tools: tests/integration/test_vulkan.py.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from opencoti_build import errors
from opencoti_build.gpu.toolchains import vulkan

pytestmark = pytest.mark.skipif(shutil.which("glslc") is None, reason="glslc not installed")


def test_no_glslc_on_path_is_a_reason_to_skip(tmp_path: Path) -> None:
    with pytest.raises(errors.Absent) as absent:
        vulkan.probe({"VULKAN_SDK": "", "ENV": {"PATH": str(tmp_path)}})
    assert str(absent.value) == "no glslc on PATH; install glslc (shaderc) or the Vulkan SDK, or set VULKAN_SDK=DIR"
