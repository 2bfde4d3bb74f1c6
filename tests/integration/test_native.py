"""`scons native`: the native-ELF lane on the miniature tree, its rules, and the CUDA half on real .cu files."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from opencoti_build.report import summary

from native_support import DOWNLOAD, sdist_llamacpp
from scons_runs import MINI_TREE, PROJECT, scons

MINI = f"SRC={MINI_TREE}"


def runpath(binary: Path) -> str:
    out = subprocess.run(["readelf", "-d", str(binary)], capture_output=True, text=True, check=True).stdout
    return next(line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(RUNPATH)" in line)


def ldd(binary: Path) -> dict[str, str]:
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
    return {line.split()[0]: line.split("=>", 1)[1].strip() for line in out.splitlines() if "=>" in line}


def test_the_stubs_answer_not_handled(tmp_path: Path) -> None:
    caller = tmp_path / "caller.c"
    caller.write_text(
        "#include <stdbool.h>\n#include <stddef.h>\n"
        "bool llamafile_sgemm(); bool llamafile_mixmul(); size_t llamafile_mixmul_needs();\n"
        "int main(void) { return llamafile_sgemm() || llamafile_mixmul() || llamafile_mixmul_needs(0, 0, 0); }\n")
    exe = tmp_path / "caller"
    subprocess.run(["g++", "-x", "c", str(caller), "-x", "c++", str(PROJECT / "native" / "opencoti-elf-stubs.cpp"),
                    "-o", str(exe)], check=True)
    assert subprocess.run([str(exe)]).returncode == 0


def linked_by_gold(binary: Path) -> bool:
    """gold, and only gold, leaves its version note in what it links."""
    sections = subprocess.run(["readelf", "-S", "-W", str(binary)], capture_output=True, text=True, check=True).stdout
    return ".note.gnu.gold-version" in sections


# --- scons native on the miniature tree ---

@pytest.fixture(scope="module")
def built_native(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    build = tmp_path_factory.mktemp("native-mini")
    proc = scons("native", MINI, "CPU_ONLY=1", build=build)
    return build, proc.stdout


def test_native_builds_a_llama_server_elf_that_runs(built_native: tuple[Path, str]) -> None:
    build, stdout = built_native
    server = build / "out" / "native" / "bin" / "llama-server"
    assert server.read_bytes()[:4] == b"\x7fELF"
    assert "FATCC" not in stdout  # no cosmocc compile in this lane
    proc = subprocess.run([str(server), "-m", "tiny.gguf"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "server: model=tiny.gguf" in proc.stdout + proc.stderr  # its own main, not llama_server


def test_llama_server_finds_libggml_base_by_rpath(built_native: tuple[Path, str]) -> None:
    build, _ = built_native
    server = build / "out" / "native" / "bin" / "llama-server"
    assert runpath(server) == "$ORIGIN/../lib"
    base = build / "out" / "native" / "lib" / "libggml-base.so"
    exported = subprocess.run(["nm", "-D", "--defined-only", str(base)], capture_output=True, text=True).stdout
    assert " T ggml_version" in exported
    for name, where in ldd(server).items():
        assert "not found" not in where, name


def test_native_rebuild_is_null_and_clean_removes_outputs(built_native: tuple[Path, str]) -> None:
    build, _ = built_native
    again = scons("native", MINI, "CPU_ONLY=1", build=build)
    assert "NATIVECC" not in again.stdout and "NATIVELINK" not in again.stdout
    scons("-c", "native", MINI, "CPU_ONLY=1", build=build)
    native = build / "out" / "native"
    assert not (native / "bin" / "llama-server").exists()
    assert not (native / "lib" / "libggml-base.so").exists()
    restored = scons("native", MINI, "CPU_ONLY=1", build=build)  # back from the cache, nothing compiled
    assert "NATIVECC" not in restored.stdout
    assert (native / "bin" / "llama-server").is_file()


def test_the_native_objects_are_in_the_compile_database(built_native: tuple[Path, str]) -> None:
    build, _ = built_native
    scons("compiledb", "native", MINI, "CPU_ONLY=1", build=build)  # both lanes read: their entries merged
    entries = json.loads((build / "compile_commands.json").read_text())
    native = [e for e in entries if e["output"].startswith(str(build / "out" / "native" / "obj") + "/")]
    # one entry per file, the host's first: the lane's own file is the stubs (llama.cpp's are the fat lane's)
    stubs = next(e for e in native if e["file"] == str(PROJECT / "native" / "opencoti-elf-stubs.cpp"))
    assert stubs["arguments"][0] == "g++" and stubs["output"].endswith("/opencoti-elf-stubs.o")


@pytest.mark.skipif(shutil.which("ld.gold") is None, reason="no ld.gold on PATH")
def test_the_links_take_the_named_linker_and_a_change_of_linker_relinks(built_native: tuple[Path, str]) -> None:
    build, _ = built_native
    native = build / "out" / "native"
    linked = (native / "bin" / "llama-server", native / "lib" / "libggml-base.so")
    assert all(linked_by_gold(path) for path in linked)  # auto, with gold here
    bfd = scons("native", MINI, "CPU_ONLY=1", "NATIVE_LINKER=bfd", build=build)
    steps = summary.unprefixed(bfd.stdout)
    assert {f"NATIVELINK {path}" for path in linked} <= set(steps), bfd.stdout
    assert not any(line.startswith("NATIVECC") for line in steps)  # the objects stay
    assert not any(linked_by_gold(path) for path in linked)
    assert subprocess.run([str(linked[0]), "-m", "tiny.gguf"], capture_output=True, timeout=30).returncode == 0
    back = scons("native", MINI, "CPU_ONLY=1", build=build)  # auto again: gold's links come back from the cache
    assert all(linked_by_gold(path) for path in linked)
    assert not any(line.startswith("NATIVELINK") for line in summary.unprefixed(back.stdout))


def test_thin_archives_name_their_members_relatively_and_a_member_change_relinks(tree: Path, tmp_path: Path) -> None:
    build = tmp_path / "b"
    scons("native", f"SRC={tree}", "CPU_ONLY=1", build=build)
    native = build / "out" / "native"
    archive = native / "obj" / "lib" / "libllamafile.a"  # llamafile's package: the server's main
    before = archive.read_bytes()
    assert before.startswith(b"!<thin>\n")  # an index and member paths, no copies of the objects
    assert b"../llama.cpp/tools/server/server.cpp.o/" in before and str(tmp_path).encode() not in before
    source = tree / "llama.cpp" / "tools" / "server" / "server.cpp"
    source.write_text(source.read_text().replace('"server: model=', '"server: MODEL='))  # same sizes and symbols
    proc = scons("native", f"SRC={tree}", "CPU_ONLY=1", build=build)
    steps = summary.unprefixed(proc.stdout)
    assert f"NATIVECC {native / 'obj' / 'llama.cpp' / 'tools' / 'server' / 'server.cpp.o'}" in steps
    assert archive.read_bytes() == before  # the thin archive cannot tell: the server depends on the member
    assert f"NATIVELINK {native / 'bin' / 'llama-server'}" in steps
    run = subprocess.run([str(native / "bin" / "llama-server"), "-m", "tiny.gguf"], capture_output=True, text=True,
                         timeout=30)
    assert "server: MODEL=tiny.gguf" in run.stdout + run.stderr


def test_a_linker_not_on_path_is_one_error_line(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"  # the compilers, without ld.gold
    bin_dir.mkdir()
    for tool in ("gcc", "g++", "ar", "git"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    proc = scons("native", MINI, "CPU_ONLY=1", "NATIVE_LINKER=gold", build=tmp_path / "b", check=False,
                 env_extra={"PATH": str(bin_dir)})
    errors = [line for line in proc.stderr.splitlines() if line.startswith("scons: error:")]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert errors == ["scons: error: NATIVE_LINKER=gold: ld.gold is not on PATH; install binutils' ld.gold "
                      "or use NATIVE_LINKER=auto"]
    assert not (tmp_path / "b" / "out" / "native" / "obj").exists()


def test_a_dry_run_of_a_checkout_of_any_name_writes_nothing(tmp_path: Path) -> None:
    checkout = tmp_path / "lc-checkout"  # not called llama.cpp: read where it is, through no link
    checkout.symlink_to(MINI_TREE / "llama.cpp")
    proc = scons("-n", "native", MINI, "CPU_ONLY=1", f"LLAMACPP={checkout}", build=tmp_path / "b")
    assert "NATIVECC" in proc.stdout and "NATIVELINK" in proc.stdout
    assert not (tmp_path / "b" / "out" / "native").exists()


def test_llamacpp_without_ggml_or_src_is_one_error_line(tmp_path: Path) -> None:
    bare = tmp_path / "not-llama"
    (bare / "ggml").mkdir(parents=True)
    proc = scons("native", MINI, f"LLAMACPP={bare}", build=tmp_path / "b", check=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("scons: error:")]
    assert proc.returncode != 0
    assert errors == [f"scons: error: LLAMACPP={bare} is not a llama.cpp checkout (no src/); "
                      f"point LLAMACPP= at the root of a llama.cpp tree"]
    assert "Traceback" not in proc.stderr


def test_missing_cublas_warns_once_and_builds_the_cpu_half(tmp_path: Path) -> None:
    toolkit = tmp_path / "cuda-12.6"
    (toolkit / "bin").mkdir(parents=True)
    nvcc = toolkit / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.6, V12.6.85'\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    proc = scons("native", MINI, f"CUDA_PATH={toolkit}", build=tmp_path / "b")
    warns = [line for line in proc.stderr.splitlines() if line.startswith("WARN:")]
    assert len(warns) == 1 and "no cuBLAS 12.x" in warns[0], proc.stderr
    assert (tmp_path / "b" / "out" / "native" / "bin" / "llama-server").is_file()
    assert not (tmp_path / "b" / "out" / "native" / "lib" / "libggml-cuda.so").exists()


# --- the CUDA half on a few real ggml-cuda files of the sdist (needs nvcc, cuBLAS, the cached sdist) ---

CUDA_SUBSET = ("arange.cu", "fill.cu")


def subset_tree(real: Path, dest: Path) -> Path:
    """``real`` as symlinks, except that its ggml-cuda holds only CUDA_SUBSET (and every header)."""
    for directory in ("", "ggml", "ggml/src"):
        (dest / directory).mkdir(parents=True, exist_ok=True)
        for entry in (real / directory).iterdir():
            if entry.name not in ("ggml", "src", "ggml-cuda") or directory == "ggml" and entry.name != "src":
                (dest / directory / entry.name).symlink_to(entry)
    (dest / "src").symlink_to(real / "src")
    cuda = dest / "ggml" / "src" / "ggml-cuda"
    cuda.mkdir()
    for entry in (real / "ggml" / "src" / "ggml-cuda").iterdir():
        if entry.suffix != ".cu" and entry.name != "template-instances" or entry.name in CUDA_SUBSET:
            (cuda / entry.name).symlink_to(entry)
    return dest


def test_cuda_half_compiles_real_cu_files_against_cublas_and_resolves_by_rpath(tmp_path: Path) -> None:
    if shutil.which("nvcc") is None and not any(Path("/usr/local").glob("cuda*/bin/nvcc")):
        pytest.skip("no nvcc: the CUDA half needs a CUDA 12.x/13.x toolkit")
    real = sdist_llamacpp(download=False)
    if real is None:
        pytest.skip(f"llama-cpp-python sdist not cached; fetch it once with: {DOWNLOAD}")
    tree = subset_tree(real, tmp_path / "llama.cpp")
    proc = scons("native-cuda", MINI, f"LLAMACPP={tree}", "CUDA_ARCHS=80", build=tmp_path / "b")
    if "no cuBLAS" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    lib = tmp_path / "b" / "out" / "native" / "lib" / "libggml-cuda.so"
    compiled = sorted(line.split("/")[-1] for line in summary.unprefixed(proc.stdout) if line.startswith("NVCC "))
    assert compiled == [f"{name}.o" for name in CUDA_SUBSET]
    deps = ldd(lib)
    assert deps["libggml-base.so"].split()[0] == str(lib.with_name("libggml-base.so"))
    for needed in ("libcublas.so", "libcudart.so"):
        name = next(n for n in deps if n.startswith(needed))
        assert "not found" not in deps[name] and os.path.isabs(deps[name].split()[0]), (name, deps[name])
    assert runpath(lib).split(":")[0] == "$ORIGIN"
