"""The CUDA toolkit: nvcc found and asked its version, the architectures it builds, and what a CUDA DSO links.

Toolkit search: ``CUDA_PATH`` when set (the variable defaults to env OPENCOTI_CUDA_PATH) and only it;
else /usr/local/cuda-12.6 (the seed's default), /usr/local/cuda, the other /usr/local/cuda-* newest
first, then ``nvcc`` on PATH. ``nvcc --version`` runs once per (nvcc path, mtime) in a build.

:func:`link_libraries` is the one answer both lanes (backends/cuda, native/) take for the driver stub and
cuBLAS, so they cannot disagree on ``GGML_CUDA_NO_VMM``.
"""
from __future__ import annotations

import functools
import glob
import os
import platform
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from opencoti_build.errors import Absent
from opencoti_build.gpu import cublas as cublas_lookup
from opencoti_build.gpu import cuda_archs
from opencoti_build.gpu.toolchains import Environ, Location, ToolchainBroken, frozen, locate, run, setting

DEFAULT_CUDA_PATH = "/usr/local/cuda-12.6"
LOCATE_HINT = (f"point it at a CUDA 12.x/13.x toolkit, or leave it empty to search {DEFAULT_CUDA_PATH} "
               f"and the usual places")
# nvcc names its intermediates tmpxft_<pid>_..., and the host object keeps that name (STT_FILE): with
# --objdir-as-tempdir they are <object>.cudafe1.cpp & co. beside the object, the same on every run
# (nvcc 12.4's manual documents the option; older toolkits keep the per-run names). Its short spelling:
# sccache 0.16 knows only that one; with the long one its distributed nvcc leaves no .cubin for fatbinary.
OBJTEMP_FLAG = "-objtemp"
OBJTEMP_SINCE: cuda_archs.Version = (12, 4)
# sccache runs nvcc's steps itself and names the host step's input x_0.cudafe1.cpp where -objtemp names it
# <object>.cudafe1.cpp; the host compiler writes that name into the object (its STT_FILE symbol). A prefix map
# gives ours sccache's name, so an object is the same bytes whether nvcc or sccache (local or distributed)
# ran the steps.
HOST_INTERMEDIATE_SUFFIX = ".cudafe1.cpp"
SCCACHE_HOST_INTERMEDIATE = "x_0.cudafe1.cpp"
# Where toolkits keep the driver stub libcuda.so (a toolkit without one cannot link -lcuda).
STUB_SUBDIRS = ("lib64/stubs", "lib/stubs", "targets/x86_64-linux/lib/stubs", "targets/sbsa-linux/lib/stubs")
NO_VMM_DEFINE = "GGML_CUDA_NO_VMM"  # ggml-cuda's memory pool without the driver's virtual-memory API


def host_intermediate_map(obj: str) -> tuple[str, str]:
    """The prefix map that names the host intermediate of nvcc -objtemp's compile to ``obj`` as sccache does."""
    return obj + HOST_INTERMEDIATE_SUFFIX, SCCACHE_HOST_INTERMEDIATE




@dataclass(frozen=True)
class CudaToolkit:
    """A usable toolkit, and what the build's settings ask of it."""

    nvcc: str
    root: str  # the toolkit directory (bin/nvcc's parent's parent)
    version: cuda_archs.Version
    arch_names: tuple[str, ...]  # the architectures to build, named like sm_120f
    gencode: tuple[str, ...]  # nvcc's -gencode (and compression) flags for them
    record: str  # what the manifest's ``toolchains`` says made a DSO: "CUDA 13.0"

    @property
    def lib_dirs(self) -> list[str]:
        return [d for d in (os.path.join(self.root, "lib64"), os.path.join(self.root, "lib")) if os.path.isdir(d)]

    @property
    def reproducible_flags(self) -> list[str]:
        """nvcc flags that keep its intermediates' names, and so the objects, the same on every run."""
        return [OBJTEMP_FLAG] if self.version >= OBJTEMP_SINCE else []

    @property
    def description(self) -> str:
        return f"nvcc {self.version[0]}.{self.version[1]} at {self.nvcc}"

    @property
    def driver(self) -> str:
        return self.nvcc


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", os.path.basename(path)))


def candidate_roots() -> list[str]:
    """Toolkit directories to try, in order, when CUDA_PATH is empty."""
    others = sorted(glob.glob("/usr/local/cuda-*"), key=_version_key, reverse=True)
    return list(dict.fromkeys([DEFAULT_CUDA_PATH, "/usr/local/cuda", *others]))


@functools.cache
def _version(nvcc: str, real: str, mtime_ns: int, environ: Environ) -> cuda_archs.Version | str:
    """``nvcc --version`` of the nvcc at ``real`` as it is at ``mtime_ns``, or why it failed (a str)."""
    try:
        proc = run([nvcc, "--version"], environ)
        if proc.returncode != 0:
            raise OSError(f"exit status {proc.returncode}")
        return cuda_archs.parse_nvcc_version(proc.stdout)
    except (OSError, subprocess.TimeoutExpired, cuda_archs.CudaArchError) as exc:
        return f"`{nvcc} --version` failed ({exc}); the toolkit is broken: reinstall it or point CUDA_PATH elsewhere"


def nvcc_version(nvcc: str, environ: Mapping[str, str]) -> cuda_archs.Version:
    """``nvcc --version``, run once per (path, mtime) in a build; a failing nvcc raises ToolchainBroken."""
    found = _version(nvcc, os.path.realpath(nvcc), os.stat(nvcc).st_mtime_ns, frozen(environ))
    if isinstance(found, str):
        raise ToolchainBroken(found)
    return found


def find_nvcc(settings: Mapping[str, Any]) -> Location:
    return locate(settings, "CUDA_PATH", "nvcc", candidate_roots(), LOCATE_HINT)


def probe(settings: Mapping[str, Any]) -> CudaToolkit:
    """The toolkit for ``CUDA_PATH`` and the architectures for ``CUDA_ARCHS`` (a bad one raises CudaArchError)."""
    where = find_nvcc(settings)
    if where.program is None:
        raise Absent(f"no nvcc in {where.searched}; set CUDA_PATH to a CUDA 12.x/13.x toolkit")
    version = nvcc_version(where.program, settings["ENV"])
    machine = cuda_archs.target_machine(platform.machine())
    override = setting(settings, "CUDA_ARCHS")
    return CudaToolkit(
        nvcc=where.program, root=os.path.dirname(os.path.dirname(os.path.realpath(where.program))), version=version,
        arch_names=tuple(a.sm for a in cuda_archs.selected_archs(version, machine, override)),
        gencode=tuple(cuda_archs.gencode_flags(version, machine, override)),
        record=f"CUDA {version[0]}.{version[1]}",
    )


@dataclass(frozen=True)
class CudaLibraries:
    """What a CUDA DSO links besides the CUDA runtime."""

    stub_dirs: tuple[str, ...]  # directories holding the driver stub libcuda.so; empty: -lcuda cannot link
    cublas: cublas_lookup.Cublas | None  # None: not asked for, or asked for and not found

    @property
    def defines(self) -> list[str]:
        """Without a driver to link, ggml-cuda is compiled without the driver's virtual-memory API."""
        return [] if self.stub_dirs else [NO_VMM_DEFINE]


def link_libraries(toolkit: CudaToolkit, *, cublas: bool) -> CudaLibraries:
    """The toolkit's driver stub directories, and cuBLAS (the toolkit's, else NVIDIA's wheel's) when ``cublas``."""
    stubs = tuple(d for d in (os.path.join(toolkit.root, s) for s in STUB_SUBDIRS)
                  if os.path.exists(os.path.join(d, "libcuda.so")))
    found = cublas_lookup.find_any(toolkit.root, toolkit.version[0]) if cublas else None
    return CudaLibraries(stub_dirs=stubs, cublas=found)
