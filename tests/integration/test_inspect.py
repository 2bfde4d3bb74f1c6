"""`opencoti-build inspect`: formats, link facts, CUDA archs and symbol families of real files."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from opencoti_build.artifacts import binary_report, manifest
from opencoti_build.formats import gguf_model

from packaging_support import write_gguf
from scons_runs import PROJECT

BACKEND = r"""
#include <cuda_runtime.h>
template <int D> __global__ void kernel(float *x) { x[threadIdx.x] *= D; }
template <int D> void dca_fused_case(float *x) { kernel<D><<<1, 32>>>(x); }
template void dca_fused_case<64>(float *);
template void dca_fused_case<128>(float *);
void ggml_turbo_wht(float *x) { dca_fused_case<64>(x); }
extern "C" void *ggml_backend_mini_init(void) { return nullptr; }
extern "C" void *ggml_backend_mini_reg(void) { return nullptr; }
"""


@pytest.fixture(scope="module")
def cuda_dso(tmp_path_factory: pytest.TempPathFactory, nvcc13: Path) -> Path:
    tmp = tmp_path_factory.mktemp("inspect")
    (tmp / "mini.cu").write_text(BACKEND)
    subprocess.run([nvcc13, "--shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_75,code=sm_75",
                    "-gencode", "arch=compute_121a,code=sm_121a", "-o", str(tmp / "ggml-mini.so"), str(tmp / "mini.cu")],
                   check=True)
    return tmp / "ggml-mini.so"


def families(text: str) -> list[binary_report.Family]:
    return binary_report.parse_families(text, "test")


def test_dso_report(cuda_dso: Path) -> None:
    fams = families("dca symbols dca_fused_case\nturbo symbols TURBO\nkv strings q6_0|turbo3\n")
    lines = binary_report.report(str(cuda_dso), fams)
    assert lines[1] == "format: ELF64 X86_64 DYN"
    assert "unresolved imports: none" in lines
    assert "entry points: ggml_backend_mini_init, ggml_backend_mini_reg" in lines
    assert "cuda archs: sm_121a, sm_75 (4 cubin, 0 ptx entries; compressed: no)" in lines
    assert lines[-3:] == ["  dca              symbols  2", "  turbo            symbols  1", "  kv               strings  0"]
    assert manifest.dso_architectures(cuda_dso) == ["sm_121a", "sm_75"]


def test_cli_dispatch(cuda_dso: Path, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "opencoti_build", "inspect", str(cuda_dso), str(tmp_path / "absent")],
                          capture_output=True, text=True, cwd=PROJECT / "site_scons")
    assert proc.returncode == 1
    assert "entry points: ggml_backend_mini_init, ggml_backend_mini_reg" in proc.stdout
    assert proc.stderr == f"opencoti-build inspect: {tmp_path / 'absent'}: No such file or directory\n"


def test_inspect_refuses_what_is_no_binary_and_reads_a_model(tmp_path: Path) -> None:
    text = tmp_path / "passwd"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    model = write_gguf(tmp_path / "tiny.gguf")
    proc = subprocess.run([sys.executable, "-m", "opencoti_build", "inspect", str(text), str(model)],
                          capture_output=True, text=True, cwd=PROJECT / "site_scons")
    assert proc.returncode == 1
    assert proc.stderr == (f"opencoti-build inspect: {text}: not an ELF, APE or GGUF file; inspect reads DSOs, host "
                           "binaries, llamafile artifacts and models\n")
    info = gguf_model.check_gguf(model)
    assert proc.stdout.splitlines() == [f"file: {model}", f"format: GGUF v3 model, {info.tensors} tensors, "
                                        f"{info.metadata} metadata keys, tensor data at byte {info.data_offset} of "
                                        f"{model.stat().st_size}"]
