"""SCons tool: the native-ELF lane's compiles and links with this machine's gcc/g++ (native/SConscript).

Load it, with ``run=`` (the run's ``opencoti_scons.progress.BuildRun``), on a clone of the base env that sets
NATIVE_LLAMACPP (the checkout, opencoti_build.tree.upstream.checkout_dir) and NATIVE_OUT (the lane's output
directory); the rules over the source description are opencoti_build.native.native_lane's, the per-package flags
opencoti_build.tree.package_flags'. Reading the lane writes nothing (``scons -n`` included): the checkout is read
where it is.

Builders: ``NativeObject`` (``.o``) and ``NativeSharedObject`` (``.os``), one C or C++ compile each,
sources scanned by the shared include scanner (opencoti_scons/include_scanner.py: -iquote, -I, -isystem as
gcc searches them), each registered in the compile database (opencoti_scons/compiledb.py); ``NativeArchive``,
a thin archive of objects (whatever links it must also depend on the objects).

Methods:

``env.NativeGenerated() -> dict[str, list[Node]]``
    The template-configured files and the web UI headers in ``$NATIVE_OUT/gen``; package name -> the
    generated sources it compiles.
``env.NativeObjects(package, rels, generated, shared=False, cuda_reg=False) -> list[Node]``
    The package's objects under ``$NATIVE_OUT/obj``: ``rels`` (description paths) and ``generated``
    sources, with the package's flags over the lane's defaults and each file's own; ``cuda_reg``:
    ggml-backend-reg.cpp registers CUDA.
``env.NativeCudaLibrary(base_lib) -> Node | None``
    ``lib/libggml-cuda.so`` over ``base_lib``, or None after one WARN line when CPU_ONLY is set or nvcc
    or cuBLAS is absent. Raises UserError (ToolchainBroken) for a broken toolkit (a bad CUDA_PATH or CUDA_ARCHS).

Loading the tool raises webui.WebUiError for a checkout with part of the web UI's assets, native_lane.LinkerError
for a NATIVE_LINKER this machine lacks.

Construction variables read: NATIVE_LLAMACPP, NATIVE_OUT, SRC, BUILD_DIR (the prefix maps), VERBOSE,
CPU_ONLY, FA_ALL_QUANTS, NATIVE_LINKER (opencoti_build.native.native_lane.linker_flags), ENV, CCWRAPPER_ARGV (the launcher, SConstruct; default none),
CCWRAPPER_MAPS_VIA_PREPROCESSOR. Sets: CC, CXX, LINK, SHLINK, CCFLAGS, CXXFLAGS, CPPFLAGS, CPPDEFINES,
CPPPATH, IQUOTEPATH, ISYSTEMPATH, _IQUOTEFLAGS, _ISYSTEMFLAGS, LINKFLAGS, SHLINKFLAGS, ARFLAGS,
CCCOM, CXXCOM, SHCCCOM and SHCXXCOM behind the launcher,
the ``*COMSTR`` lines of steplines.NATIVE, NATIVE_MACHINE, NATIVE_PATH_MAPS, _NATIVECOMPILEMAPS (the compiles'
prefix maps, opencoti_scons/compile_maps.py), NATIVE_DEFAULTS (the lane's
package_flags.LaneDefaults), NATIVE_STAMPS (the version stamps), NATIVE_WEBUI (the UI compiled in).
"""
from __future__ import annotations

import platform
from typing import Any

import SCons.Builder
from SCons.Defaults import SharedObjectEmitter, StaticObjectEmitter
from SCons.Script import Action

from opencoti_build.cache import launchers
from opencoti_build.cosmo import prefix_maps
from opencoti_build.native import native_lane
from opencoti_build.report import steplines
from opencoti_build.tree import sources, webui
from opencoti_scons.compile_maps import compile_maps, env_path_maps
from opencoti_scons.native_builders import (
    native_cuda_library,
    native_generated,
    native_objects,
    object_builder,
    out_dir,
    thin_archive,
)
from opencoti_scons.progress import BuildRun

TOOLS = ("gcc", "g++", "ar")
COMPILE_COMMANDS = ("CCCOM", "CXXCOM", "SHCCCOM", "SHCXXCOM")  # what the lane runs (nvcc only for the CUDA half, probed then)


def generate(env: Any, run: BuildRun) -> None:
    for tool in ("gcc", "g++", "gnulink", "ar", "compiledb", "configure_template"):
        env.Tool(tool)
    machine = platform.machine()
    # -ffile-prefix-map for the checkout, SRC, LLAMACPP and BUILD_DIR: objects and binaries name no path of them
    path_maps = env_path_maps(env, env["NATIVE_LLAMACPP"])
    map_flags = prefix_maps.gcc_flags(path_maps)  # the links'; the compiles' are spelled for CCWRAPPER
    defaults = native_lane.lane_defaults(machine, ["$_NATIVECOMPILEMAPS"])
    llamacpp = env["NATIVE_LLAMACPP"]  # the lane reads llama.cpp/ paths only: the checkout serves as the root
    linker = native_lane.linker_flags(env.get("NATIVE_LINKER", "auto"), lambda program: bool(env.WhereIs(program)))
    env.Replace(
        CC="gcc", CXX="g++", LINK="g++", SHLINK="g++", NATIVE_MACHINE=machine, NATIVE_PATH_MAPS=path_maps,
        _NATIVECOMPILEMAPS=compile_maps("NATIVE_PATH_MAPS"),
        NATIVE_DEFAULTS=defaults, NATIVE_STAMPS=sources.tree_stamps(llamacpp, llama=llamacpp),
        NATIVE_WEBUI=webui.enabled(llamacpp, llama=llamacpp),
        CCFLAGS=list(defaults.ccflags), CXXFLAGS=native_lane.native_flags(sources.DEFAULT_CXXFLAGS),
        CPPFLAGS=list(defaults.cppflags) + ["$_IQUOTEFLAGS", "$_ISYSTEMFLAGS"],
        CPPDEFINES=list(native_lane.NATIVE_DEFINES), CPPPATH=[out_dir(env, "gen")], IQUOTEPATH=[], ISYSTEMPATH=[],
        _IQUOTEFLAGS="${_concat('-iquote ', IQUOTEPATH, '', __env__)}",
        _ISYSTEMFLAGS="${_concat('-isystem ', ISYSTEMPATH, '', __env__)}",
        LINKFLAGS=["-fopenmp"] + linker + map_flags, SHLINKFLAGS=["-shared", "-Wl,-soname,${TARGET.file}"] + linker + map_flags,
        ARFLAGS=["rcsDT"],  # NativeArchive's: thin (T), deterministic (D), indexed by ar itself (s)
    )
    env.Replace(**steplines.short_forms(steplines.NATIVE, env["VERBOSE"]))  # VERBOSE=1: the commands
    env.SetDefault(**launchers.construction_vars("", []))
    for com in COMPILE_COMMANDS:  # CCWRAPPER before gcc/g++, outside the signature (opencoti_build.cache.launchers)
        env[com] = launchers.prefixed(env[com])
    env["BUILDERS"]["NativeObject"] = object_builder("CCCOM", "CXXCOM", ".o", StaticObjectEmitter)
    env["BUILDERS"]["NativeSharedObject"] = object_builder("SHCCCOM", "SHCXXCOM", ".os", SharedObjectEmitter)
    env["BUILDERS"]["NativeArchive"] = SCons.Builder.Builder(
        action=Action(thin_archive, "$ARCOMSTR", varlist=["AR", "ARFLAGS"]), suffix=".a")
    env.AddMethod(lambda env: native_generated(env, run), "NativeGenerated")
    env.AddMethod(native_objects, "NativeObjects")
    env.AddMethod(native_cuda_library, "NativeCudaLibrary")


def exists(env: Any) -> bool:
    return all(env.WhereIs(tool) for tool in TOOLS)
