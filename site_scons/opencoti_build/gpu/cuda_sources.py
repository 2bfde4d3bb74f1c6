"""The ggml-cuda translation units of ggml-cuda.so (and of ggml-rocm.so, which HIP-compiles the same files).

Selection as llamafile's cuda.sh makes it: every ``ggml-cuda/*.cu``, and of ``template-instances/``
the flash-attention tile/MMA, MMQ and MMF instances; the flash-attention vector kernels only for
matching K/V types (f16, q4_0, q8_0, bf16) unless all quantized pairs are asked for, because each
instance costs about 4 s per architecture and mixed-type pairs are rarely used.

ggml tells ``fattn.cu`` which vector instances exist in one of two ways, by version:

- llamafile 0.10's ggml: one switch, ``-DGGML_CUDA_FA_ALL_QUANTS`` (CMake ``GGML_CUDA_FA_ALL_QUANTS=ON``);
- newer ggml (``ggml/cmake/common.cmake``'s ``ggml_cuda_fattn_vec_instances``, CMake ``GGML_CUDA_FA_QUANTS``):
  ``-DGGML_CUDA_FA_<K>_<V>=0|1`` for every K/V type pair and ``-DGGML_CUDA_FA_QUANTS="<list>"``; fattn.cu then
  pastes those names (``GGML_CUDA_FA_##type_K##_##type_V``) and fails to compile without them.
"""
from __future__ import annotations

import fnmatch
import posixpath
import re
from pathlib import Path

from opencoti_build.tree.sources import tree_file, tree_glob

CUDA_DIR = "llama.cpp/ggml/src/ggml-cuda"
INSTANCES_DIR = f"{CUDA_DIR}/template-instances"
TINYBLAS_SOURCE = "llamafile/tinyblas.cu"

INSTANCE_PATTERNS: tuple[str, ...] = ("fattn-tile*.cu", "fattn-mma*.cu", "mmq*.cu", "mmf*.cu")
FATTN_VEC_PATTERN = "fattn-vec*.cu"
FATTN_VEC_SAME_TYPE: tuple[str, ...] = ("f16-f16", "q4_0-q4_0", "q8_0-q8_0", "bf16-bf16")
ALL_QUANTS_DEFINE = "GGML_CUDA_FA_ALL_QUANTS"
# Newer ggml's fattn.cu builds the per-pair define names by token pasting: its mark of the per-pair scheme.
PER_PAIR_MARK = "GGML_CUDA_FA_##"
PER_PAIR_INSTANCE = re.compile(r"fattn-vec-instance-([a-z0-9_]+)-([a-z0-9_]+)\.cu")


def _instance_selected(name: str, fa_all_quants: bool) -> bool:
    if any(fnmatch.fnmatchcase(name, p) for p in INSTANCE_PATTERNS):
        return True
    if fnmatch.fnmatchcase(name, FATTN_VEC_PATTERN):
        return fa_all_quants or any(name.endswith(f"-{pair}.cu") for pair in FATTN_VEC_SAME_TYPE)
    return False


def cuda_sources(root: str | Path, fa_all_quants: bool = False, llama: str | Path | None = None) -> list[str]:
    """Tree-relative ``.cu`` files under ``root`` to compile, sorted (TinyBLAS not included).

    ``llama``: where ``llama.cpp/`` lies when it is not ``root/llama.cpp`` (sources.tree_file)."""
    top = tree_glob(root, f"{CUDA_DIR}/*.cu", llama)
    instances = [p for p in tree_glob(root, f"{INSTANCES_DIR}/*.cu", llama)
                 if _instance_selected(posixpath.basename(p), fa_all_quants)]
    return top + instances


def _per_pair_scheme(root: str | Path, llama: str | Path | None) -> bool:
    fattn = tree_file(root, f"{CUDA_DIR}/fattn.cu", llama)
    return fattn.is_file() and PER_PAIR_MARK in fattn.read_text(errors="replace")


def cuda_defines(root: str | Path, fa_all_quants: bool, llama: str | Path | None = None) -> list:
    """Defines that tell ggml-cuda which flash-attention vector instances exist, in the tree's own scheme
    (``llama`` as in cuda_sources)."""
    if not _per_pair_scheme(root, llama):
        return [ALL_QUANTS_DEFINE] if fa_all_quants else []
    names = [posixpath.basename(p) for p in tree_glob(root, f"{INSTANCES_DIR}/fattn-vec-instance-*.cu", llama)]
    pairs = {m.groups(): _instance_selected(name, fa_all_quants)
             for name in names if (m := PER_PAIR_INSTANCE.fullmatch(name))}
    selected = "all" if fa_all_quants else ",".join(FATTN_VEC_SAME_TYPE)
    return [("GGML_CUDA_FA_QUANTS", f'"{selected}"')] + [
        (f"GGML_CUDA_FA_{k.upper()}_{v.upper()}", int(on)) for (k, v), on in sorted(pairs.items())]
