"""Where cuBLAS is: in the CUDA toolkit, or in NVIDIA's ``nvidia-cublas`` wheel (nvcc-only toolkits lack it).

Asked through ``opencoti_build.gpu.toolchains.cuda.link_libraries`` by ``scons cuda CUBLAS=1`` and by the native
lane's libggml-cuda.so.
"""
from __future__ import annotations

import glob
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Cublas:
    include_dir: str
    lib_dir: str
    library: str  # file name to link as -l:NAME (wheels ship only libcublas.so.<major>)


def _cublas_in(root: str, major: int) -> Cublas | None:
    includes = [d for d in (os.path.join(root, "include"), *glob.glob(os.path.join(root, "targets", "*", "include")))
                if os.path.isfile(os.path.join(d, "cublas_v2.h"))]
    for lib_dir in (os.path.join(root, d) for d in ("lib64", "lib", *glob.glob("targets/*/lib", root_dir=root))):
        for name in ("libcublas.so", f"libcublas.so.{major}"):
            if includes and os.path.exists(os.path.join(lib_dir, name)):
                return Cublas(includes[0], os.path.realpath(lib_dir), name)
    return None


def wheel_roots(major: int) -> list[str]:
    """Where NVIDIA's wheels put cuBLAS: ``nvidia/cu<major>/`` (CUDA 13) or ``nvidia/cublas/`` (CUDA 12)."""
    spec = importlib.util.find_spec("nvidia")
    bases = list(spec.submodule_search_locations or []) if spec else []
    return [os.path.join(base, sub) for base in bases for sub in (f"cu{major}", "cublas")]


def find_cublas(toolkit_root: str, major: int, extra_roots: Sequence[str] = ()) -> Cublas | None:
    """cuBLAS headers and library for a CUDA ``major`` toolkit: the toolkit's own first, then ``extra_roots``."""
    for root in (toolkit_root, *extra_roots):
        found = _cublas_in(root, major)
        if found is not None:
            return found
    return None


def find_any(toolkit_root: str, major: int) -> Cublas | None:
    """:func:`find_cublas` over the toolkit and the installed wheels."""
    return find_cublas(toolkit_root, major, wheel_roots(major))
