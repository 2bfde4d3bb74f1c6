"""`scons vulkan`: real glslc builds of the miniature tree's shaders into ggml-vulkan.so."""
from __future__ import annotations

import filecmp
import re
import shutil
from pathlib import Path

import pytest

from opencoti_build.formats import spirv
from opencoti_build.gpu import vulkan_shaders

from scons_runs import dso_paths, scons

pytestmark = pytest.mark.skipif(shutil.which("glslc") is None, reason="glslc not installed")

SHADERS = ["add_f32", "add_u32", "copy", "scale_f32"]
SHADER_DIR = vulkan_shaders.SHADER_DIR


def spirv_compiled(stdout: str) -> list[str]:
    """Variant names of the .spv files glslc wrote during a build (its ``GLSLC <x.spv>`` lines)."""
    return sorted(m.group(1) for m in re.finditer(r"^(?:\[\d+/\d+\] )?GLSLC \S*/([A-Za-z0-9_]+)\.spv$", stdout, re.M))


def build_vulkan(tree: Path, build: Path, *extra: str, check: bool = True):
    return scons(f"SRC={tree}", "vulkan", *extra, build=build, check=check)


def test_builds_embeds_and_mirrors_when_asked(tree: Path, tmp_path: Path) -> None:
    proc = build_vulkan(tree, tmp_path)
    assert spirv_compiled(proc.stdout) == SHADERS
    dso, mirror = dso_paths("vulkan", tmp_path)
    assert dso.is_file() and not mirror.exists()  # HOME is left alone unless MIRROR=1
    mirrored = build_vulkan(tree, tmp_path, "MIRROR=1")
    assert spirv_compiled(mirrored.stdout) == [] and f"Mirroring {dso} to {mirror}" in mirrored.stdout
    assert spirv.embedded_shaders(str(dso)) == SHADERS
    modules = spirv.find_modules(dso.read_bytes())
    assert len(modules) == len(SHADERS)
    assert {m.header.version for m in modules} == {"1.5"}  # --target-env=vulkan1.2
    assert filecmp.cmp(dso, mirror, shallow=False)


def test_header_edit_rebuilds_exactly_its_includers(tree: Path, tmp_path: Path) -> None:
    build_vulkan(tree, tmp_path)
    assert spirv_compiled(build_vulkan(tree, tmp_path).stdout) == []  # null build

    header = tree / SHADER_DIR / "types.glsl"
    header.write_text(header.read_text().replace("local_size_x = 64", "local_size_x = 32"))
    proc = build_vulkan(tree, tmp_path)
    assert spirv_compiled(proc.stdout) == ["add_f32", "add_u32", "scale_f32"]  # not copy.comp
    assert "Linking" in proc.stdout

    comp = tree / SHADER_DIR / "copy.comp"
    comp.write_text(comp.read_text().replace("local_size_x = 64", "local_size_x = 16"))
    assert spirv_compiled(build_vulkan(tree, tmp_path).stdout) == ["copy"]


def test_generated_source_is_deterministic(tree: Path, tmp_path: Path) -> None:
    generated = []
    for name in ("one", "two"):
        build_vulkan(tree, tmp_path / name, "--cache-disable")
        generated.append(tmp_path / name / "out" / "backends" / "vulkan" / "ggml-vulkan-shaders.cpp")
    assert generated[0].read_bytes() == generated[1].read_bytes()
    assert b"unsigned int add_f32_len = " in generated[0].read_bytes()


def test_glsl_syntax_error_is_one_line_and_leaves_no_dso(tree: Path, tmp_path: Path) -> None:
    comp = tree / SHADER_DIR / "scale.comp"
    comp.write_text(comp.read_text().replace("void main() {", "void main( {"))
    proc = build_vulkan(tree, tmp_path, check=False)
    assert proc.returncode != 0
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "scale.comp:" in line and "error" in line]
    assert len(errors) == 1, proc.stdout + proc.stderr
    dso, mirror = dso_paths("vulkan", tmp_path)
    assert not dso.parent.exists() or not any(dso.parent.iterdir())
    assert not mirror.exists()


def test_vulkan_sdk_without_glslc_is_one_error_line(tree: Path, tmp_path: Path) -> None:
    sdk = tmp_path / "no-sdk"
    proc = build_vulkan(tree, tmp_path, f"VULKAN_SDK={sdk}", check=False)
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if "VULKAN_SDK" in line] == [
        f"scons: error: VULKAN_SDK={sdk} has no executable bin/glslc; point it at a Vulkan SDK "
        "or leave it empty to use glslc on PATH"]
    assert not dso_paths("vulkan", tmp_path)[0].exists()


def test_no_glslc_skips_the_backend_with_one_warn_line(tree: Path, tmp_path: Path) -> None:
    proc = scons(f"SRC={tree}", "vulkan", build=tmp_path, env_extra={"PATH": str(tmp_path / "no-glslc-here")})
    assert [line for line in proc.stderr.splitlines() if line.startswith("WARN")] == [
        "WARN: vulkan skipped: no glslc on PATH; install glslc (shaderc) or the Vulkan SDK, or set VULKAN_SDK=DIR"]
    assert not dso_paths("vulkan", tmp_path)[0].exists()
