"""ROCm: the offload-arch table and its filtering, and the hipcc probe's parsers.

In-process checks of the core here; the real builds and tools: tests/integration/test_hip.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from opencoti_build import errors
from opencoti_build.gpu import rocm_archs
from opencoti_build.gpu.toolchains import ToolchainBroken
from opencoti_build.gpu.toolchains import rocm as rocm_toolchain

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


def test_every_unbuildable_target_is_named_and_none_buildable_says_none() -> None:
    nothing = rocm_archs.RocmSupport("clang 15.0.6", frozenset(), "/opt/rocm/amdgcn/bitcode", frozenset())
    with pytest.raises(rocm_archs.OffloadArchError) as err:
        rocm_archs.select_archs("gfx906 gfx906,gfx1030", nothing)  # spaces split too; a duplicate is named once
    assert str(err.value) == (
        "OFFLOAD_ARCH names targets this ROCm cannot build (gfx906: hipcc's clang 15.0.6 does not know the "
        "processor gfx906; gfx1030: hipcc's clang 15.0.6 does not know the processor gfx1030); drop them "
        "(buildable upstream targets here: none) or set ROCM_PATH to a newer ROCm")
    with pytest.raises(rocm_archs.OffloadArchError, match="^OFFLOAD_ARCH is empty after splitting on commas; "
                                                          "name at least one gfx target$"):
        rocm_archs.override_archs(" , ", nothing)
    assert rocm_archs.split_override(" gfx90a:xnack+,gfx906  gfx90a:xnack+ ") == ["gfx90a:xnack+", "gfx906"]


def test_the_hipcc_command_keeps_its_colons() -> None:
    config = rocm_archs.parse_hipcc_config("hipcc-cmd: /usr/bin/clang -x hip --offload-arch=gfx90a:xnack+ a.cpp\n")
    assert config["hipcc-cmd"] == "/usr/bin/clang -x hip --offload-arch=gfx90a:xnack+ a.cpp"
