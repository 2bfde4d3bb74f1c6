"""The package description selects, from upstream's real file list, exactly what upstream's BUILD.mk compiles.

tests/fixtures/upstream-llamafile-0.10.1-files.txt lists paths only (no upstream code): each line names the
package llamafile 0.10.1's BUILD.mk files compile that file into for o/$(MODE)/llamafile/llamafile, or '-'.
Laying it out as empty files and resolving every package must give the same sets.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from opencoti_build.tree import sources

from scons_runs import PROJECT

LISTING = PROJECT / "tests/fixtures/upstream-llamafile-0.10.1-files.txt"

# TUs per package in upstream's binary (llama.cpp/BUILD.mk, llamafile/BUILD.mk at 0.10.1).
UPSTREAM_COUNTS = {"ggml": 23, "llama": 140, "common": 33, "mtmd": 31, "server": 8, "httplib": 1,
                   "llamafile": 75, "tinyblas": 21, "highlight": 91, "stb": 1}


def _listing() -> tuple[list[str], dict[str, set[str]]]:
    paths: list[str] = []
    expected: dict[str, set[str]] = defaultdict(set)
    for line in LISTING.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        package, path = line.split(" ", 1)
        paths.append(path)
        if package != "-":
            expected[package].add(path)
    return paths, expected


@pytest.fixture(scope="module")
def upstream_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream")
    for path in _listing()[0]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).touch()
    return root


def test_every_package_selects_exactly_upstreams_sources(upstream_tree: Path) -> None:
    expected = _listing()[1]
    assert {p.name for p in sources.HOST_PROGRAM.packages} == set(expected)
    for package in sources.HOST_PROGRAM.packages:
        got = set(package.resolve(upstream_tree))
        assert got == expected[package.name], (package.name, sorted(got ^ expected[package.name]))
    assert {name: len(paths) for name, paths in expected.items()} == UPSTREAM_COUNTS


def test_no_source_is_compiled_twice(upstream_tree: Path) -> None:
    selected = [s for p in sources.HOST_PROGRAM.packages for s in p.resolve(upstream_tree)]
    assert len(selected) == len(set(selected)) == sum(UPSTREAM_COUNTS.values())


def test_per_file_overrides_follow_upstream() -> None:
    ggml = f"{sources.LLAMA}/ggml/src"
    assert sources.GGML.file_flags(f"{ggml}/ggml-cpu/quants.c")[0] == ("-O3", "-mgcc")
    assert sources.GGML.file_flags(f"{ggml}/ggml-backend.cpp")[0] == ("-mgcc",)
    assert sources.GGML.file_flags(f"{ggml}/ggml-backend-reg.cpp")[0] == ("-Os",)
    assert sources.LLAMA_LIB.file_flags(f"{sources.LLAMA}/src/unicode-data.cpp")[0] == ("-mgcc",)
    assert sources.COMMON.file_flags(f"{sources.LLAMA}/common/log.cpp")[0] == ("-Os",)
    # every TinyBLAS x86 variant but the dispatcher and `unsupported` carries its ISA
    for variant, isa in (("amd_avx", "-Xx86_64-mavx"), ("amd_fma", "-Xx86_64-mfma"),
                         ("amd_avxvnni", "-Xx86_64-mavxvnni"), ("amd_zen4", "-Xx86_64-mavx512bf16")):
        for kind in ("sgemm", "mixmul"):
            arch = sources.TINYBLAS.file_flags(f"llamafile/tinyblas_cpu_{kind}_{variant}.cpp")[1]
            assert arch is not None and isa in arch, (kind, variant)
    assert sources.TINYBLAS.file_flags("llamafile/tinyblas_cpu_unsupported.cpp")[1] is None
    assert sources.TINYBLAS.file_flags("llamafile/tinyblas_cpu_mixmul_arm80.cpp")[1] is None


def test_defines_are_grouped_as_upstream_groups_them() -> None:
    assert "NDEBUG" in sources.LLAMA_LIB.defines and "NDEBUG" in sources.COMMON.defines
    assert "NDEBUG" not in sources.GGML.defines and "NDEBUG" not in sources.SERVER.defines
    assert sources.MTMD.defines == () and sources.HTTPLIB.defines == ()
    assert sources.LLAMAFILE.defines == ("LLAMAFILE_TUI", "COSMOCC=1")
    assert sources.LLAMAFILE.inherits == ("TARGET_ARCH",) and "CPPFLAGS" not in sources.TINYBLAS.inherits
    stamps = {"GGML_VERSION": "0.9.5", "GGML_COMMIT": "abcdef1", "LLAMA_VERSION": "x", "LLAMA_COMMIT": "x"}
    assert sources.GGML.stamp_defines(f"{sources.LLAMA}/ggml/src/ggml.c", stamps) == (
        'GGML_VERSION="0.9.5"', 'GGML_COMMIT="abcdef1"')
    assert sources.LLAMAFILE.stamp_defines("llamafile/metal.c", stamps)[0] == 'GGML_VERSION="0.9.5"'
    assert sources.LLAMAFILE.stamp_defines("llamafile/zip.c", stamps) == ()


def test_tree_stamps_read_the_tree_and_never_the_clock(tmp_path: Path) -> None:
    assert set(sources.tree_stamps(tmp_path).values()) == {"unknown"}
    cmake = tmp_path / sources.LLAMA / "ggml/CMakeLists.txt"
    cmake.parent.mkdir(parents=True)
    cmake.write_text("set(GGML_VERSION_MAJOR 0)\nset(GGML_VERSION_MINOR 9)\nset(GGML_VERSION_PATCH 5)\n")
    assert sources.tree_stamps(tmp_path)["GGML_VERSION"] == "0.9.5"
