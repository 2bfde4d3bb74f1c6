"""The fat lane on a real cosmocc (OPENCOTI_REAL_COSMOCC: a release unpacked, or one built from source), end to end.

The miniature tree: every object the real driver's own fat pair, the dependency files the driver writes covered by
what SCons' scanner recorded, both halves back from the cache, and a thin binary that is an APE running on both
architectures. A real llama.cpp (a private copy of the llama-cpp-python sdist's, over a persistent cache like the
rest of this tier): the embedder artifact started as ``sh ./artifact`` reads its ``.args`` and serves ``/embedding``
from its own ``/zip/`` model, its aarch64 half too (qemu-aarch64 through the toolchain's ``ape-aarch64.elf``), both
in agreement with the native lane; ``verify`` passes on it.

Skipped, in one line, where OPENCOTI_REAL_COSMOCC names no cosmocc; the llama.cpp part also where its cache is cold
(``--long`` builds it: about 80 minutes on 2 shared cores).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import lief
import pytest

from opencoti_build.cosmo import fatcc
from opencoti_build.formats.executables import APE_MAGIC
from opencoti_build.report import summary
from opencoti_build.tree import portcosmo, upstream

from fat_support import recorded_dependencies
from native_support import (
    BUILD_TIMEOUT_S,
    N_EMBD,
    PersistentBuild,
    native_server,
    private_checkout,
    sdist_llamacpp,
    served_embedding,
    write_tiny_llama,
)
from real_cosmocc import real_cosmocc, skip_line
from scons_runs import MINI_TREE, PROJECT, compiled, scons

PATCHABLE = "__patchable_function_entries"  # cosmocc's -fpatchable-function-entry, on every compile not at -Os
MACHINES = {"x86_64": lief.ELF.ARCH.X86_64, "aarch64": lief.ELF.ARCH.AARCH64}


@pytest.fixture(scope="module")
def cosmocc() -> Path:
    root = real_cosmocc()
    if root is None:
        pytest.skip(skip_line())
    return root


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory, cosmocc: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The miniature tree built cold with the real driver, its commands printed (VERBOSE=1)."""
    build = tmp_path_factory.mktemp("real-mini")
    return build, scons("-j2", f"SRC={MINI_TREE}", f"COSMOCC={cosmocc}", "VERBOSE=1", build=build, timeout=1800)


def fat_commands(proc: subprocess.CompletedProcess[str], cosmocc: Path) -> dict[Path, list[str]]:
    """x86-64 object -> the fat driver's command that compiled it (VERBOSE=1's first line of each compile, past its
    progress prefix; cosmocc
    refuses any argument with a space, so splitting at spaces gives the argv back)."""
    drivers = (str(cosmocc / "bin" / "cosmocc"), str(cosmocc / "bin" / "cosmoc++"))
    commands = {}
    for line in summary.unprefixed(proc.stdout):
        argv = line.split()
        if argv and argv[0] in drivers and "-c" in argv:
            commands[Path(argv[argv.index("-o") + 1])] = argv
    return commands


def test_every_object_is_the_real_drivers_fat_pair(mini: tuple[Path, subprocess.CompletedProcess[str]],
                                                    cosmocc: Path) -> None:
    build, proc = mini
    commands = fat_commands(proc, cosmocc)
    objects = {p for p in (build / "out" / "o").rglob("*.o") if ".aarch64" not in p.parts}
    assert len(commands) > 30 and set(commands) == objects  # every object came from the driver
    for obj, argv in commands.items():
        halves = {"x86_64": obj, "aarch64": Path(fatcc.twin(str(obj)))}
        for arch, half in halves.items():
            elf = lief.ELF.parse(str(half))
            assert elf is not None and elf.header.machine_type == MACHINES[arch], half
            assert elf.header.file_type == lief.ELF.Header.FILE_TYPE.REL, half
            code = any(s.size and s.has(lief.ELF.Section.FLAGS.EXECINSTR) for s in elf.sections)
            if code and "-Os" not in argv:  # the driver's own flags reached both compilers
                assert elf.has_section(PATCHABLE), f"{half}: not compiled by cosmocc (no {PATCHABLE})"


def test_the_dependency_files_the_driver_writes_are_covered_by_the_scanners_record(
        mini: tuple[Path, subprocess.CompletedProcess[str]], cosmocc: Path, tmp_path: Path) -> None:
    """Each compile run again with -MD -MF: both halves' dependency files (x.d and .aarch64/x.d, the driver's
    names) list nothing under the tree, besides the source, that SCons did not record for the object."""
    build, proc = mini
    for n, (obj, argv) in enumerate(sorted(fat_commands(proc, cosmocc).items())):
        out, dep = tmp_path / f"{n}/x.o", tmp_path / f"{n}/x.d"
        again = [*argv[: argv.index("-o")], "-o", str(out), *argv[argv.index("-o") + 2:], "-MD", "-MF", str(dep)]
        subprocess.run(again, check=True, capture_output=True, cwd=PROJECT, env={**os.environ, "TMPDIR": str(tmp_path)})
        listed = set()
        for half in (dep, Path(fatcc.twin(str(dep)))):
            words = half.read_text().replace("\\\n", " ").split(":", 1)[1].split()
            listed |= {str(Path(w).resolve()) for w in words}
        within = {p for p in listed if p.startswith(str(MINI_TREE) + "/")} - {str(Path(argv[-1]).resolve())}
        recorded = recorded_dependencies(build / "out", obj)
        assert within <= recorded, f"{obj}: the driver lists {sorted(within - recorded)}, which SCons did not record"


def test_the_cache_gives_back_both_halves_of_every_object(mini: tuple[Path, subprocess.CompletedProcess[str]],
                                                         cosmocc: Path, tmp_path: Path) -> None:
    build, proc = mini
    objects = {p.relative_to(build / "out"): p.read_bytes() for p in (build / "out" / "o").rglob("*.o")}
    again = tmp_path / "again"
    again.mkdir()
    shutil.copytree(build / "cache", again / "cache")
    rebuilt = scons("-j2", f"SRC={MINI_TREE}", f"COSMOCC={cosmocc}", build=again)
    assert compiled(rebuilt) == []
    assert {p.relative_to(again / "out"): p.read_bytes() for p in (again / "out" / "o").rglob("*.o")} == objects
    assert any(".aarch64" in p.parts for p in objects)


def test_the_thin_binary_is_an_ape_that_runs_on_both_architectures(
        mini: tuple[Path, subprocess.CompletedProcess[str]], cosmocc: Path) -> None:
    build, _ = mini
    binary = build / "out" / "o" / "llamafile" / "llamafile"
    assert binary.read_bytes()[: len(APE_MAGIC)] == APE_MAGIC
    x86 = subprocess.run(["sh", str(binary), "--version"], capture_output=True, text=True, timeout=60)
    arm = subprocess.run(["qemu-aarch64", str(cosmocc / "bin" / "ape-aarch64.elf"), str(binary), "--version"],
                         capture_output=True, text=True, timeout=300)
    assert x86.stdout.startswith("llamafile v") and arm.stdout == x86.stdout, (x86, arm)


@pytest.fixture(scope="module")
def embedder(real_fat: PersistentBuild, cosmocc: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`scons package verify LLAMACPP=<copy> MODEL=tiny.gguf` with the real driver: the embedder artifact."""
    checkout = private_checkout(real_fat.build)
    model = tmp_path_factory.mktemp("model") / "tiny.gguf"
    write_tiny_llama(model)
    proc = scons("-j2", "package", "verify", f"LLAMACPP={checkout}", f"MODEL={model}", f"COSMOCC={cosmocc}",
                 f"CACHE_DIR={real_fat.cache}", build=real_fat.build, timeout=BUILD_TIMEOUT_S)
    real_fat.mark_warm()
    dist = real_fat.build / "dist" / "llamafile"
    [artifact] = [p for p in dist.glob("opencoti-embedder-*.llamafile")]
    assert f"OK: {artifact} matches" in proc.stdout, proc.stdout
    return artifact


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_the_embedder_serves_its_own_zip_model_on_both_halves_as_the_native_lane_does(
        embedder: Path, cosmocc: Path, native_realtree: PersistentBuild, tmp_path: Path) -> None:
    assert embedder.read_bytes()[: len(APE_MAGIC)] == APE_MAGIC
    manifest = json.loads(Path(str(embedder) + ".MANIFEST.json").read_text())
    assert {"tiny.gguf", ".args"} <= {e["name"] for e in manifest["entries"]}
    model = tmp_path / "tiny.gguf"
    write_tiny_llama(model)
    native = served_embedding([str(native_server(native_realtree))], model, tmp_path / "native.log")
    # no -m: the artifact's .args says -m /zip/tiny.gguf
    x86 = served_embedding(["sh", str(embedder)], None, tmp_path / "x86_64.log")
    arm = served_embedding(["qemu-aarch64", str(cosmocc / "bin" / "ape-aarch64.elf"), str(embedder)], None,
                           tmp_path / "aarch64.log", startup_s=900)
    assert "/zip/tiny.gguf" in (tmp_path / "x86_64.log").read_text()
    assert len(native) == len(x86) == len(arm) == N_EMBD
    assert cosine(x86, native) >= 0.999 and cosine(arm, native) >= 0.999, (cosine(x86, native), cosine(arm, native))


def test_the_checkout_description_lowers_exactly_the_files_that_need_portcosmo() -> None:
    """Every file of the sdist's llama.cpp that switches over a cosmopolitan run-time constant, and no other, is in
    upstream.PORTCOSMO_SOURCES / PORTCOSMO_HEADERS (what a cosmocc without -fportcosmo could not compile)."""
    tree = sdist_llamacpp(download=False)
    if tree is None:
        pytest.skip("the llama-cpp-python 0.3.36 sdist is not cached (scripts/test --long downloads it)")
    needing = set()
    for path in tree.rglob("*"):
        if path.suffix in (".c", ".cc", ".cpp", ".h", ".hpp", ".inc") and path.is_file():
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
            if "case" in text and portcosmo.lower_switches(text, cxx=path.suffix != ".c") != text:
                needing.add(upstream.LLAMA_PREFIX + str(path.relative_to(tree)))
    assert needing == set(upstream.PORTCOSMO_SOURCES) | set(upstream.PORTCOSMO_HEADERS)
