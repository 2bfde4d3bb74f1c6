"""CUDA architecture tables, and version detection through a fake `nvcc --version` (no 12.x nvcc exists here)."""
from __future__ import annotations

import stat
from pathlib import Path

from opencoti_build.report import summary

from scons_runs import MINI_TREE, scons


def fake_toolkit(root: Path, release: str, log: Path) -> Path:
    """A toolkit whose nvcc only answers --version (and logs every call)."""
    nvcc = root / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f'#!/bin/sh\necho "$@" >> {log}\n'
                    f'[ "$1" = --version ] && echo "Cuda compilation tools, release {release}, V{release}.85" && exit 0\n'
                    'exit 1\n')
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    return root


def test_fake_cuda12_nvcc_selects_the_12x_table(tmp_path: Path) -> None:
    log = tmp_path / "nvcc.log"
    toolkit = fake_toolkit(tmp_path / "cuda-12.6", "12.6", log)
    proc = scons("-n", "VERBOSE=1", f"SRC={MINI_TREE}", f"CUDA_PATH={toolkit}", "cuda", build=tmp_path)
    compiles = [line for line in summary.unprefixed(proc.stdout) if " -c " in line and line.startswith(str(toolkit))]
    assert compiles, proc.stdout
    for line in compiles:
        assert "-gencode arch=compute_90,code=sm_90" in line
        assert "120" not in line.split("-o")[0] and "--compress-mode" not in line
    assert log.read_text().splitlines() == ["--version"]  # probed once, for the version only


def test_fake_cuda12_refuses_sm120_before_compiling(tmp_path: Path) -> None:
    log = tmp_path / "nvcc.log"
    toolkit = fake_toolkit(tmp_path / "cuda-12.6", "12.6", log)
    proc = scons(f"SRC={MINI_TREE}", f"CUDA_PATH={toolkit}", "CUDA_ARCHS=90,120", "cuda", build=tmp_path, check=False)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == ["scons: error: CUDA_ARCHS: nvcc 12.6 cannot build sm_120 (it builds 50, 52, 53, 60, 61, 62, 70, "
                      "72, 75, 80, 86, 87, 89, 90, 90a); drop it or use a toolkit that has it"]
    assert log.read_text().splitlines() == ["--version"]
