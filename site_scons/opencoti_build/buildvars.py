"""The build's command-line variables, defined once: name, default, help, validation.

`scons -h` prints them; SConstruct refuses any KEY=VALUE not declared here.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from SCons.Variables import BoolVariable, Variables

from opencoti_build import patch_series

PROJECT = Path(__file__).resolve().parents[2]
DEFAULT_SRC = "vendors/sources/llamafile"

HELP_TARGETS = """\
opencoti llamafile build

Targets:
  (default)     the thin llamafile binary ($BUILD_DIR/o/llamafile/llamafile, with .com.dbg and .aarch64.elf)
  host          same as the default
  compiledb     compile_commands.json at the project root (every TU: fat, CUDA, HIP)
  apply         reset vendors/sources/llamafile, init submodules, apply llamafile's and opencoti's patches
  reset         restore the pristine vendored tree (refuses to discard foreign edits without FORCE=1)
  cuda          ggml-cuda.so  (nvcc; CUDA_PATH)
  rocm          ggml-rocm.so  (hipcc; ROCM_PATH)
  vulkan        ggml-vulkan.so (glslc; VULKAN_SDK)
  backends      every backend whose toolchain is present (fails if none built, unless CPU_ONLY=1)
  package       dist/llamafile/opencoti-llamafile-<ver>-<tag>-<arch>.llamafile (+ embedder with MODEL=)
  verify        check the packaged artifacts against their manifests

Options: --cache-disable turns the object cache off (as OPENCOTI_NO_CCACHE=1 did).

Variables (KEY=VALUE on the command line; an unknown KEY is an error):
"""


def _env_default(name: str, fallback: str) -> str:
    return os.environ.get(name, fallback)


def declare(variables: Variables) -> None:
    """Add every variable of the build to ``variables``."""
    variables.AddVariables(
        ("SRC", "llamafile source tree (llamafile-0.10 layout)", DEFAULT_SRC),
        BoolVariable("VERBOSE", "print whole command lines instead of one short line per step", False),
        ("COSMOCC", "cosmocc toolchain dir (bin/cosmocc, bin/cosmoc++, bin/ar.ape); empty: the gcc-based stand-in",
         _env_default("OPENCOTI_COSMOCC", "")),
        ("MODE", "cosmocc MODE (selects its runtime libraries; objects go to $BUILD_DIR/o/$MODE)", ""),
        ("TARGET_ARCH", "per-arch tuning flags for every fat compile; empty: the toolchain's default", ""),
        ("BUILD_DIR", "objects and intermediates", "build"),
        ("DIST_DIR", "packaged artifacts go to $DIST_DIR/llamafile", "dist"),
        ("BACKEND_DIST_DIR", "backend DSOs go to $BACKEND_DIST_DIR/llamafile/<backend>/<ver>", "vendors/dist"),
        ("CACHE_DIR", "object cache (SCons CacheDir); empty: no cache", ".opencoti/cache"),
        ("COMPILEDB", "where `scons compiledb` writes", "compile_commands.json"),
        ("SOURCE_DATE_EPOCH", "timestamp baked into outputs and zip entries",
         _env_default("SOURCE_DATE_EPOCH", "0")),
        ("CUDA_PATH", "CUDA toolkit; empty: $OPENCOTI_CUDA_PATH, /usr/local/cuda-12.6, other usual places, nvcc on PATH",
         _env_default("OPENCOTI_CUDA_PATH", "")),
        ("CUDA_ARCHS", "comma-separated CUDA archs overriding the toolkit's table (e.g. 80,90,120f)", ""),
        BoolVariable("CUBLAS", "build ggml-cuda against cuBLAS instead of TinyBLAS", False),
        BoolVariable("FA_ALL_QUANTS", "compile every fattn-vec K/V instance (GGML_CUDA_FA_ALL_QUANTS / GGML_CUDA_FA_QUANTS=all; "
                     "opencoti's turbo/TCQ KV tiers need it)", True),
        ("ROCM_PATH", "ROCm install; empty: $OPENCOTI_ROCM_PATH, /opt/rocm, hipcc on PATH",
         _env_default("OPENCOTI_ROCM_PATH", "")),
        ("OFFLOAD_ARCH", "comma-separated gfx targets overriding the upstream list", ""),
        ("VULKAN_SDK", "Vulkan SDK; empty: $OPENCOTI_VULKAN_SDK, glslc on PATH", _env_default("OPENCOTI_VULKAN_SDK", "")),
        BoolVariable("CPU_ONLY", "package without GPU DSOs / let `backends` build none", False),
        ("MODEL", "GGUF to embed in the embedder artifact", ""),
        ("ARGS", ".args file to embed instead of the generated one", ""),
        ("ARCH", "architecture in artifact names (x86_64, aarch64); empty: this machine's", ""),
        ("HOST", "package this prebuilt thin binary instead of building one", ""),
        ("ALIGN", "zip data alignment of stored entries", "65536"),
        BoolVariable("FORCE", "let apply/reset discard changes a previous apply did not make", False),
        ("PATCH_SERIES", "the opencoti patch series applied after llamafile's own", patch_series.OPENCOTI_PATCHES),
        ("APPLIED_SERIES", "record of the last apply (patches, commits), read by the manifest",
         patch_series.DEFAULT_RECORD),
        ("LLAMACPP", "llama.cpp checkout for the native lane; empty: $SRC/llama.cpp", ""),
    )


class SourceTreeError(ValueError):
    """SRC names no usable llamafile tree."""


def source_tree(env: Mapping[str, Any]) -> str:
    """Absolute path of SRC (relative paths are from the project root), whether or not it exists."""
    src = Path(env["SRC"])
    return str(src if src.is_absolute() else PROJECT / src)


def checked_source_tree(env: Mapping[str, Any]) -> str:
    """:func:`source_tree`, checked to hold a llamafile tree that cosmocc can be given."""
    src = Path(source_tree(env))
    if not (src / "llamafile" / "version.h").is_file():
        hint = ("run `git submodule update --init` (or `scons apply`)" if env["SRC"] == DEFAULT_SRC
                else "point SRC= at a llamafile checkout")
        raise SourceTreeError(f"no llamafile source tree at {src} (looked for llamafile/version.h); {hint}")
    if " " in str(src):
        raise SourceTreeError(f"SRC path {src} contains a space, which cosmocc refuses in any argument; "
                              "move the tree or reach it through a symlink without spaces")
    if "$" in str(src):
        raise SourceTreeError(f"SRC path {src} contains '$', which SCons would expand; rename the directory")
    return str(src)


def command_environment(os_environ: Mapping[str, str], env: Mapping[str, Any]) -> dict[str, str]:
    """The environment every build command runs with: deliberate, reproducible, no leakage."""
    tmpdir = Path(env["BUILD_DIR"]) / "tmp"
    tmpdir.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os_environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os_environ.get("HOME", "/"),
        "TMPDIR": str(tmpdir),
        "SOURCE_DATE_EPOCH": str(env["SOURCE_DATE_EPOCH"]),
        "LC_ALL": "C",
        "HIP_PLATFORM": "amd",
        **({"MODE": env["MODE"]} if env["MODE"] else {}),  # cosmocc picks its runtime libraries by MODE
    }
