"""Which ggml-cuda files are compiled and which flash-attention defines go with them, in both ggml schemes."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from native_support import sdist_llamacpp
from opencoti_build import errors
from opencoti_build.cuda_sources import CUDA_DIR, INSTANCES_DIR, cuda_defines, cuda_sources
from opencoti_build.toolchains import cuda

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


@pytest.mark.parametrize("all_quants", [True, False])
def test_the_real_fattn_cu_sees_every_pair_it_asks_for(tmp_path: Path, all_quants: bool) -> None:
    """The sdist's fattn.cu, preprocessed by nvcc with these defines, names no undefined GGML_CUDA_FA_ macro."""
    real = sdist_llamacpp(download=False)
    try:
        toolkit = cuda.probe({"ENV": dict(os.environ)})  # the toolkit search `scons cuda` does without CUDA_PATH
    except errors.Absent:
        toolkit = None
    if real is None or toolkit is None:
        pytest.skip("needs nvcc and the cached llama-cpp-python sdist")
    nvcc = toolkit.nvcc
    found = cuda.link_libraries(toolkit, cublas=True).cublas
    if found is None:
        pytest.skip("no cuBLAS headers for this nvcc (ggml-cuda includes cublas_v2.h)")
    view = tmp_path / "view"
    view.mkdir()
    (view / "llama.cpp").symlink_to(real)
    flags = []
    for define in cuda_defines(view, all_quants):
        flags.append("-D" + (f"{define[0]}={define[1]}" if isinstance(define, tuple) else define))
    includes = [f"-I{real / d}" for d in ("ggml/include", "ggml/src", "ggml/src/ggml-cuda")] + [f"-I{found.include_dir}"]
    proc = subprocess.run([nvcc, "-E", "-std=c++17", "--extended-lambda", *includes, *flags,
                           str(real / "ggml/src/ggml-cuda/fattn.cu"), "-o", str(tmp_path / "fattn.ii")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (tmp_path / "fattn.ii").read_text(errors="replace")
    assert "fattn_vec_case" in text  # the dispatch the defines feed is there
    code = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)  # a log message names GGML_CUDA_FA_QUANTS in a string
    assert re.findall(r"\bGGML_CUDA_FA_[A-Z0-9_]+\b", code) == []
