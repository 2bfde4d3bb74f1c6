"""The benchmark runner's parts that need no build: the generated tree, edits, tables, parsed counters.

In-process checks of the core here; the real builds and tools: tests/integration/test_bench.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import fattree, realbench, reapibench, report, sharedbench  # noqa: E402
from opencoti_build.tree import sources  # noqa: E402


def test_generated_tree_is_built_from_the_package_table(tmp_path: Path) -> None:
    tree = fattree.generate(tmp_path / "src", 40)
    resolved = sorted(s for p in sources.HOST_PROGRAM.packages for s in p.resolve(tree.root))
    assert resolved == sorted(tree.tus) and len(tree.tus) == 40
    assert fattree.MAIN_TU in tree.tus
    assert (tree.root / fattree.VERSION_H).is_file()


def test_header_edit_changes_only_that_header(tmp_path: Path) -> None:
    tree = fattree.generate(tmp_path / "src", 40)
    header = tree.root / fattree.EDIT_HEADER
    before = header.read_text()
    fattree.edit_header(tree, fattree.EDIT_HEADER, serial=7)
    assert header.read_text() != before and "= 7;" in header.read_text()


def test_real_tree_copy_compiles_models_one_by_one(tmp_path: Path) -> None:
    (tmp_path / "src" / "src").mkdir(parents=True)
    (tmp_path / "src" / "src" / "CMakeLists.txt").write_text("set_target_properties(llama PROPERTIES\n    UNITY_BUILD ON\n)\n")
    copy = realbench.scratch_copy(tmp_path / "src", tmp_path / "copy")
    assert "UNITY_BUILD OFF" in (copy / "src" / "CMakeLists.txt").read_text()
    assert "UNITY_BUILD ON" in (tmp_path / "src" / "src" / "CMakeLists.txt").read_text()  # the source is untouched
    (tmp_path / "src" / "src" / "CMakeLists.txt").write_text("add_library(llama)\n")
    with pytest.raises(SystemExit, match="has no `UNITY_BUILD ON`"):
        realbench.scratch_copy(tmp_path / "src", tmp_path / "copy")


def test_ninja_compiles_are_counted_from_its_progress_lines() -> None:
    output = ("ninja: Entering directory `b'\n[1/4] Building C object ggml/src/ggml.c.o\n"
              "[2/4] Building CXX object src/llama.cpp.o\n[3/4] Linking CXX shared library bin/libllama.so\n"
              "[4/4] Generating build details from Git\n")
    assert realbench.ninja_compiles(output) == 2


def test_real_tree_rows_not_measured_are_kept_with_the_commit_they_came_from(tmp_path: Path) -> None:
    from bench import run

    previous = tmp_path / "benchmarks.json"
    previous.write_text(json.dumps({"realtree": {"cold": {"ratios": [1.0]}, "null": {"ratios": [30.0]},
                                                 "leaf_edit": {"ratios": [9.0]},
                                                 "measured_at": dict.fromkeys(("cold", "null", "leaf_edit"), "old")}}))
    real = run._keep_rows(previous, {"tree": "t", "leaf_edit": {"ratios": [4.0]}}, ("leaf_edit",), "new")
    assert real["leaf_edit"] == {"ratios": [4.0]} and real["cold"] == {"ratios": [1.0]} and real["null"]["ratios"] == [30.0]
    assert real["measured_at"] == {"cold": "old", "null": "old", "leaf_edit": "new"}


def test_a_command_run_again_is_listed_once_as_the_latest(tmp_path: Path) -> None:
    from bench import run

    previous = tmp_path / "benchmarks.json"
    previous.write_text(json.dumps({"fat": {"x": 1}, "packaging": [], "commits": {"fat": "a", "package": "a"},
                                    "commands": ["run --parts package", "run --parts fat"]}))
    merged = run._merge(previous, {"packaging": [1], "commits": {"package": "b"}, "command": "run --parts package"},
                        {"package"})
    assert merged["commands"] == ["run --parts fat", "run --parts package"]
    assert merged["fat"] == {"x": 1} and merged["packaging"] == [1] and merged["commits"] == {"fat": "a", "package": "b"}


def test_shared_part_reads_the_remote_tier_of_the_cache_line() -> None:
    output = ("FATCC o/a.c.o (+ .aarch64)\n"
              "cache: local 0 hits / 28 misses / 0 corrupt / 58 pushed; redis://127.0.0.1:6400 58 hits / 0 misses / "
              "0 corrupt / 0 pushed\n0 compiled, 28 from cache, 0 up to date in 2.2 s\n")
    got = sharedbench.tiers(output)
    assert got["redis://127.0.0.1:6400"] == {"hits": 58, "misses": 0, "corrupt": 0, "pushed": 0}
    assert got["local"] == {"hits": 0, "misses": 28, "corrupt": 0, "pushed": 58}
    assert sharedbench.tiers("0 compiled, 0 from cache, 3 up to date in 0.1 s\n") == {}


def test_shared_part_reads_ccache_print_stats() -> None:
    text = "cache_miss\t0\ndirect_cache_hit\t19\nremote_storage_hit\t19\nstats_updated_timestamp\t1764567000\nodd line\n"
    stats = sharedbench.ccache_stats(text)
    assert stats["remote_storage_hit"] == 19 and stats["direct_cache_hit"] == 19 and stats["cache_miss"] == 0
    assert "odd line" not in stats


def test_shared_part_compares_outputs_with_checkout_a() -> None:
    a = {"x.o": "1", ".aarch64/x.o": "2", "lib/x.a": "3", "llamafile/llamafile": "4"}
    assert sharedbench.compare(a, dict(a)) == {"compared": 4, "identical": 4, "differing": [], "missing": 0}
    got = sharedbench.compare(a, {"x.o": "1", "lib/x.a": "9"})
    assert got == {"compared": 2, "identical": 1, "differing": ["lib/x.a"], "missing": 2}


def _shared_run(wall: float, rc: int, twins: int, **extra) -> dict:
    return {"returncode": rc, "wall": wall, "x86_objects": 19, "aarch64_twins": twins, "binary": rc == 0, **extra}


def test_shared_table_has_a_row_per_checkout_and_says_what_ccache_left_out() -> None:
    ccache = dict.fromkeys(sharedbench.CCACHE_COUNTERS, 0)
    same = {"compared": 58, "identical": 58, "differing": [], "missing": 0}
    partial = {"compared": 21, "identical": 21, "differing": [], "missing": 34}
    scons_b = [_shared_run(w, 0, 19, compiles=0, from_cache=28, remote_hits=58, against_a=same) for w in (2.0, 2.4, 2.2)]
    make_b = [_shared_run(w, 2, 0, compiles=0, ccache={**ccache, "remote_storage_hit": 19}, against_a=partial)
              for w in (0.5, 0.4, 0.6)]
    shared = {"tus": 17, "objects": 19, "redis": "7.0.15", "checkouts": {"A": "/w/a", "B": "/w/b-longer"},
              "ccache_base_dir": "/w",
              "cold": {"scons": _shared_run(6.0, 0, 19, compiles=19, from_cache=0, remote_hits=0),
                       "make+ccache": _shared_run(5.0, 0, 19, compiles=19, ccache=ccache)},
              "second": {"scons": {"runs": scons_b, "median_wall": 2.2}, "make+ccache": {"runs": make_b, "median_wall": 0.5}}}
    text = "\n".join(report._shared(shared))
    assert "`make -k` |" not in text and "With `make -k`" not in text  # results from before the row still render
    gen = {**partial, "differing": ["llamafile/highlight/gen00000.c", "llamafile/highlight/gen00001.c"]}
    shared["second"][sharedbench.KEEP_GOING] = {
        "runs": [_shared_run(1.5, 2, 0, compiles=2, ccache={**ccache, "remote_storage_hit": 17}, against_a=gen)],
        "median_wall": 1.5}
    lines = report._shared(shared)
    text = "\n".join(lines)
    assert lines[0] == "## Shared cache: a second checkout, empty local cache, warm Redis (17 TUs)"
    assert "| scons | B, empty local cache | 2.200 s (2.00, 2.40, 2.20) | 3/3 | 0, 0, 0 | 28 steps (58 Redis hits)" in text
    assert "| 19 | 19 | yes | 58/58, 58/58, 58/58 |" in text
    assert "| make+ccache | B', empty `CCACHE_DIR` | 0.500 s (0.50, 0.40, 0.60) | 0/3 |" in text
    assert "| 19 | 0 | no | 21/21 (34 of A's missing)," in text
    assert "scons 0.37×, make+ccache 0.10×" in text and "no `.aarch64/` twin came back" in text
    assert "| make+ccache | B', empty `CCACHE_DIR`, `make -k` | 1.500 s (1.50) | 0/1 | 2 | 17 remote hits |" in text
    assert "With `make -k` B' went on past the failed twin archives: 17 x86-64 objects from Redis, 2 fat compiles" in text
    assert "`llamafile/highlight/gen00000.c`" in text


def test_the_reapi_section_sets_b_from_buildgrid_beside_b_from_redis() -> None:
    same = {"compared": 58, "identical": 58, "differing": [], "missing": 0}
    redis = [_shared_run(w, 0, 19, compiles=0, from_cache=28, remote_hits=58, against_a=same) for w in (2.0, 2.4)]
    reapi = [_shared_run(w, 0, 19, compiles=0, from_cache=28, remote_hits=58, against_a=same) for w in (2.5, 3.0)]
    shared = {"tus": 17, "second": {"scons": {"runs": redis, "median_wall": 2.2}}}
    assert reapibench.report_lines(shared) == [] and reapibench.report_lines(None) == []  # recorded before REAPI
    shared["second"][reapibench.NAME] = {"runs": reapi, "median_wall": 2.75}
    shared["reapi"] = {"buildgrid": "0.9.1", "populate": {"returncode": 0, "wall": 1.25, "pushed": 58},
                       "usage": {"blobs": 120, "bytes": 3 << 20}}
    lines = reapibench.report_lines(shared)
    text = "\n".join(lines)
    assert lines[0] == "## Shared cache: the same second checkout from a REAPI cache (17 TUs)"
    assert "(58 targets pushed in 1.25 s, nothing compiled; 120 CAS blobs, 3.0 MiB)" in text
    assert "| Redis | 2.20 s (2.00, 2.40) | 2/2 | 0, 0 | 28 steps (58 hits), 28 steps (58 hits) | 58/58, 58/58 |" in text
    assert "| REAPI (BuildGrid 0.9.1) | 2.75 s (2.50, 3.00) | 2/2 |" in text and "median wall: 1.25×." in text

