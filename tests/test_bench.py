"""Smoke test of the benchmark runner: a tiny tree through both builds, one run, a table written.

Asserts only on what the runner records (counts, files, structure), never on times.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROJECT

sys.path.insert(0, str(PROJECT))

from bench import fattree, realbench  # noqa: E402
from opencoti_build import sources  # noqa: E402


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


@pytest.mark.skipif(subprocess.run(["which", "ccache"], capture_output=True).returncode != 0, reason="needs ccache")
def test_runner_writes_tables_on_a_tiny_tree(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    proc = subprocess.run(
        [sys.executable, str(PROJECT / "bench" / "run.py"), "--tus", "17", "--growth", "--runs", "1",
         "--parts", "fat", "--docs", str(docs), "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((docs / "benchmarks.json").read_text())
    fat = results["fat"]
    assert fat["cold"]["scons"]["returncode"] == 0 and fat["cold"]["make+ccache"]["returncode"] == 0
    # 17 TUs (the smallest tree: a TU per required package plus the ggml core) and what gperf generates
    assert fat["cold"]["scons"]["compiles"] == fat["cold"]["make+ccache"]["compiles"] >= 17
    assert fat["null"]["needless_compiles"] == {"scons": 0, "make+ccache": 0}
    edit = fat["header_edit"]
    assert edit["compiles"]["scons"] == [edit["expected_dependents"]]
    assert edit["compiles"]["make+ccache"] == [edit["expected_dependents"]]
    scons_warm = fat["warm_cache"]["results"]["scons"]["runs"][0]
    assert scons_warm["aarch64_twins"] == fat["warm_cache"]["objects"] and scons_warm["compiles"] == 0
    table = (docs / "benchmarks.md").read_text()
    assert "### Null build" in table and "| scons |" in table and "| make+ccache |" in table
    assert set(fat["floor"]["medians"]) == {"python3 -c pass", "python3 -c 'import SCons.Script'",
                                            "scons -Q, empty SConstruct"}
    assert "| `scons -Q, empty SConstruct` |" in table


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
