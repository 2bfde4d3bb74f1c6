"""SCons tool ``nvcc``: compile ``.cu`` translation units with NVIDIA's nvcc.

Nothing runs when the tool is loaded. ``env.ProbeCuda()`` locates and interrogates the toolkit and is
called only by backends/cuda/SConscript, which backends/SConscript reads only when the command line
asks for a GPU target (``cuda``, ``backends``, ``package``, …): a null host build never runs nvcc.
The ``nvcc --version`` result is memoized per (nvcc path, mtime), so a build probes once however
many environments ask. Probes are read-only.

Toolkit search: ``$CUDA_PATH`` when set (the variable defaults to env OPENCOTI_CUDA_PATH) and only it,
since a toolkit named explicitly must not be swapped for another; else /usr/local/cuda-12.6 (the
seed's default), /usr/local/cuda, the other /usr/local/cuda-* newest first, then ``nvcc`` on PATH.

``env.CudaObject(target, source)`` compiles one ``.cu`` with ``$NVCCCOM``: ``$NVCC -c $NVCCFLAGS
$CUDA_GENCODE`` + CPPDEFINES/CPPPATH. ``#include`` dependencies of ``.cu``/``.cuh`` are found by
SCons' C scanner through CPPPATH; each object is registered with ``env.CompileDbEntry`` when the
compiledb tool is loaded.
"""
from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import SCons.Scanner.C
import SCons.Subst
import SCons.Tool
from SCons.Builder import Builder
from SCons.Script import Action

from opencoti_build import compdb, cuda_archs
from opencoti_build import prefix_maps
from opencoti_build.errors import UserError

DEFAULT_CUDA_PATH = "/usr/local/cuda-12.6"
PROBE_TIMEOUT_S = 60
CUDA_SUFFIXES = (".cu", ".cuh")
# nvcc names its intermediates tmpxft_<pid>_..., and the host object keeps that name (STT_FILE): with
# --objdir-as-tempdir they are <object>.cudafe1.cpp & co. beside the object, the same on every run
# (nvcc 12.4's manual documents the option; older toolkits keep the per-run names).
OBJTEMP_FLAG = "--objdir-as-tempdir"
OBJTEMP_SINCE: cuda_archs.Version = (12, 4)

_VERSIONS: dict[tuple[str, int], cuda_archs.Version | str] = {}


class CudaToolkitError(UserError):
    """The named toolkit is unusable (one-line message naming it and the fix)."""


@dataclass(frozen=True)
class CudaToolkit:
    nvcc: str
    root: str  # the toolkit directory (bin/nvcc's parent's parent)
    version: cuda_archs.Version

    @property
    def lib_dirs(self) -> list[str]:
        return [d for d in (os.path.join(self.root, "lib64"), os.path.join(self.root, "lib")) if os.path.isdir(d)]

    @property
    def description(self) -> str:
        return f"nvcc {self.version[0]}.{self.version[1]} at {self.nvcc}"


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", os.path.basename(path)))


def candidate_roots() -> list[str]:
    """Toolkit directories to try, in order, when CUDA_PATH is empty."""
    others = sorted(glob.glob("/usr/local/cuda-*"), key=_version_key, reverse=True)
    ordered = [DEFAULT_CUDA_PATH, "/usr/local/cuda", *others]
    return list(dict.fromkeys(ordered))


def locate_nvcc(cuda_path: str) -> tuple[str | None, str]:
    """(nvcc path or None, what was searched). An explicit ``cuda_path`` that lacks nvcc raises."""
    if cuda_path:
        nvcc = os.path.join(cuda_path, "bin", "nvcc")
        if not os.access(nvcc, os.X_OK):
            raise CudaToolkitError(f"CUDA_PATH={cuda_path} has no executable bin/nvcc; point it at a CUDA 12.x/13.x "
                                   f"toolkit, or leave it empty to search {DEFAULT_CUDA_PATH} and the usual places")
        return nvcc, f"CUDA_PATH={cuda_path}"
    for root in candidate_roots():
        nvcc = os.path.join(root, "bin", "nvcc")
        if os.access(nvcc, os.X_OK):
            return nvcc, root
    on_path = shutil.which("nvcc")
    searched = f"{', '.join(candidate_roots())} and PATH"
    return on_path, (on_path or searched)


def nvcc_version(nvcc: str, env_vars: dict[str, str]) -> cuda_archs.Version:
    """``nvcc --version``, run once per (path, mtime) in a build."""
    key = (os.path.realpath(nvcc), os.stat(nvcc).st_mtime_ns)
    if key not in _VERSIONS:
        try:
            proc = subprocess.run([nvcc, "--version"], capture_output=True, text=True, env=env_vars,
                                  timeout=PROBE_TIMEOUT_S)
            if proc.returncode != 0:
                raise OSError(f"exit status {proc.returncode}")
            _VERSIONS[key] = cuda_archs.parse_nvcc_version(proc.stdout)
        except (OSError, subprocess.TimeoutExpired, cuda_archs.CudaArchError) as exc:
            _VERSIONS[key] = f"`{nvcc} --version` failed ({exc}); the toolkit is broken: reinstall it or point CUDA_PATH elsewhere"
    result = _VERSIONS[key]
    if isinstance(result, str):
        raise CudaToolkitError(result)
    return result


def probe_cuda(env: Any) -> CudaToolkit | str:
    """The toolkit, or the reason there is none (for a WARN). Bad input raises CudaToolkitError/CudaArchError.

    Sets NVCC, CUDA_VERSION, CUDA_ARCH_LIST (names like ``sm_120f``), CUDA_GENCODE and NVCC_REPRODUCIBLE
    in ``env``.
    """
    nvcc, searched = locate_nvcc(env.subst("$CUDA_PATH"))
    if nvcc is None:
        return f"no nvcc in {searched}; set CUDA_PATH to a CUDA 12.x/13.x toolkit"
    version = nvcc_version(nvcc, env["ENV"])
    machine = cuda_archs.target_machine(platform.machine())
    archs = cuda_archs.selected_archs(version, machine, env.subst("$CUDA_ARCHS"))
    toolkit = CudaToolkit(nvcc=nvcc, root=os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), version=version)
    env["NVCC"] = nvcc
    env["CUDA_VERSION"] = version
    env["CUDA_ARCH_LIST"] = [a.sm for a in archs]
    env["CUDA_GENCODE"] = cuda_archs.gencode_flags(version, machine, env.subst("$CUDA_ARCHS"))
    env["NVCC_REPRODUCIBLE"] = [OBJTEMP_FLAG] if version >= OBJTEMP_SINCE else []
    return toolkit


def _nvcc_prefix_maps(maps: list[tuple[str, str]]) -> list[Any]:
    return [SCons.Subst.Literal(flag) for flag in prefix_maps.nvcc_flags(maps)]


def _nvcc_source_name(sources: Any, maps: list[tuple[str, str]]) -> list[Any]:
    """``-Xcudafe --orig_src_path_name=<mapped>``: the name cudafe++ and cicc hash instead of the absolute path."""
    names = [prefix_maps.remap(str(node.abspath), maps) for node in sources]
    if len(names) != 1 or "," in names[0]:  # -Xcudafe splits at commas
        return []
    return ["-Xcudafe", SCons.Subst.Literal(f"--orig_src_path_name={names[0]}")]


def _clang_cuda(env: Any) -> Any:
    """The database entry's arguments: clang's CUDA driver over this toolkit (clangd rejects nvcc's own flags)."""
    root = os.path.dirname(os.path.dirname(os.path.realpath(env.subst("$NVCC"))))
    return lambda argv: compdb.clang_cuda_arguments(argv, root)


def cuda_object(env: Any, target: Any, source: Any) -> list[Any]:
    nodes = env._CudaObject(target, source)
    if hasattr(env, "CompileDbEntry"):
        for node in nodes:
            env.CompileDbEntry(node, node.sources[0], "NVCCCOM", _clang_cuda(env))
    return nodes


def generate(env: Any) -> None:
    scanner = SCons.Scanner.C.CScanner()
    for suffix in CUDA_SUFFIXES:
        SCons.Tool.SourceFileScanner.add_scanner(suffix, scanner)
    # a tool-less base env has _CPPDEFFLAGS/_CPPINCFLAGS but not the prefixes they expand with
    env.SetDefault(NVCC="nvcc", NVCCFLAGS=[], CUDA_GENCODE=[], INCPREFIX="-I", INCSUFFIX="",
                   CPPDEFPREFIX="-D", CPPDEFSUFFIX="")
    # Path-independent objects (opencoti_build.prefix_maps): the host compiler's -ffile-prefix-map (nvcc
    # preprocesses host and device code with it: __FILE__, debug info), cudafe++/cicc told the source's
    # mapped name (they hash its absolute path into anonymous-namespace and static names), and
    # $NVCC_REPRODUCIBLE (probe_cuda): intermediates named after the object, not tmpxft_<pid>.
    env.SetDefault(NVCC_PATH_MAPS=prefix_maps.path_maps(env.Dir("#").abspath, env.get("SRC"), env.get("BUILD_DIR")),
                   NVCC_REPRODUCIBLE=[])
    env["_nvcc_prefix_maps"] = _nvcc_prefix_maps
    env["_nvcc_source_name"] = _nvcc_source_name
    env["NVCCPREFIXMAPS"] = "${_nvcc_prefix_maps(NVCC_PATH_MAPS)}"
    env["NVCCCOM"] = ("$NVCC -c $NVCCFLAGS $NVCCPREFIXMAPS $NVCC_REPRODUCIBLE "
                      "${_nvcc_source_name(SOURCES, NVCC_PATH_MAPS)} "
                      "$CUDA_GENCODE $_CPPDEFFLAGS $_CPPINCFLAGS -o $TARGET $SOURCES")
    env["BUILDERS"]["_CudaObject"] = Builder(
        action=Action("$NVCCCOM", "$NVCCCOMSTR"), suffix=".o", src_suffix=".cu",
        source_scanner=SCons.Tool.SourceFileScanner, single_source=True,
    )
    env.AddMethod(probe_cuda, "ProbeCuda")
    env.AddMethod(cuda_object, "CudaObject")


def exists(env: Any) -> bool:
    try:
        return locate_nvcc(env.subst("$CUDA_PATH"))[0] is not None
    except CudaToolkitError:
        return False
