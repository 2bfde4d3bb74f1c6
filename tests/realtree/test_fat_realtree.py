"""`scons LLAMACPP=DIR` on a real llama.cpp nobody here wrote: llama.cpp's own llama-server, fat, from (a private
copy of) the llama-cpp-python sdist's tree, each half run and compared with the native lane's server.

The real-tree tier (tests/realtree/conftest.py): run where the persistent caches are warm, or with ``--long``.
Objects go through a persistent CacheDir (``OPENCOTI_FAT_CACHE``, default ~/.cache/opencoti/fat-cache) from a fixed
output directory (``OPENCOTI_FAT_BUILD``, default ~/.cache/opencoti/fat-realtree), where the copy of the tree lives
too (the header-edit test edits it, and puts it back).
"""
from __future__ import annotations

import math
import secrets
import subprocess
from pathlib import Path

import pytest

from fat_support import both_halves_mm, half_entries, recorded_dependencies
from native_support import (
    BUILD_TIMEOUT_S,
    N_EMBD,
    PersistentBuild,
    native_server,
    private_checkout,
    served_embedding,
    write_tiny_llama,
)
from scons_runs import compiled, scons

# A header of ggml-cpu that both architectures' kernels include (arch/*/quants.c), and a few generic TUs as well.
EDITED_HEADER = "ggml/src/ggml-cpu/quants.h"
OBJDIR = Path("out/o/checkout")
SERVER = OBJDIR / "llama.cpp/tools/server/llama-server"


def fat_build(persistent: PersistentBuild, checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return scons("-j2", f"LLAMACPP={checkout}", f"CACHE_DIR={persistent.cache}", *args, build=persistent.build,
                 timeout=BUILD_TIMEOUT_S)


@pytest.fixture(scope="module")
def fat_checkout(fat_realtree: PersistentBuild) -> Path:
    """The copy of the tree, built (or found current): both halves of llama-server. --cache-populate pushes what is
    current too: an output that an earlier version of this project built is current for SCons, yet the cache may
    lack it under this version's keys (they changed with the key or entry format), and the header-edit test
    reverts its edit expecting the cache to hold the original objects."""
    checkout = private_checkout(fat_realtree.build, edited=(EDITED_HEADER,))
    fat_build(fat_realtree, checkout, "--cache-populate")
    fat_realtree.mark_warm()
    return checkout


@pytest.fixture(scope="module")
def mm_dependencies(fat_realtree: PersistentBuild, fat_checkout: Path) -> dict[str, set[str]]:
    """Every fat object -> what the x86-64 and the aarch64 compiler report with -MM, within the tree."""
    objdir = fat_realtree.build / OBJDIR
    args = (f"LLAMACPP={fat_checkout}", f"CACHE_DIR={fat_realtree.cache}")
    return both_halves_mm(half_entries(*args, build=fat_realtree.build, arch="x86_64", objdir=objdir),
                          half_entries(*args, build=fat_realtree.build, arch="aarch64", objdir=objdir), fat_checkout)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def test_both_halves_serve_embeddings_that_agree_with_the_native_server(
        tmp_path: Path, fat_realtree: PersistentBuild, fat_checkout: Path, native_realtree: PersistentBuild) -> None:
    server = fat_realtree.build / SERVER
    model = tmp_path / "tiny-llama.gguf"
    write_tiny_llama(model)
    native = served_embedding([str(native_server(native_realtree))], model, tmp_path / "native.log")
    x86 = served_embedding([str(server)], model, tmp_path / "x86_64.log")
    # qemu-user runs the aarch64 half here: slower to start, same answers
    arm = served_embedding(["qemu-aarch64", f"{server}.aarch64.elf"], model, tmp_path / "aarch64.log", startup_s=600)
    assert len(native) == len(x86) == len(arm) == N_EMBD
    assert cosine(x86, native) >= 0.999 and cosine(arm, native) >= 0.999, (cosine(x86, native), cosine(arm, native))


def test_every_tus_recorded_dependencies_cover_both_compilers_mm(fat_realtree: PersistentBuild,
                                                                  mm_dependencies: dict[str, set[str]]) -> None:
    assert len(mm_dependencies) >= 300  # every TU, not a sample
    uncovered = {obj: sorted(deps - recorded_dependencies(fat_realtree.build / "out", Path(obj)))
                 for obj, deps in mm_dependencies.items()}
    assert {obj: missing for obj, missing in uncovered.items() if missing} == {}


def test_a_warm_rebuild_compiles_nothing_and_a_header_edit_exactly_its_mm_dependents(
        fat_realtree: PersistentBuild, fat_checkout: Path, mm_dependencies: dict[str, set[str]]) -> None:
    assert compiled(fat_build(fat_realtree, fat_checkout)) == []
    header = fat_checkout / EDITED_HEADER
    dependents = sorted(obj for obj, deps in mm_dependencies.items() if str(header) in deps)
    wrapper = str(fat_realtree.build / OBJDIR / "gen/ggml-cpu-arch/quants.c.o")
    assert wrapper in dependents and len(dependents) >= 3  # the per-architecture kernels and generic TUs
    original = header.read_bytes()
    try:
        # new code every run (a comment alone compiles nothing): the persistent cache holds what every earlier
        # run's edit compiled to
        header.write_bytes(original + f"\n#define OPENCOTI_EDIT_{secrets.token_hex(8)} 1\n".encode())
        assert compiled(fat_build(fat_realtree, fat_checkout)) == dependents  # each a fat compile: both halves
        for obj in map(Path, dependents):
            assert (obj.parent / ".aarch64" / obj.name).stat().st_mtime_ns >= header.stat().st_mtime_ns
    finally:
        header.write_bytes(original)
    assert compiled(fat_build(fat_realtree, fat_checkout)) == []  # back to the cached objects: restored, not compiled
