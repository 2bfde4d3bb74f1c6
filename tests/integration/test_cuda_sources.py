"""Which ggml-cuda files are compiled and which flash-attention defines go with them, in both ggml schemes."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from opencoti_build import errors
from opencoti_build.gpu.cuda_sources import cuda_defines
from opencoti_build.gpu.toolchains import cuda

from native_support import sdist_llamacpp


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
