"""opencoti_build.gpu.backends: the registry every part of the build reads, and its device-code readers."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from opencoti_build.artifacts import binary_report, manifest
from opencoti_build.formats import spirv
from opencoti_build.gpu import backends

from scons_runs import MINI_TREE, scons_command

SPIRV_MODULE = b"".join(w.to_bytes(4, "little") for w in (
    spirv.MAGIC, 0x00010500, 0x000D000B, 8, 0, (2 << 16) | 17, 1, (1 << 16) | spirv.OP_FUNCTION_END))


@pytest.fixture(scope="module")
def shader_dso(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A host-code DSO carrying one SPIR-V module as ggml-vulkan embeds it."""
    tmp = tmp_path_factory.mktemp("registry")
    (tmp / "s.hpp").write_text(spirv.c_array_header(["copy"]))
    (tmp / "s.cpp").write_text(spirv.c_array_source({"copy": SPIRV_MODULE}, "s.hpp"))
    dso = tmp / "ggml-s.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(dso), str(tmp / "s.cpp")], check=True)
    return dso


def test_every_reader_reads_any_file(shader_dso: Path) -> None:
    assert [spec.device_code(str(shader_dso)).architectures for spec in backends.BACKENDS] == [(), (), ("spirv-1.5",)]
    assert manifest.dso_architectures(shader_dso) == ["spirv-1.5"]
    assert "spir-v modules: 1 (version 1.5)" in binary_report.report(str(shader_dso), [])
    assert backends.get("vulkan").built_names(str(shader_dso)) == ["copy"]


def test_a_missing_lief_is_an_error_not_an_empty_list(shader_dso: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lief", None)  # what `import lief` sees where it is not installed
    with pytest.raises(ImportError):
        manifest.dso_architectures(shader_dso)


def test_reading_every_sconscript_loads_no_elf_reader(tmp_path: Path) -> None:
    # lief takes most of a second to import: a run that asks for a backend but parses no DSO (here
    # `scons -q`, which stops before the first step) must not pay for it.
    argv, env = scons_command(f"SRC={MINI_TREE}", "-q", "host", "vulkan", build=tmp_path)
    proc = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], capture_output=True, text=True, env=env)
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert proc.returncode == 1, proc.stdout + proc.stderr  # not current: nothing is built yet
    assert "opencoti_build.gpu.dso_verification" in imported, "the backends' SConscript was not read"
    assert "lief" not in imported
