"""`scons cuda` for real (nvcc 13, two archs) on the miniature tree: outputs, verification, bad input."""
from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest

from opencoti_build.formats import nvfatbin
from opencoti_build.report import summary

from scons_runs import MINI_TREE, NVCC13_ROOT, dso_paths, scons

pytestmark = pytest.mark.usefixtures("nvcc13")  # skipped without the CUDA 13 toolkit
ARCHS = "CUDA_ARCHS=75,120f"  # two archs keep nvcc fast on a small machine


def nvcc_compiles(stdout: str) -> list[str]:
    """The source files a build ran nvcc on: its ``NVCC <x.cu.o>`` lines, or with VERBOSE=1 its nvcc -c commands."""
    short = [Path(line.split()[1]).name[: -len(".o")] for line in summary.unprefixed(stdout) if line.startswith("NVCC ")]
    return sorted(short + [Path(line.split()[-1]).name for line in stdout.splitlines() if "/nvcc -c " in line])


def cuda_build(src: Path, build: Path, *extra: str, check: bool = True):
    # FA_ALL_QUANTS=0 keeps the nvcc runs few; the default (all K/V pairs) is checked with -n below
    return scons(f"SRC={src}", f"CUDA_PATH={NVCC13_ROOT}", ARCHS, "FA_ALL_QUANTS=0", *extra, "cuda", build=build,
                 check=check)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    build = tmp_path_factory.mktemp("cuda")
    (build / "home").mkdir()
    (build / "home" / "ggml-cuda.so").write_bytes(b"an old manual cuda.sh build\n")
    return build, cuda_build(MINI_TREE, build, "MIRROR=1")


def test_dso_holds_the_requested_archs_and_entry_points(built) -> None:
    build, proc = built
    dso = dso_paths("cuda", build)[0]
    assert nvfatbin.arch_names(dso) == ["sm_120f", "sm_75"]
    import lief

    binary = lief.ELF.parse(str(dso))  # keep it alive: its symbols point into it
    exported = {s.name for s in binary.dynamic_symbols if s.exported}
    assert {"ggml_backend_cuda_init", "ggml_backend_cuda_reg", "ggml_row_size"} <= exported  # core linked in
    assert not list(dso.parent.glob(".*unverified"))


def test_sources_follow_the_selection_rules(built) -> None:
    _, proc = built
    # with FA_ALL_QUANTS=0 the mixed-type fattn-vec instance (an #error file then) is left out; TinyBLAS is in
    assert nvcc_compiles(proc.stdout) == [
        "fattn-vec-instance-f16-f16.cu", "ggml-cuda.cu", "mmq-instance-q4_0.cu", "scale.cu", "tinyblas.cu"]


def test_fa_all_quants_by_default_adds_the_mixed_instances(tmp_path: Path) -> None:
    proc = scons(f"SRC={MINI_TREE}", f"CUDA_PATH={NVCC13_ROOT}", ARCHS, "-n", "VERBOSE=1", "cuda", build=tmp_path)
    assert "fattn-vec-instance-q4_0-f16.cu" in nvcc_compiles(proc.stdout)
    assert "-DGGML_CUDA_FA_ALL_QUANTS" in proc.stdout


def test_mirror_is_byte_identical_and_stale_home_copy_warns(built) -> None:
    build, proc = built
    assert dso_paths("cuda", build)[1].read_bytes() == dso_paths("cuda", build)[0].read_bytes()
    warns = [line for line in proc.stderr.splitlines() if "ggml-cuda.so differs" in line]
    assert warns == [f"WARN: {build / 'home' / 'ggml-cuda.so'} differs from the ggml-cuda.so just built and may be "
                     f"loaded instead of it; delete it or copy the new one over it"]


def test_null_rebuild_does_nothing_and_a_fresh_home_copy_is_quiet(built) -> None:
    build, _ = built
    shutil.copyfile(dso_paths("cuda", build)[0], build / "home" / "ggml-cuda.so")
    proc = cuda_build(MINI_TREE, build, "MIRROR=1")
    assert nvcc_compiles(proc.stdout) == []
    assert "Linking" not in proc.stdout
    assert "differs" not in proc.stderr


def test_the_same_toolkit_under_another_name_rebuilds_nothing(built, tmp_path: Path) -> None:
    """/usr/local/cuda is a link to /usr/local/cuda-13.0 on a stock install: CUDA_PATH by the other name is the same
    toolkit, so the same signatures and the same bytes (the toolchain's real path is what commands name)."""
    build, _ = built
    link = tmp_path / "cuda"
    link.symlink_to(NVCC13_ROOT)
    dso = dso_paths("cuda", build)[0]
    before = dso.read_bytes()
    proc = scons(f"SRC={MINI_TREE}", f"CUDA_PATH={link}", ARCHS, "FA_ALL_QUANTS=0", "MIRROR=1", "cuda", build=build)
    counts = summary.parse(proc.stdout)
    assert nvcc_compiles(proc.stdout) == [] and "Linking" not in proc.stdout, proc.stdout
    assert (counts["compiled"], counts["cached"]) == (0, 0)
    assert dso.read_bytes() == before


def test_header_edit_rebuilds_exactly_its_includers(tree: Path, tmp_path: Path) -> None:
    cuda_build(tree, tmp_path)
    header = tree / "llama.cpp" / "ggml" / "src" / "ggml-cuda" / "common.cuh"
    header.write_text(header.read_text() + "\n// edited\n")
    proc = cuda_build(tree, tmp_path)
    assert nvcc_compiles(proc.stdout) == [
        "fattn-vec-instance-f16-f16.cu", "ggml-cuda.cu", "mmq-instance-q4_0.cu", "scale.cu"]


def test_missing_core_source_fails_naming_the_symbol(tree: Path, tmp_path: Path) -> None:
    # the seed's dlopen failure: ggml.c references a new core file's function, the core list lacks the file
    ggml_src = tree / "llama.cpp" / "ggml" / "src"
    (ggml_src / "ggml-turbo-quant.c").write_text("void dequantize_row_turbo2_0(void) {}\n")
    with (ggml_src / "ggml.c").open("a") as fh:
        fh.write("void dequantize_row_turbo2_0(void);\nvoid (*const ggml_turbo_ref)(void) = dequantize_row_turbo2_0;\n")
    proc = cuda_build(tree, tmp_path, check=False)
    assert proc.returncode != 0
    assert ("ggml-cuda.so: undefined symbol dequantize_row_turbo2_0 provided by no DT_NEEDED library; add the ggml "
            "core source defining it to GGML_CORE_SOURCES in site_scons/opencoti_build/tree/sources.py") in proc.stderr
    out_dir = dso_paths("cuda", tmp_path)[0].parent
    assert not out_dir.exists() or sorted(p.name for p in out_dir.iterdir()) == []
    assert not dso_paths("cuda", tmp_path)[1].exists()


def test_unknown_arch_fails_before_any_compile(tmp_path: Path) -> None:
    proc = scons(f"SRC={MINI_TREE}", f"CUDA_PATH={NVCC13_ROOT}", "CUDA_ARCHS=75,99", "cuda", build=tmp_path, check=False)
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if "error" in line] == [
        "scons: error: CUDA_ARCHS: nvcc 13.0 cannot build sm_99 (it builds 75, 80, 86, 87, 88, 89, 90, 90a, 100, 100a, "
        "100f, 103, 103a, 103f, 110, 110a, 110f, 120, 120a, 120f, 121, 121a, 121f); drop it or use a toolkit that has it"]
    assert not (tmp_path / "out" / "backends").exists()


def test_cuda_path_pointing_nowhere(tmp_path: Path) -> None:
    proc = scons(f"SRC={MINI_TREE}", f"CUDA_PATH={tmp_path / 'nowhere'}", "cuda", build=tmp_path, check=False)
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if "error" in line] == [
        f"scons: error: CUDA_PATH={tmp_path / 'nowhere'} has no executable bin/nvcc; point it at a CUDA 12.x/13.x "
        f"toolkit, or leave it empty to search /usr/local/cuda-12.6 and the usual places"]


def fake_nvcc(tmp_path: Path, script: str) -> Path:
    """``tmp_path/cuda/bin/nvcc``: a shell script standing in for nvcc."""
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f"#!/bin/sh\n{script}\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    return nvcc


def test_broken_nvcc(tmp_path: Path) -> None:
    nvcc = fake_nvcc(tmp_path, "echo 'libnvvm.so.4: cannot open shared object file' >&2\nexit 127")
    proc = scons(f"SRC={MINI_TREE}", f"CUDA_PATH={tmp_path / 'cuda'}", "cuda", build=tmp_path, check=False)
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if "error" in line] == [
        f"scons: error: `{nvcc} --version` failed (exit status 127); the toolkit is broken: reinstall it or point "
        f"CUDA_PATH elsewhere"]


def test_host_build_reads_no_backend(tmp_path: Path) -> None:
    log = tmp_path / "nvcc.log"
    fake_nvcc(tmp_path, f'echo "$@" >> {log}\nexit 1')
    proc = scons("-n", f"SRC={MINI_TREE}", f"CUDA_PATH={tmp_path / 'cuda'}", build=tmp_path)
    assert not log.exists()
    assert "WARN" not in proc.stderr


def test_cublas_build_links_cublas_instead_of_tinyblas(tmp_path: Path) -> None:
    from opencoti_build.gpu import cublas

    if cublas.find_any(str(NVCC13_ROOT), 13) is None:
        pytest.skip("no cuBLAS 13 in the toolkit or the nvidia-cublas wheel")
    proc = scons(f"SRC={MINI_TREE}", f"CUDA_PATH={NVCC13_ROOT}", "CUDA_ARCHS=75", "FA_ALL_QUANTS=0", "CUBLAS=1",
                 "VERBOSE=1", "cuda", build=tmp_path)
    assert "tinyblas.cu" not in nvcc_compiles(proc.stdout) and "-DGGML_USE_CUBLAS" in proc.stdout
    import lief

    dso = lief.ELF.parse(str(dso_paths("cuda", tmp_path)[0]))
    assert "libcublas.so.13" in dso.libraries  # resolved at verification through the wheel's lib dir
    assert "ggml_cuda_cublas_ready" in {s.name for s in dso.dynamic_symbols if s.exported}
