"""`scons LLAMACPP=DIR`: llama.cpp's own llama-server, fat, from an upstream checkout (the fixture's llama.cpp).

The same on the real llama.cpp of the llama-cpp-python sdist: tests/realtree/test_fat_realtree.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import lief
import pytest

from opencoti_build import files
from opencoti_build.artifacts import intoto, provenance
from opencoti_build.config import versioning
from opencoti_build.tree import upstream

from fat_support import both_halves_mm, half_entries, recorded_dependencies
from packaging_support import write_gguf
from scons_runs import MINI_TREE, PROJECT, compiled, scons

CHECKOUT = MINI_TREE / "llama.cpp"
OBJDIR = "out/o/checkout"
SERVER = f"{OBJDIR}/llama.cpp/tools/server/llama-server"
TAG = versioning.opencoti_tag(PROJECT / "vendors" / "llamafile" / "OPENCOTI_TAG")


def twin(path: Path) -> Path:
    return path.parent / ".aarch64" / path.name


def defined(obj: Path) -> set[str]:
    """The functions an object defines."""
    binary = lief.ELF.parse(str(obj))  # held: its symbols live as long as it does
    return {s.name for s in binary.symbols if s.is_function and s.shndx != 0}


@pytest.fixture(scope="module")
def built_checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    build = tmp_path_factory.mktemp("checkout")
    return build, scons(f"LLAMACPP={CHECKOUT}", build=build)


def test_every_tu_is_a_fat_object_of_the_checkout_and_nothing_of_llamafile(built_checkout) -> None:
    build, proc = built_checkout
    objects = compiled(proc)
    assert objects and all(o.startswith(str(build / OBJDIR) + "/") for o in objects)
    assert not any("/llamafile/" in o for o in objects)  # llamafile's own sources are not the checkout's
    assert f"{build / OBJDIR}/llama.cpp/tools/server/server.cpp.o" in objects
    for obj in map(Path, objects):
        assert lief.ELF.parse(str(obj)).header.machine_type == lief.ELF.ARCH.X86_64, obj
        assert lief.ELF.parse(str(twin(obj))).header.machine_type == lief.ELF.ARCH.AARCH64, obj
    # the server keeps its own main (no LLAMAFILE_TUI rename for llamafile's dispatcher)
    main = build / OBJDIR / "llama.cpp/tools/server/server.cpp.o"
    assert "main" in defined(main) and "main" in defined(twin(main))


def test_each_half_holds_its_own_architectures_kernels(built_checkout) -> None:
    build, _ = built_checkout
    wrappers = build / OBJDIR / "gen" / "ggml-cpu-arch"
    quants, repack = wrappers / "quants.c.o", wrappers / "repack.cpp.o"
    assert "ggml_cpu_arch_x86_kernels" in defined(quants) and "ggml_cpu_arch_arm_kernels" not in defined(quants)
    assert "ggml_cpu_arch_arm_kernels" in defined(twin(quants))
    assert "ggml_cpu_arch_x86_kernels" not in defined(twin(quants))
    # arch/arm alone has repack.cpp: its x86-64 half is an empty object
    assert defined(repack) == set() and "ggml_cpu_arch_arm_repack" in defined(twin(repack))


def test_both_halves_of_the_server_run(built_checkout) -> None:
    build, _ = built_checkout
    server = build / SERVER
    x86 = subprocess.run([str(server)], capture_output=True, text=True, timeout=60)
    arm = subprocess.run(["qemu-aarch64", f"{server}.aarch64.elf"], capture_output=True, text=True, timeout=60)
    assert x86.returncode == arm.returncode == 0, x86.stderr + arm.stderr
    assert x86.stdout.startswith("server: model=") and arm.stdout == x86.stdout


def test_the_wrappers_are_in_the_compile_database(built_checkout) -> None:
    build, _ = built_checkout
    entries = {Path(e["file"]).name: e for e in json.loads((build / "compile_commands.json").read_text())
               if "/ggml-cpu-arch/" in e["file"]}
    assert sorted(entries) == ["quants.c", "repack.cpp"]
    assert entries["quants.c"]["arguments"][0] == "gcc"


def test_every_tus_recorded_dependencies_cover_both_compilers_mm(built_checkout) -> None:
    build, _ = built_checkout
    objdir = build / OBJDIR
    mm = both_halves_mm(half_entries(f"LLAMACPP={CHECKOUT}", build=build, arch="x86_64", objdir=objdir),
                        half_entries(f"LLAMACPP={CHECKOUT}", build=build, arch="aarch64", objdir=objdir), CHECKOUT)
    assert len(mm) >= 20
    for obj, deps in mm.items():
        assert deps <= recorded_dependencies(build / "out", Path(obj)), obj
    # the quants wrapper: each half's kernels, and the header both include
    arch = CHECKOUT / "ggml/src/ggml-cpu/arch"
    assert {str(arch / "x86/quants.c"), str(arch / "arm/quants.c"), str(CHECKOUT / "ggml/src/ggml-cpu/ggml-cpu-impl.h")} \
        <= mm[str(objdir / "gen/ggml-cpu-arch/quants.c.o")]


def test_null_build_then_an_arm_kernel_edit_recompiles_its_wrapper_alone(tmp_path: Path) -> None:
    checkout = tmp_path / "llama.cpp"
    shutil.copytree(CHECKOUT, checkout)
    build = tmp_path / "b"
    scons(f"LLAMACPP={checkout}", "CACHE_DIR=", build=build)
    assert compiled(scons(f"LLAMACPP={checkout}", "CACHE_DIR=", build=build)) == []
    kernel = checkout / "ggml/src/ggml-cpu/arch/arm/quants.c"
    kernel.write_text(kernel.read_text() + "int ggml_cpu_arch_arm_edit(void) { return 1; }\n")
    obj = build / OBJDIR / "gen/ggml-cpu-arch/quants.c.o"
    assert compiled(scons(f"LLAMACPP={checkout}", "CACHE_DIR=", build=build)) == [str(obj)]
    assert "ggml_cpu_arch_arm_edit" in defined(twin(obj)) and "ggml_cpu_arch_arm_edit" not in defined(obj)


def test_compile_file_of_a_kernel_builds_its_wrappers_fat_object_alone(tmp_path: Path) -> None:
    kernel = CHECKOUT / "ggml/src/ggml-cpu/arch/arm/quants.c"
    build = tmp_path / "b"
    proc = scons("compile", f"FILE={kernel}", f"LLAMACPP={CHECKOUT}", "CACHE_DIR=", build=build)
    assert compiled(proc) == [str(build / OBJDIR / "gen/ggml-cpu-arch/quants.c.o")]


def test_package_from_a_checkout_writes_both_artifacts_that_verify(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "tiny.gguf")
    proc = scons("package", "verify", f"LLAMACPP={CHECKOUT}", f"MODEL={model}", "ARCH=x86_64", build=tmp_path / "b")
    version = upstream.artifact_version(str(CHECKOUT))
    assert version == "llama.cpp-0.25.3"
    dist = tmp_path / "b" / "dist" / "llamafile"
    bare, embedder = f"opencoti-llamafile-{version}-{TAG}-x86_64.llamafile", f"opencoti-embedder-{version}-x86_64.llamafile"
    assert sorted(p.name for p in dist.iterdir()) == sorted(
        name + suffix for name in (bare, embedder) for suffix in ("", ".MANIFEST.json", ".cdx.json", ".intoto.jsonl"))
    manifest = json.loads((dist / (bare + ".MANIFEST.json")).read_text())
    assert manifest["llamafileVersion"] == version and manifest["dsos"] == [] and manifest["patches"] == []
    assert manifest["host"]["name"] == "llama-server" and not manifest["host"]["prebuilt"]
    assert f"OK: {dist / embedder} matches" in proc.stdout
    assert "tiny.gguf" in {e["name"] for e in json.loads((dist / (embedder + ".MANIFEST.json")).read_text())["entries"]}
    # the SBOM names the checkout's tree as its source (the fixture's has no LICENSE file, nor a git root of its own)
    sources = [c for c in json.loads((dist / (embedder + ".cdx.json")).read_text())["components"]
               if {"name": "opencoti:role", "value": "source"} in c["properties"]]
    assert [(c["name"], c["version"], c.get("licenses"), len(c["properties"])) for c in sources] == [
        ("llama.cpp", version, None, 1)]
    # the Statement names it by the dirHash of its files (in-toto's, as its spec computes it with coreutils), and
    # every toolchain by a digest: the stand-in by its compilers' bytes
    statement, _ = intoto.read_statement(dist / (embedder + provenance.STATEMENT_SUFFIX))
    dependencies = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert [n for n, d in dependencies.items() if not (d.get("uri") or d.get("digest"))] == []
    by_coreutils = subprocess.run("find . -type f | cut -c3- | LC_ALL=C sort | xargs -r sha256sum | sha256sum",
                                  shell=True, cwd=CHECKOUT, capture_output=True, text=True, check=True).stdout.split()[0]
    assert dependencies["source:llama.cpp"]["digest"] == {"dirHash": by_coreutils}
    compilers = dependencies["toolchain:cosmocc"]["annotations"]["files"]
    assert sorted(compilers) == ["aarch64-linux-gnu-g++", "aarch64-linux-gnu-gcc", "g++", "gcc"]
    assert compilers["gcc"] == files.sha256(os.path.realpath(shutil.which("gcc")))
    assert set(dependencies["toolchain:cosmocc"]["digest"]) == {"dirHash"}


@pytest.mark.parametrize("problem", ["not-a-checkout", "too-new"])
def test_a_bad_checkout_is_refused_in_one_line_and_nothing_is_written(tmp_path: Path, problem: str) -> None:
    checkout = tmp_path / "llama.cpp"
    if problem == "not-a-checkout":
        (checkout / "ggml").mkdir(parents=True)
        expected = f"scons: error: LLAMACPP={checkout} is not a llama.cpp checkout (no src/); " \
                   "point LLAMACPP= at the root of a llama.cpp tree"
    else:
        shutil.copytree(CHECKOUT, checkout)
        cmake = checkout / "ggml/CMakeLists.txt"
        cmake.write_text(cmake.read_text().replace("GGML_VERSION_MINOR 25", "GGML_VERSION_MINOR 31"))
        expected = (f"scons: error: LLAMACPP={checkout} is ggml 0.31.3, whose sources the description does not know "
                    f"(known to work: {upstream.known_versions()}); check out a known version")
    build = tmp_path / "b"
    proc = scons("package", f"LLAMACPP={checkout}", build=build, home=tmp_path / "home", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [expected]
    assert not build.exists()  # no BUILD_DIR, cache or dist: nothing


def test_gpu_backends_beside_a_checkouts_server_are_refused(tmp_path: Path) -> None:
    proc = scons("host", "cuda", f"LLAMACPP={CHECKOUT}", build=tmp_path / "b", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "scons: error: LLAMACPP= makes the host lane build llama.cpp's own llama-server, which loads no llamafile "
        "GPU DSO; build cuda in a run of its own (from SRC's llamafile tree)"]


def test_the_wrappers_preprocess_to_their_halfs_file_alone(tmp_path: Path) -> None:
    """The wrapper's #if chain, run by a real preprocessor (files stand for the kernels)."""
    for arch in ("x86", "arm"):
        (tmp_path / "ggml-cpu" / "arch" / arch).mkdir(parents=True)
        (tmp_path / "ggml-cpu" / "arch" / arch / "quants.c").write_text(f"int {arch}_kernels;\n")

    def preprocessed(wrapper: upstream.ArchWrapper, macro: str) -> subprocess.CompletedProcess[str]:
        source = tmp_path / "w.c"
        source.write_text(wrapper.text)
        return subprocess.run(["cpp", "-P", "-undef", *([f"-D{macro}"] if macro else []), "-iquote", str(tmp_path),
                               str(source)], capture_output=True, text=True)

    base = "llama.cpp/ggml/src/ggml-cpu/arch"
    both = upstream.ArchWrapper("quants.c", {"x86_64": f"{base}/x86/quants.c", "aarch64": f"{base}/arm/quants.c"})
    assert preprocessed(both, "__x86_64__").stdout.split() == ["int", "x86_kernels;"]
    assert preprocessed(both, "__aarch64__").stdout.split() == ["int", "arm_kernels;"]
    assert "a fat compile has an x86-64 and an aarch64 half only" in preprocessed(both, "").stderr
    arm_only = upstream.ArchWrapper("quants.c", {"aarch64": f"{base}/arm/quants.c"})
    assert preprocessed(arm_only, "__x86_64__").stdout.split() == []
    assert preprocessed(arm_only, "__aarch64__").stdout.split() == ["int", "arm_kernels;"]
