"""`scons native`'s rules over the source description: packages, flags, paths, templates, cuBLAS, the linker.

In-process checks of the core here; the real builds and tools: tests/integration/test_native.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from opencoti_build.config import templates
from opencoti_build.gpu import cublas
from opencoti_build.native import native_lane
from opencoti_build.tree import sources


def test_native_packages_are_the_programs_llamacpp_parts_in_link_order() -> None:
    packages = native_lane.native_packages("x86_64")
    assert [p.name for p in packages] == ["llamafile", "server", "mtmd", "common", "llama", "ggml", "httplib"]
    server_main = packages[0]  # llamafile's package contributes llama.cpp's server.cpp alone
    assert server_main.sources == ("llama.cpp/tools/server/server.cpp",)
    assert all(d.startswith("llama.cpp/") for p in packages for d in p.iquote + p.isystem)


def test_llamacpp_packages_complete_their_directories() -> None:
    by_name = {p.name: p for p in native_lane.native_packages("x86_64")}
    assert "llama.cpp/src/models/*.cpp" in by_name["llama"].sources  # a newer tree's models
    assert "llama.cpp/common/parsers/*.cpp" in by_name["common"].sources
    assert "llama.cpp/ggml/src/ggml-cpu/arch/x86/*.c" in by_name["ggml"].sources
    assert "llama.cpp/tools/mtmd/mtmd-cli.cpp" in by_name["mtmd"].exclude  # another program's main
    arm = {p.name: p for p in native_lane.native_packages("aarch64")}["ggml"]
    assert "llama.cpp/ggml/src/ggml-cpu/arch/arm/*.cpp" in arm.sources


def test_fat_only_flags_and_defines_are_dropped() -> None:
    flags = ["-O3", "-mgcc", "-mcosmo", "-Xx86_64-mavx2", "-DCOSMOCC=1", "-fopenmp", "-DNDEBUG"]
    assert native_lane.native_flags(flags) == ["-O3", "-fopenmp", "-DNDEBUG"]
    assert native_lane.native_defines(sources.LLAMA_DEFINES) == [
        "GGML_USE_CPU", "GGML_USE_CPU_REPACK", "GGML_USE_OPENMP", "GGML_SCHED_MAX_COPIES=4", "NDEBUG"]
    assert native_lane.native_defines(sources.LLAMAFILE.defines) == []  # LLAMAFILE_TUI renames main
    # the lane defines _GNU_SOURCE on every compile: ggml's own (upstream.CMAKE_DEFINES) is not said twice
    ggml = {p.name: p for p in native_lane.native_packages("x86_64")}["ggml"]
    assert native_lane.NATIVE_DEFINES == ("_GNU_SOURCE",) and "_GNU_SOURCE" not in ggml.defines


def test_configure_template_is_cmakes_at_only_configure_file() -> None:
    text = "#cmakedefine HAS 1\n#cmakedefine NOT 1\nint n = @N@; const char *s = \"@S@\";\n"
    out = templates.configure_template(text, {"HAS": "1", "NOT": "", "N": "0", "S": "unknown"})
    assert out == "#define HAS 1\n/* #undef NOT */\nint n = 0; const char *s = \"unknown\";\n"
    with pytest.raises(templates.TemplateError, match="@?NEW.*template_values"):
        templates.configure_template("@NEW@", {})


def test_cublas_is_found_in_the_toolkit_before_a_wheel(tmp_path: Path) -> None:
    def layout(root: Path, lib: str) -> Path:
        (root / "include").mkdir(parents=True)
        (root / "include" / "cublas_v2.h").touch()
        (root / "lib").mkdir()
        (root / "lib" / lib).touch()
        return root

    wheel = layout(tmp_path / "site" / "nvidia" / "cu13", "libcublas.so.13")
    toolkit = tmp_path / "toolkit"
    toolkit.mkdir()
    found = cublas.find_cublas(str(toolkit), 13, [str(wheel)])
    assert found == cublas.Cublas(str(wheel / "include"), str(wheel / "lib"), "libcublas.so.13")
    assert cublas.find_cublas(str(toolkit), 12, [str(wheel)]) is None  # a cu13 library never serves CUDA 12
    layout(toolkit, "libcublas.so")
    assert cublas.find_cublas(str(toolkit), 13, [str(wheel)]).lib_dir == str(toolkit / "lib")


def test_the_linker_is_gold_when_on_path_unless_named() -> None:
    def only(*programs: str):
        return lambda program: program in programs
    assert native_lane.linker_flags("auto", only("ld.gold", "ld.bfd")) == ["-fuse-ld=gold"]
    assert native_lane.linker_flags("auto", only("ld.bfd")) == []  # the compiler's own default
    assert native_lane.linker_flags("bfd", only("ld.gold", "ld.bfd")) == ["-fuse-ld=bfd"]
    with pytest.raises(native_lane.LinkerError) as err:
        native_lane.linker_flags("gold", only("ld.bfd"))
    assert str(err.value) == ("NATIVE_LINKER=gold: ld.gold is not on PATH; install binutils' ld.gold "
                              "or use NATIVE_LINKER=auto")
