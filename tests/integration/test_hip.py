"""ROCm: the offload-arch table and its filtering, the hipcc probe, and real `scons rocm` builds."""
from __future__ import annotations

import filecmp
import os
import re
import shutil
from pathlib import Path

import pytest

from opencoti_build.formats import hipbundle
from opencoti_build.gpu import rocm_archs
from opencoti_build.gpu.toolchains import ToolchainBroken
from opencoti_build.gpu.toolchains import rocm as rocm_toolchain
from opencoti_build.report import summary

from scons_runs import PROJECT, dso_paths, scons

ROCM_SH = PROJECT / "vendors" / "sources" / "llamafile" / "llamafile" / "rocm.sh"
HAVE_HIPCC = shutil.which("hipcc") is not None or Path("/opt/rocm/bin/hipcc").exists()
needs_hipcc = pytest.mark.skipif(not HAVE_HIPCC, reason="hipcc not installed")


@pytest.mark.realtree
def test_upstream_list_is_rocm_sh_default() -> None:
    if not ROCM_SH.is_file():
        pytest.skip(f"no {ROCM_SH}: `git submodule update --init vendors/sources/llamafile`")
    assert rocm_archs.UPSTREAM_OFFLOAD_ARCHS == tuple(re.findall(r"--offload-arch=(gfx[0-9a-f]+)", ROCM_SH.read_text()))


def test_hipcc_that_reports_no_hip_version_is_broken(tmp_path: Path) -> None:
    hipcc = tmp_path / "bin" / "hipcc"
    hipcc.parent.mkdir()
    hipcc.write_text("#!/bin/sh\necho 'clang version 15'\n")
    hipcc.chmod(0o755)
    with pytest.raises(ToolchainBroken) as broken:
        rocm_toolchain.probe({"ROCM_PATH": str(tmp_path), "ENV": {"PATH": os.environ["PATH"]}})
    assert str(broken.value) == (f"{hipcc} --version did not report a HIP version and its clang (is it a ROCm "
                                 f"hipcc?); fix or remove that hipcc, or set ROCM_PATH to a working ROCm")


def this_rocm() -> rocm_toolchain.HipToolchain:
    return rocm_toolchain.probe({"ROCM_PATH": "", "ENV": {"PATH": os.environ["PATH"]}})


@needs_hipcc
def test_probe_of_this_rocm() -> None:
    found = this_rocm()
    assert dict(found.environ)["HIP_PLATFORM"] == "amd"
    for target in ("gfx906", "gfx1030"):
        assert found.support.why_not_buildable(target) is None
    if not Path(found.support.device_lib_dir, "oclc_isa_version_1100.bc").exists():  # Debian's ROCm 5.2
        assert "oclc_isa_version_1100.bc" in found.support.why_not_buildable("gfx1100")


def hipcc_lines(stdout: str) -> list[str]:
    """The hipcc steps a build ran: ``HIPCC <x.cu.o>`` lines, or with VERBOSE=1 the hipcc commands."""
    return [line for line in summary.unprefixed(stdout) if re.match(r"^\S*hipcc -x hip -c |HIPCC ", line)]


def hipcc_source(line: str) -> str:
    """The source file name a hipcc line compiled (``x.cu`` from ``HIPCC …/x.cu.o`` or the command's last word)."""
    last = Path(line.rsplit(" ", 1)[1]).name
    return last[: -len(".o")] if line.startswith("HIPCC ") else last


def rocm(tree: Path, build: Path, *args: str):
    """`scons rocm` on ``tree`` with the default fattn-vec selection (fewer, tiny TUs: hipcc is slow)."""
    return scons(f"SRC={tree}", "FA_ALL_QUANTS=0", "rocm", *args, build=build)


@needs_hipcc
def test_real_build_for_two_targets(tree: Path, tmp_path: Path) -> None:
    proc = rocm(tree, tmp_path, "OFFLOAD_ARCH=gfx906,gfx1030", "MIRROR=1")
    assert len(hipcc_lines(proc.stdout)) == 5  # ggml-cuda.cu, scale.cu, 2 instances, tinyblas.cu
    dso, mirror = dso_paths("rocm", tmp_path)
    bundles = hipbundle.read_bundles(dso)
    assert len(bundles) == 4  # one per translation unit with kernels (ggml-cuda.cu has none)
    assert all(sorted(b.targets) == ["gfx1030", "gfx906"] for b in bundles)
    assert hipbundle.bundle_targets(dso) == ["gfx1030", "gfx906"]
    assert filecmp.cmp(dso, mirror, shallow=False)


@needs_hipcc
def test_offload_arch_this_rocm_lacks_is_one_error_and_builds_nothing(tree: Path, tmp_path: Path) -> None:
    support = this_rocm().support
    if support.why_not_buildable("gfx1100") is None:
        pytest.skip("this ROCm can build gfx1100")
    proc = scons(f"SRC={tree}", "OFFLOAD_ARCH=gfx1100", "rocm", build=tmp_path, check=False)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "OFFLOAD_ARCH" in line]
    assert len(errors) == 1 and errors[0].startswith("scons: error: OFFLOAD_ARCH names targets this ROCm cannot "
                                                     "build (gfx1100: ")
    assert hipcc_lines(proc.stdout) == []
    dso, mirror = dso_paths("rocm", tmp_path)
    assert not dso.parent.exists()
    assert not mirror.exists()


@needs_hipcc
def test_default_targets_warn_per_skipped_target(tree: Path, tmp_path: Path) -> None:
    proc = rocm(tree, tmp_path, "-n", "VERBOSE=1")  # dry run: the probe and the commands
    support = this_rocm().support
    expected, warnings = rocm_archs.default_archs(support)
    assert [line for line in proc.stderr.splitlines() if line.startswith("WARN: rocm: skipping")] == [
        f"WARN: {w}" for w in warnings]
    lines = hipcc_lines(proc.stdout)
    assert lines and all(re.findall(r"--offload-arch=(\S+)", line) == expected for line in lines)


@needs_hipcc
def test_cuh_edit_recompiles_its_includers_only(tree: Path, tmp_path: Path) -> None:
    rocm(tree, tmp_path, "OFFLOAD_ARCH=gfx906")
    common = tree / "llama.cpp/ggml/src/ggml-cuda/common.cuh"
    common.write_text(common.read_text() + "\n#define CUDA_EDITED 1\n")
    proc = rocm(tree, tmp_path, "OFFLOAD_ARCH=gfx906")
    compiled = sorted(hipcc_source(line) for line in hipcc_lines(proc.stdout))
    assert compiled == ["fattn-vec-instance-f16-f16.cu", "ggml-cuda.cu", "mmq-instance-q4_0.cu", "scale.cu"]
