"""SCons tool ``nvcc``: compile ``.cu`` translation units with NVIDIA's nvcc.

Nothing runs when the tool is loaded: the toolkit is found by ``opencoti_build.gpu.toolchains.cuda.probe``,
called only by a lane that builds CUDA code (backends/SConscript for ``cuda``, the native lane), so a
null host build never runs nvcc; ``env.UseToolchain(toolkit)`` then points the environment at it.

``env.CudaObject(target, source)`` compiles one ``.cu``. ``#include`` dependencies of ``.cu``/``.cuh``
are found by the shared include scanner (opencoti_scons/include_scanner.py) through CPPPATH; the builder's
emitter registers each object with ``env.CompileDbEntry`` when the compiledb tool is loaded.

Construction variables read: ``NVCCFLAGS``, ``CPPDEFINES``, ``CPPPATH`` (and their ``_CPPDEFFLAGS``/
``_CPPINCFLAGS``), ``NVCC_PATH_MAPS`` (default: the checkout, ``SRC``, ``BUILD_DIR``), ``NVCCCOMSTR``,
``CCWRAPPER_NVCC_ARGV`` (the launcher in front of nvcc, unsigned; default none), ``CCWRAPPER_MAPS_VIA_PREPROCESSOR``.
Set by ``UseToolchain``: ``NVCC``, ``CUDA_ARCH_LIST`` (names like ``sm_120f``), ``CUDA_GENCODE``,
``NVCC_REPRODUCIBLE``, ``BACKEND_TOOLCHAIN`` (the toolkit, for the manifest). Set by the tool:
``NVCCCOM``, ``NVCCPREFIXMAPS`` (nvcc's -ffile-prefix-map words, for the DSO link), ``_NVCCCOMPILEMAPS``
(the compile's, opencoti_scons/compile_maps.py), defaults for the
rest and for ``INCPREFIX``/``CPPDEFPREFIX``.
"""
from __future__ import annotations

import os
from typing import Any

import SCons.Subst
from SCons.Builder import Builder
from SCons.Script import Action

from opencoti_build.cache import launchers
from opencoti_build.cosmo import prefix_maps
from opencoti_build.gpu import toolchains
from opencoti_build.gpu.toolchains import cuda
from opencoti_build.report import compdb
from opencoti_scons.compile_maps import compile_maps, env_path_maps
from opencoti_scons.include_scanner import include_scanner

CUDA_SUFFIXES = (".cu", ".cuh")


def use_toolchain(env: Any, toolkit: cuda.CudaToolkit) -> None:
    """Compile with ``toolkit`` (from ``opencoti_build.gpu.toolchains.cuda.probe``) for the architectures it was asked."""
    env["NVCC"] = toolkit.nvcc
    env["CUDA_ARCH_LIST"] = list(toolkit.arch_names)
    env["CUDA_GENCODE"] = list(toolkit.gencode)
    env["NVCC_REPRODUCIBLE"] = toolkit.reproducible_flags
    env["BACKEND_TOOLCHAIN"] = toolkit


def _nvcc_prefix_maps(maps: list[tuple[str, str]]) -> list[Any]:
    return [SCons.Subst.Literal(flag) for flag in prefix_maps.nvcc_flags(maps)]


def _nvcc_source_name(sources: Any, maps: list[tuple[str, str]]) -> list[Any]:
    """``-Xcudafe --orig_src_path_name=<mapped>``: the name cudafe++ and cicc hash instead of the absolute path."""
    names = [prefix_maps.remap(str(node.abspath), maps) for node in sources]
    if len(names) != 1 or "," in names[0]:  # -Xcudafe splits at commas
        return []
    return ["-Xcudafe", SCons.Subst.Literal(f"--orig_src_path_name={names[0]}")]


def _host_intermediate(target: Any, env: Any) -> list[tuple[str, str]]:
    """Under -objtemp, the map that names the host intermediate as sccache does (cuda.host_intermediate_map)."""
    if cuda.OBJTEMP_FLAG not in env.get("NVCC_REPRODUCIBLE", []) or len(target) != 1:
        return []
    return [cuda.host_intermediate_map(str(target[0]))]  # nvcc names it after -o $TARGET, as written


def _clang_cuda(env: Any) -> Any:
    """The database entry's arguments: clang's CUDA driver over this toolkit (clangd rejects nvcc's own flags)."""
    root = os.path.dirname(os.path.dirname(os.path.realpath(env.subst("$NVCC"))))
    return lambda argv: compdb.clang_cuda_arguments(argv, root)


def _register(target: list[Any], source: list[Any], env: Any) -> tuple[list[Any], list[Any]]:
    if hasattr(env, "CompileDbEntry"):  # the compiledb tool is loaded
        env.CompileDbEntry(target[0], source[0], "NVCCCOM", _clang_cuda(env))
    return target, source


def generate(env: Any) -> None:
    # a tool-less base env has _CPPDEFFLAGS/_CPPINCFLAGS but not the prefixes they expand with
    env.SetDefault(NVCC="nvcc", NVCCFLAGS=[], CUDA_GENCODE=[], INCPREFIX="-I", INCSUFFIX="",
                   CPPDEFPREFIX="-D", CPPDEFSUFFIX="")
    # Path-independent objects (opencoti_build.cosmo.prefix_maps): the host compiler's -ffile-prefix-map (nvcc
    # preprocesses host and device code with it: __FILE__, debug info), cudafe++/cicc told the source's
    # mapped name (they hash its absolute path into anonymous-namespace and static names), and
    # $NVCC_REPRODUCIBLE (UseToolchain): intermediates named after the object, not tmpxft_<pid>, the host
    # one then renamed as sccache names it (cuda.host_intermediate_map, last among the maps).
    env.SetDefault(NVCC_PATH_MAPS=env_path_maps(env),
                   NVCC_REPRODUCIBLE=[])
    env["_nvcc_prefix_maps"] = _nvcc_prefix_maps
    env["_nvcc_source_name"] = _nvcc_source_name
    env["NVCCPREFIXMAPS"] = "${_nvcc_prefix_maps(NVCC_PATH_MAPS)}"
    env["_NVCCCOMPILEMAPS"] = compile_maps("NVCC_PATH_MAPS", nvcc=True, per_target=_host_intermediate)
    env.SetDefault(**launchers.construction_vars("", []))
    # CCWRAPPER in front of nvcc, outside the signature (opencoti_build.cache.launchers)
    env["NVCCCOM"] = launchers.prefixed("$NVCC -c $NVCCFLAGS $_NVCCCOMPILEMAPS $NVCC_REPRODUCIBLE "
                                        "${_nvcc_source_name(SOURCES, NVCC_PATH_MAPS)} "
                                        "$CUDA_GENCODE $_CPPDEFFLAGS $_CPPINCFLAGS -o $TARGET $SOURCES", "nvcc")
    env["BUILDERS"]["CudaObject"] = Builder(
        action=Action("$NVCCCOM", "$NVCCCOMSTR"), suffix=".o", src_suffix=".cu", emitter=_register,
        source_scanner=include_scanner("CudaIncludeScanner", CUDA_SUFFIXES, quote_vars=(), dir_vars=("CPPPATH",)),
        single_source=True,
    )
    env.AddMethod(use_toolchain, "UseToolchain")


def exists(env: Any) -> bool:
    """Whether a toolkit's nvcc is where the build would look (``CUDA_PATH``, the usual places, PATH)."""
    return toolchains.found(cuda.find_nvcc, env)
