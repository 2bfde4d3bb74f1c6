"""ROCm: the offload-arch table and its filtering, the hipcc probe, and real `scons rocm` builds."""
from __future__ import annotations

import filecmp
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import PROJECT, dso_paths, scons
from opencoti_build import errors, rocm_archs, summary
from opencoti_build.formats import hipbundle
from opencoti_build.toolchains import ToolchainBroken
from opencoti_build.toolchains import rocm as rocm_toolchain

ROCM_SH = PROJECT / "vendors" / "sources" / "llamafile" / "llamafile" / "rocm.sh"
HAVE_HIPCC = shutil.which("hipcc") is not None or Path("/opt/rocm/bin/hipcc").exists()
needs_hipcc = pytest.mark.skipif(not HAVE_HIPCC, reason="hipcc not installed")

# Debian bookworm's ROCm 5.2: clang 15 knows gfx1100-1103 but has no gfx942; device libs stop at gfx1036.
DEBIAN = rocm_archs.RocmSupport(
    compiler="clang 15.0.6",
    compiler_cpus=frozenset({"gfx900", "gfx906", "gfx908", "gfx90a", "gfx940", "gfx1030", "gfx1031", "gfx1032",
                             "gfx1100", "gfx1101", "gfx1102", "gfx1103"}),
    device_lib_dir="/usr/lib/x86_64-linux-gnu/amdgcn/bitcode",
    device_lib_isas=frozenset({"gfx900", "gfx906", "gfx908", "gfx90a", "gfx940", "gfx1030", "gfx1031", "gfx1032"}),
)

HIPCC_VERBOSE_OUTPUT = """\
HIP_PATH=/usr
HIP_PLATFORM=amd
ROCM_PATH=/usr
HIP_CLANG_PATH=/usr/bin
DEVICE_LIB_PATH=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode
hipcc-cmd: /usr/bin/clang++-15  -L"/usr/lib" --hip-version=5.2.21153 --rocm-path=/usr -O3  --version -lamdhip64
HIP version: 5.2.21153-0
Debian clang version 15.0.6
Target: x86_64-pc-linux-gnu
"""


@pytest.mark.realtree
def test_upstream_list_is_rocm_sh_default() -> None:
    if not ROCM_SH.is_file():
        pytest.skip(f"no {ROCM_SH}: `git submodule update --init vendors/sources/llamafile`")
    assert rocm_archs.UPSTREAM_OFFLOAD_ARCHS == tuple(re.findall(r"--offload-arch=(gfx[0-9a-f]+)", ROCM_SH.read_text()))


def test_default_archs_drop_what_this_rocm_lacks_with_a_reason_each() -> None:
    archs, warnings = rocm_archs.select_archs("", DEBIAN)
    assert archs == ["gfx906", "gfx1030", "gfx1031", "gfx1032"]
    assert warnings[0] == "rocm: skipping gfx942: hipcc's clang 15.0.6 does not know the processor gfx942"
    assert warnings[1:] == [
        f"rocm: skipping gfx110{n}: no device library oclc_isa_version_110{n}.bc for it in {DEBIAN.device_lib_dir}"
        for n in range(4)
    ]


def test_override_is_taken_as_given() -> None:
    assert rocm_archs.select_archs(" gfx1030, gfx906,gfx1030 ", DEBIAN) == (["gfx1030", "gfx906"], [])
    assert rocm_archs.select_archs("gfx90a:xnack+", DEBIAN) == (["gfx90a:xnack+"], [])


def test_override_naming_a_missing_target_is_one_error() -> None:
    with pytest.raises(rocm_archs.OffloadArchError) as err:
        rocm_archs.select_archs("gfx906,gfx1100,bogus", DEBIAN)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("OFFLOAD_ARCH names targets this ROCm cannot build (gfx1100: no device library "
                              "oclc_isa_version_1100.bc")
    assert "bogus: not a gfx target id" in message and "gfx906:" not in message
    assert message.endswith("(buildable upstream targets here: gfx906, gfx1030, gfx1031, gfx1032) "
                            "or set ROCM_PATH to a newer ROCm")


def test_override_of_only_commas() -> None:
    with pytest.raises(rocm_archs.OffloadArchError, match="name at least one gfx target"):
        rocm_archs.select_archs(",,", DEBIAN)


def test_device_lib_isas_from_file_names(tmp_path: Path) -> None:
    for name in ("oclc_isa_version_906.bc", "oclc_isa_version_90a.bc", "oclc_isa_version_1030.bc", "ocml.bc"):
        (tmp_path / name).write_bytes(b"")
    assert rocm_archs.device_lib_isas(tmp_path) == {"gfx906", "gfx90a", "gfx1030"}
    assert rocm_archs.device_lib_isas(tmp_path / "absent") == frozenset()


def test_parse_supported_cpus() -> None:
    listing = "Available CPUs for this target:\n\n\tbonaire\n\tgfx1030\n\tgfx90a\n\nUse -mcpu or -mtune ...\n"
    assert rocm_archs.parse_supported_cpus(listing) == {"gfx1030", "gfx90a"}


def test_parse_hipcc_config() -> None:
    config = rocm_archs.parse_hipcc_config(HIPCC_VERBOSE_OUTPUT)
    assert config["DEVICE_LIB_PATH"] == "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"
    assert config["HIP_VERSION"] == "5.2.21153-0"
    assert config["CLANG_VERSION"] == "15.0.6"
    assert config["hipcc-cmd"].split()[0] == "/usr/bin/clang++-15"


def test_rocm_path_without_hipcc_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ToolchainBroken, match=rf"^ROCM_PATH={tmp_path} has no executable bin/hipcc; "):
        rocm_toolchain.probe({"ROCM_PATH": str(tmp_path), "ENV": {"PATH": ""}})


@pytest.mark.skipif(Path("/opt/rocm/bin/hipcc").exists(), reason="/opt/rocm has a hipcc")
def test_no_hipcc_anywhere_is_a_reason_to_skip(tmp_path: Path) -> None:
    with pytest.raises(errors.Absent) as absent:
        rocm_toolchain.probe({"ROCM_PATH": "", "ENV": {"PATH": str(tmp_path)}})
    assert str(absent.value) == "no hipcc in /opt/rocm and PATH; install ROCm (hipcc) or set ROCM_PATH=DIR"


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
        assert found.support.skip_reason(target) is None
    if not Path(found.support.device_lib_dir, "oclc_isa_version_1100.bc").exists():  # Debian's ROCm 5.2
        assert "oclc_isa_version_1100.bc" in found.support.skip_reason("gfx1100")


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
    proc = rocm(tree, tmp_path, "OFFLOAD_ARCH=gfx906,gfx1030")
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
    if support.skip_reason("gfx1100") is None:
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
