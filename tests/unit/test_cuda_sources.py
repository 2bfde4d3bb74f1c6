"""Which ggml-cuda files are compiled and which flash-attention defines go with them, in both ggml schemes.

In-process checks of the core here; the real builds and tools: tests/integration/test_cuda_sources.py.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from opencoti_build.gpu.cuda_sources import CUDA_DIR, INSTANCES_DIR, cuda_defines, cuda_sources

OLD_FATTN = "#ifdef GGML_CUDA_FA_ALL_QUANTS\n#endif\n"
NEW_FATTN = "#define CASE(K, V) if constexpr (GGML_CUDA_FA_##K##_##V) {}\n"


def tree(root: Path, fattn: str, instances: list[str]) -> Path:
    (root / INSTANCES_DIR).mkdir(parents=True)
    (root / CUDA_DIR / "fattn.cu").write_text(fattn)
    for name in instances:
        (root / INSTANCES_DIR / name).write_text("")
    return root


PAIRS = [f"fattn-vec-instance-{k}-{v}.cu" for k in ("f16", "q4_0") for v in ("f16", "q4_0")]


def test_old_ggml_gets_the_single_switch(tmp_path: Path) -> None:
    root = tree(tmp_path, OLD_FATTN, PAIRS)
    assert cuda_defines(root, True) == ["GGML_CUDA_FA_ALL_QUANTS"]
    assert cuda_defines(root, False) == []


@pytest.mark.parametrize("all_quants", [True, False])
def test_new_ggml_gets_one_define_per_pair_matching_the_compiled_instances(tmp_path: Path, all_quants: bool) -> None:
    root = tree(tmp_path, NEW_FATTN, PAIRS)
    defines = dict(cuda_defines(root, all_quants))
    compiled = {Path(p).name for p in cuda_sources(root, all_quants)}
    assert defines.pop("GGML_CUDA_FA_QUANTS") == ('"all"' if all_quants else '"f16-f16,q4_0-q4_0,q8_0-q8_0,bf16-bf16"')
    expected = {}
    for name in PAIRS:
        k, v = re.fullmatch(r"fattn-vec-instance-(\w+)-(\w+)\.cu", name).groups()
        expected[f"GGML_CUDA_FA_{k.upper()}_{v.upper()}"] = int(name in compiled)
    assert defines == expected
    assert (defines["GGML_CUDA_FA_Q4_0_F16"], defines["GGML_CUDA_FA_F16_F16"]) == (int(all_quants), 1)
