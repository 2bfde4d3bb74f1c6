"""Smoke test of the benchmark runner: a tiny tree through both builds, one run, a table written.

Asserts only on what the runner records (counts, files, structure), never on times.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import realbench  # noqa: E402

from scons_runs import PROJECT


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


@pytest.mark.parametrize("compiler, suffix", [("gcc", ".c"), ("g++", ".cpp")])
def test_a_real_tree_edit_lands_in_every_includers_object(tmp_path: Path, compiler: str, suffix: str) -> None:
    """Each edit gives objects no cache has seen, in C and C++ alike (ggml.h has both kinds of includer)."""
    (tmp_path / "h.h").write_text("#pragma once\nint f(void);\n")
    (tmp_path / f"tu{suffix}").write_text('#include "h.h"\nint f(void) { return 1; }\n')
    objects = []
    for serial in ("aa_1", "bb_1"):
        shutil.copy(tmp_path / "h.h", tmp_path / "before.h")
        realbench.append_edit(tmp_path, "h.h", serial)
        obj = tmp_path / f"{serial}.o"
        subprocess.run([compiler, "-O2", "-g", "-Wall", "-Werror", "-c", str(tmp_path / f"tu{suffix}"), "-o", str(obj)],
                       check=True)
        objects.append(obj.read_bytes())
        assert serial.encode() in objects[-1]
        shutil.copy(tmp_path / "before.h", tmp_path / "h.h")  # the k-th edit of another bench run
    assert objects[0] != objects[1]


@pytest.mark.skipif(shutil.which("ccache") is None or shutil.which("redis-server") is None,
                    reason="needs ccache and redis-server")
def test_runner_shared_part_on_a_tiny_tree(tmp_path: Path) -> None:
    pytest.importorskip("redis")
    docs = tmp_path / "docs"
    proc = subprocess.run(
        [sys.executable, str(PROJECT / "bench" / "run.py"), "--shared-tus", "17", "--runs", "1", "--parts", "shared",
         "--docs", str(docs), "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shared = json.loads((docs / "benchmarks.json").read_text())["shared"]
    (b,) = shared["second"]["scons"]["runs"]
    assert shared["cold"]["scons"]["compiles"] >= 17 and b["compiles"] == 0 and b["remote_hits"] > 0
    assert b["aarch64_twins"] == b["x86_objects"] == shared["objects"] and b["binary"]
    assert b["against_a"]["identical"] == b["against_a"]["compared"] > 2 * shared["objects"]
    assert b["against_a"]["missing"] == 0
    (m,) = shared["second"]["make+ccache"]["runs"]
    assert m["compiles"] == 0 and m["ccache"]["remote_storage_hit"] > 0 and m["aarch64_twins"] == 0
    assert "## Shared cache: a second checkout" in (docs / "benchmarks.md").read_text()


def test_the_real_tree_fat_part_on_the_fixtures_llamacpp(tmp_path: Path) -> None:
    """The realfat part over a small checkout (the fixture's llama.cpp): both lanes, every row, a section written."""
    from bench import realfatbench, report

    checkout = PROJECT / "tests" / "fixtures" / "llamafile-mini" / "llama.cpp"
    real = realfatbench.measure(checkout, PROJECT, tmp_path / "work", 2, 1, 1, lambda _: None,
                                leaf_header="src/llama-vocab.h")
    cold = real["cold"]["runs"]
    assert [r["returncode"] for r in cold["scons fat"] + cold["scons native"]] == [0, 0]
    # each lane's cold build compiles every object it leaves (no cache: private and empty)
    fat_tus, native_tus = real["translation_units"]["scons fat"], real["translation_units"]["scons native"]
    assert cold["scons fat"][0]["compiles"] == fat_tus > 0 and cold["scons native"][0]["compiles"] == native_tus > 0
    assert real["null"]["null_walls"] and len(real["null"]["ratios"]) == 1
    edit = real["leaf_edit"]["runs"]
    assert edit["scons fat"][0]["compiles"] == edit["scons native"][0]["compiles"] >= 1  # llama-vocab.h's includers
    assert all(real["servers_run"].values()), real["servers_run"]
    lines = report._realfat(real)
    assert lines[0].startswith("## 2b.") and any(line.startswith("| cold build") for line in lines)
