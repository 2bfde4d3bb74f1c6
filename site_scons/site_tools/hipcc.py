"""SCons tool ``hipcc``: compile ggml-cuda's ``.cu`` sources as HIP for AMD GPUs.

Nothing runs when the tool is loaded: hipcc is found and interrogated by
``opencoti_build.gpu.toolchains.rocm.probe``, called only for a requested ROCm build;
``env.UseToolchain(found)`` then points the environment at it.

``env.HipObject(target, source)`` compiles one ``.cu`` with ``$HIPCC -x hip`` for every target in
``$HIP_OFFLOAD_ARCHS`` (the caller fills it from ``opencoti_build.gpu.rocm_archs.select_archs``), with
``#include`` dependencies of ``.cu``/``.cuh`` tracked through ``CPPPATH`` (the shared opencoti_scons/include_scanner.py);
the builder's emitter registers each object in the compile database when the compiledb tool is loaded.

Construction variables read: ``HIPCCFLAGS``, ``HIP_OFFLOAD_ARCHS``, ``CPPDEFINES``, ``CPPPATH``, ``SRC`` and
``BUILD_DIR`` (for the prefix maps), ``HIPCCCOMSTR``,
``CCWRAPPER_HIPCC_ARGV`` (the launcher in front of hipcc, unsigned; default none). Set by ``UseToolchain``: ``HIPCC``, ``ENV`` (with
``HIP_PLATFORM=amd``, and ``ROCM_PATH`` when that selected hipcc), ``--offload-compress`` appended to
``HIPCCFLAGS`` where clang accepts it, ``BACKEND_TOOLCHAIN`` (for the manifest). Set by the tool:
``HIPCCCOM``, ``HIPCCPREFIXMAPS``, ``_HIP_ARCH_FLAGS``, the HIP defines appended to ``CPPDEFINES``, and
defaults for the rest and for ``INCPREFIX``/``CPPDEFPREFIX``.
"""
from __future__ import annotations

import SCons.Action
import SCons.Subst
from SCons.Builder import Builder
from SCons.Environment import Base as Environment

from opencoti_build.cache import launchers
from opencoti_build.cosmo.prefix_maps import prefix_maps
from opencoti_build.gpu import toolchains
from opencoti_build.gpu.toolchains import rocm
from opencoti_build.report import compdb
from opencoti_scons.include_scanner import include_scanner

BASE_FLAGS = ("-O2", "-fPIC", "-std=c++17")
BASE_DEFINES = ("GGML_USE_HIP=1", "GGML_HIP_NO_VMM=1", "GGML_USE_TINYBLAS=1")


def use_toolchain(env: Environment, found: rocm.HipToolchain) -> None:
    """Compile with ``found`` (from ``opencoti_build.gpu.toolchains.rocm.probe``), in the environment it was probed in."""
    env["HIPCC"] = found.hipcc
    env["ENV"] = dict(found.environ)
    if found.offload_compress:
        env.AppendUnique(HIPCCFLAGS=[rocm.COMPRESS_FLAG])
    env["BACKEND_TOOLCHAIN"] = found


def _register(target, source, env: Environment):
    """The HipObject emitter: a compile_commands.json entry when the compiledb tool is loaded."""
    if hasattr(env, "CompileDbEntry"):
        env.CompileDbEntry(target[0], source[0], "HIPCCCOM", compdb.clang_hip_arguments)  # clang's HIP driver
    return target, source


def generate(env: Environment) -> None:
    env.SetDefault(
        INCPREFIX="-I", INCSUFFIX="", CPPDEFPREFIX="-D", CPPDEFSUFFIX="",  # set by no other tool of a bare env
        HIPCC="hipcc",
        HIPCCFLAGS=list(BASE_FLAGS),
        HIP_OFFLOAD_ARCHS=[],
        _HIP_ARCH_FLAGS="${_concat('--offload-arch=', HIP_OFFLOAD_ARCHS, '', __env__)}",
        # -ffile-prefix-map (opencoti_build.cosmo.prefix_maps): __FILE__ and debug info, host and device, name no
        # checkout, SRC or BUILD_DIR path
        HIPCCPREFIXMAPS=[SCons.Subst.Literal(flag) for flag in
                         prefix_maps(env.Dir("#").abspath, env.get("SRC"), env.get("BUILD_DIR"))],
        # CCWRAPPER in front of hipcc, outside the signature (opencoti_build.cache.launchers)
        HIPCCCOM=launchers.prefixed("$HIPCC -x hip -c -o $TARGET $HIPCCFLAGS $HIPCCPREFIXMAPS $_HIP_ARCH_FLAGS "
                                    "$_CPPDEFFLAGS $_CPPINCFLAGS $SOURCES", "hipcc"),
        **launchers.construction_vars("", []),
    )
    env.AppendUnique(CPPDEFINES=list(BASE_DEFINES))
    env["BUILDERS"]["HipObject"] = Builder(
        action=SCons.Action.Action("$HIPCCCOM", "$HIPCCCOMSTR"), suffix=".o", src_suffix=".cu", emitter=_register,
        source_scanner=include_scanner("HipIncludeScanner", (".cu",), quote_vars=(), dir_vars=("CPPPATH",)),
        single_source=True,
    )
    env.AddMethod(use_toolchain, "UseToolchain")


def exists(env: Environment) -> bool:
    """Whether a hipcc is where the build would look (``ROCM_PATH``, /opt/rocm, PATH)."""
    return toolchains.found(rocm.find_hipcc, env)
