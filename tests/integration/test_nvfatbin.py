"""`.nv_fatbin` listing of real nvcc 13 outputs, checked against NVIDIA's cuobjdump where it is installed."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from opencoti_build.formats import nvfatbin
from opencoti_build.formats.nvfatbin import FatbinEntry, FatbinError

KERNEL = """
__global__ void axpy(float *y, const float *x, float a) { y[threadIdx.x] += a * x[threadIdx.x]; }
extern "C" void launch(float *y, const float *x) { axpy<<<1, 32>>>(y, x, 2.0f); }
"""


def cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia  # the nvidia-cuda-cuobjdump wheel
    except ImportError:
        return None
    for root in nvidia.__path__:
        candidates = sorted(Path(root).glob("*/bin/cuobjdump"))
        if candidates:
            return str(candidates[0])
    return None


def nvcc(nvcc13: Path, tmp_path: Path, name: str, *flags: str) -> Path:
    source = tmp_path / "axpy.cu"
    source.write_text(KERNEL)
    out = tmp_path / name
    subprocess.run([nvcc13, *flags, "-Xcompiler", "-fPIC", "-o", str(out), str(source)], check=True)
    return out


@pytest.fixture(scope="module")
def compressed_dso(tmp_path_factory: pytest.TempPathFactory, nvcc13: Path) -> Path:
    return nvcc(nvcc13, tmp_path_factory.mktemp("fatbin"), "axpy.so", "--shared", "-gencode", "arch=compute_75,code=sm_75",
                "-gencode", "arch=compute_120f,code=sm_120f", "--compress-mode=size")


def test_compressed_sass_for_two_archs(compressed_dso: Path) -> None:
    entries = nvfatbin.list_entries(compressed_dso)
    assert set(entries) == {FatbinEntry("cubin", 75, "", "zstd"), FatbinEntry("cubin", 120, "f", "zstd")}
    assert nvfatbin.arch_names(compressed_dso) == ["sm_120f", "sm_75"]


def test_arch_specific_cubin_and_ptx_uncompressed(tmp_path: Path, nvcc13: Path) -> None:
    obj = nvcc(nvcc13, tmp_path, "axpy.o", "-c", "-gencode", "arch=compute_121a,code=sm_121a",
               "-gencode", "arch=compute_90,code=compute_90", "--compress-mode=none")
    entries = nvfatbin.list_entries(obj)
    assert entries == [FatbinEntry("cubin", 121, "a", None), FatbinEntry("ptx", 90, "", None)]
    assert nvfatbin.arch_names(obj) == ["compute_90", "sm_121a"]


def test_agrees_with_cuobjdump(compressed_dso: Path) -> None:
    tool = cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (pip install nvidia-cuda-cuobjdump)")
    listing = subprocess.run([tool, "--list-elf", str(compressed_dso)], capture_output=True, text=True, check=True).stdout
    theirs = sorted(re.findall(r"\.(sm_\d+[a-z]?)\.cubin", listing))
    # cuobjdump names an sm_120f cubin sm_120: compare without the family suffix
    ours = sorted(f"sm_{e.sm}{e.variant if e.variant == 'a' else ''}" for e in nvfatbin.list_entries(compressed_dso))
    assert ours == theirs


def test_files_without_cuda_code_hold_no_archs(tmp_path: Path) -> None:
    source = tmp_path / "plain.c"  # a backend-shaped DSO with host code only
    source.write_text("int ggml_backend_cpu_init(void) { return 1; }\nint ggml_backend_cpu_reg(void) { return 2; }\n")
    dso = tmp_path / "ggml-plain.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(dso), str(source)], check=True)
    assert nvfatbin.section_data(dso) == b""
    assert nvfatbin.list_entries(dso) == [] and nvfatbin.arch_names(dso) == []


def test_corrupt_sections_are_reported(compressed_dso: Path) -> None:
    data = bytearray(nvfatbin.section_data(compressed_dso))
    header = nvfatbin.CONTAINER_HEADER.size
    struct.pack_into("<I", data, header + 0x1C, 86)  # the first entry now claims sm_86
    with pytest.raises(FatbinError, match="claims sm_86 but holds an sm_75 cubin"):
        nvfatbin.parse_fatbin(bytes(data))
    with pytest.raises(FatbinError, match="runs past the end"):
        nvfatbin.parse_fatbin(bytes(data[:64]))
