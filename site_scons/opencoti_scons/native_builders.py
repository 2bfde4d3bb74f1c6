"""The native lane's generated files, objects, CUDA library and thin archives (the SCons side of site_tools/native_gcc.py,
over opencoti_build.native.native_lane's rules)."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import SCons.Builder
from SCons.Script import Action

from opencoti_build import errors
from opencoti_build.config import templates
from opencoti_build.gpu import cuda_sources
from opencoti_build.gpu.toolchains import cuda as cuda_toolchain
from opencoti_build.incremental import build_lock
from opencoti_build.native import native_lane
from opencoti_build.tree import package_flags, sources, upstream, webui
from opencoti_scons.compiledb import object_emitter
from opencoti_scons.include_scanner import include_scanner
from opencoti_scons.progress import BuildRun


def _tree_path(env: Any, rel: str) -> str:
    return upstream.tree_path(rel, env["NATIVE_LLAMACPP"])


def out_dir(env: Any, name: str) -> str:
    return os.path.join(env["NATIVE_OUT"], name)


def _webui_header(target: list[Any], source: list[Any], env: Any) -> None:
    webui.write_header(str(source[0]), str(target[0]))


def native_generated(env: Any, run: BuildRun) -> dict[str, list[Any]]:
    gendir = out_dir(env, "gen")
    compiler = "gcc " + subprocess.run(["gcc", "-dumpfullversion"], capture_output=True, text=True,
                                       env=env["ENV"]).stdout.strip()
    values = templates.template_values(env["NATIVE_STAMPS"], compiler, f"{env['NATIVE_MACHINE']}-linux-gnu")
    generated = env.ConfigureTemplates(gendir, lambda rel: _tree_path(env, rel), values)
    # The server's web UI as in the fat lane (opencoti_build.tree.webui): headers into gendir (on -I).
    if env["NATIVE_WEBUI"]:
        for asset in webui.ASSETS:
            env.Command(os.path.join(gendir, asset + ".hpp"), _tree_path(env, os.path.join(webui.PUBLIC, asset)),
                        Action(_webui_header, "WEBUI $TARGET"))
    run.note("web UI (native)", None if env["NATIVE_WEBUI"] else webui.off_note(_tree_path(env, webui.PUBLIC)))
    return generated


def native_objects(env: Any, package: sources.Package, rels: list[str], generated: list[Any],
                   shared: bool = False, cuda_reg: bool = False) -> list[Any]:
    flags = package_flags.package_flags(package, env["NATIVE_DEFAULTS"])
    penv = env.Clone(
        CCFLAGS=list(flags.ccflags), CPPFLAGS=list(flags.cppflags) + ["$_IQUOTEFLAGS", "$_ISYSTEMFLAGS"],
        IQUOTEPATH=[_tree_path(env, d) for d in flags.iquote], ISYSTEMPATH=[_tree_path(env, d) for d in flags.isystem],
        CPPDEFINES=list(native_lane.NATIVE_DEFINES) + list(flags.defines),
    )
    build = penv.NativeSharedObject if shared else penv.NativeObject
    suffix = ".os" if shared else ".o"
    objdir = out_dir(env, "obj")
    objects = []
    for rel in rels:
        file = package_flags.file_compile(package, rel, env["NATIVE_STAMPS"], env["NATIVE_WEBUI"])
        defines = list(penv["CPPDEFINES"]) + list(file.defines)
        if cuda_reg and rel == native_lane.BACKEND_REG_SOURCE:
            defines.append("GGML_USE_CUDA")
        objects += build(os.path.join(objdir, rel + suffix), _tree_path(env, rel),
                         CCFLAGS=list(penv["CCFLAGS"]) + list(file.flags), CPPDEFINES=defines)
    for node in generated:
        objects += build(os.path.join(objdir, "gen", node.name + suffix), node)
    return objects


def native_cuda_library(env: Any, base_lib: list[Any]) -> list[Any] | None:
    if env["CPU_ONLY"]:
        return None
    llamacpp = env["NATIVE_LLAMACPP"]
    cenv = env.Clone(NVCC_PATH_MAPS=env["NATIVE_PATH_MAPS"])
    cenv.Tool("nvcc")
    try:
        toolkit = cuda_toolchain.probe(cenv)  # ToolchainBroken: a bad CUDA_PATH/CUDA_ARCHS, a broken nvcc
    except errors.Absent as exc:
        print(f"WARN: native: CUDA half skipped: {exc}", file=sys.stderr)
        return None
    cenv.UseToolchain(toolkit)
    major = toolkit.version[0]
    linked = cuda_toolchain.link_libraries(toolkit, cublas=True)  # the driver stub and cuBLAS, as backends/cuda
    cublas = linked.cublas
    if cublas is None:
        print(f"WARN: native: CUDA half skipped: no cuBLAS {major}.x in {toolkit.root} or the nvidia-cublas wheel; "
              f"`pip install 'nvidia-cublas=={major}.{toolkit.version[1]}.*'`", file=sys.stderr)
        return None
    units = cuda_sources.cuda_sources(llamacpp, env["FA_ALL_QUANTS"], llama=llamacpp)
    defines = ["NDEBUG", "GGML_BUILD", "GGML_SHARED", "GGML_USE_CUBLAS", "GGML_SCHED_MAX_COPIES=4"]
    defines += cuda_sources.cuda_defines(llamacpp, env["FA_ALL_QUANTS"], llama=llamacpp)
    if not linked.stub_dirs:  # no driver library to link: ggml-cuda's pool without the driver's VMM API
        print(f"WARN: native: {toolkit.root} has no lib64/stubs/libcuda.so; libggml-cuda.so built with GGML_CUDA_NO_VMM",
              file=sys.stderr)
    defines += linked.defines
    cenv.Replace(
        STATIC_AND_SHARED_OBJECTS_ARE_THE_SAME=True,  # nvcc -fPIC objects, not marked shared by SCons
        NVCCFLAGS=["-O2", "-std=c++17", "--use_fast_math", "--extended-lambda", "-Xcompiler=-fPIC"],
        CPPDEFINES=defines,
        CPPPATH=[os.path.join(llamacpp, d) for d in ("ggml/include", "ggml/src", "ggml/src/ggml-cuda")]
        + [cublas.include_dir],
    )
    objdir, libdir = out_dir(env, "obj"), out_dir(env, "lib")
    objects = [cenv.CudaObject(os.path.join(objdir, rel + ".o"), _tree_path(env, rel))[0] for rel in units]
    lib_dirs = [libdir, cublas.lib_dir, *toolkit.lib_dirs, *linked.stub_dirs]
    rpath = ["$$$$ORIGIN", cublas.lib_dir, *toolkit.lib_dirs]
    libs = ["ggml-base", f":{cublas.library}", "cudart"] + (["cuda"] if linked.stub_dirs else [])
    # --no-as-needed: cuBLAS is a declared dependency even when only some kernels are built
    lib = cenv.SharedLibrary(os.path.join(libdir, "libggml-cuda.so"), objects, LIBPATH=lib_dirs, LIBS=libs, RPATH=rpath,
                             SHLINKFLAGS=list(env["SHLINKFLAGS"]) + ["-Wl,--no-as-needed"])
    cenv.Depends(lib, base_lib)
    print(f"native: libggml-cuda.so for {', '.join(cenv['CUDA_ARCH_LIST'])} ({len(units)} .cu, cuBLAS {cublas.lib_dir})")
    return lib


def thin_archive(target: list[Any], source: list[Any], env: Any) -> int:
    """``ar $ARFLAGS`` run in the archive's directory, the members named from there: a thin archive (an index
    and the members' paths, not copies of them) that names no checkout. An edit then does not rewrite 300 MB
    of -g objects into libllama.a before the link; whoever links one depends on its members too, since a
    member's new bytes can leave the thin archive's bytes as they were."""
    directory = target[0].dir.abspath
    argv = [env.subst("$AR"), *env.subst("$ARFLAGS").split(), target[0].name]
    argv += [os.path.relpath(member.abspath, directory) for member in source]
    return subprocess.run(argv, cwd=directory, env=env["ENV"], pass_fds=build_lock.held_fds()).returncode


def object_builder(c_com: str, cxx_com: str, suffix: str, emitter: Any) -> SCons.Builder.Builder:
    actions = {".c": Action(f"${c_com}", f"${c_com}STR")}
    actions.update((s, Action(f"${cxx_com}", f"${cxx_com}STR")) for s in sources.CXX_SUFFIXES)
    register = object_emitter({".c": c_com, **{s: cxx_com for s in sources.CXX_SUFFIXES}})
    return SCons.Builder.Builder(action=actions, emitter=SCons.Builder.ListEmitter([emitter, register]), suffix=suffix,
                                 source_scanner=include_scanner("NativeIncludeScanner"), single_source=True)
