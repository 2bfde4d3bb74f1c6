"""The ggml-cuda translation units of ggml-cuda.so (and of ggml-rocm.so, which HIP-compiles the same files).

Selection as llamafile's cuda.sh makes it: every ``ggml-cuda/*.cu``, and of ``template-instances/``
the flash-attention tile/MMA, MMQ and MMF instances; the flash-attention vector kernels only for
matching K/V types (f16, q4_0, q8_0, bf16) unless all quantized pairs are asked for, because each
instance costs about 4 s per architecture and mixed-type pairs are rarely used.
"""
from __future__ import annotations

import fnmatch
from pathlib import Path

CUDA_DIR = "llama.cpp/ggml/src/ggml-cuda"
INSTANCES_DIR = f"{CUDA_DIR}/template-instances"
TINYBLAS_SOURCE = "llamafile/tinyblas.cu"

INSTANCE_PATTERNS: tuple[str, ...] = ("fattn-tile*.cu", "fattn-mma*.cu", "mmq*.cu", "mmf*.cu")
FATTN_VEC_PATTERN = "fattn-vec*.cu"
FATTN_VEC_SAME_TYPE: tuple[str, ...] = ("f16-f16", "q4_0-q4_0", "q8_0-q8_0", "bf16-bf16")
ALL_QUANTS_DEFINE = "GGML_CUDA_FA_ALL_QUANTS"


def _instance_selected(name: str, fa_all_quants: bool) -> bool:
    if any(fnmatch.fnmatchcase(name, p) for p in INSTANCE_PATTERNS):
        return True
    if fnmatch.fnmatchcase(name, FATTN_VEC_PATTERN):
        return fa_all_quants or any(name.endswith(f"-{pair}.cu") for pair in FATTN_VEC_SAME_TYPE)
    return False


def cuda_sources(root: str | Path, fa_all_quants: bool = False) -> list[str]:
    """Tree-relative ``.cu`` files under ``root`` to compile, sorted (TinyBLAS not included)."""
    root = Path(root)
    top = sorted(p.relative_to(root).as_posix() for p in (root / CUDA_DIR).glob("*.cu"))
    instances = sorted(
        p.relative_to(root).as_posix() for p in (root / INSTANCES_DIR).glob("*.cu")
        if _instance_selected(p.name, fa_all_quants)
    )
    return top + instances


def cuda_defines(fa_all_quants: bool) -> list[str]:
    """Defines that tell ggml-cuda which flash-attention vector instances exist."""
    return [ALL_QUANTS_DEFINE] if fa_all_quants else []
