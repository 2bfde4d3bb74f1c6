"""`opencoti-build inspect`'s readers on files laid out here: strings, pattern files, the patch series.

In-process checks of the core here; the real builds and tools: tests/integration/test_inspect.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from opencoti_build.artifacts import binary_report


def families(text: str) -> list[binary_report.Family]:
    return binary_report.parse_families(text, "test")


def test_ape_host_binary_counts_strings_only(tmp_path: Path) -> None:
    ape = tmp_path / "llamafile"
    ape.write_bytes(b"MZqFpD='\n\x00q6_0\x00turbo3\x00turbo3_tcq\x00turbo3x\x00dca-chunk-size\x00q6_0\x00")
    fams = families("host-kv strings q6_0|turbo[2348]|turbo[23]_tcq|dca-chunk-size\nq6_0 symbols q6_0\n")
    lines = binary_report.report(str(ape), fams)
    assert lines[1].startswith("format: APE")
    # distinct whole runs: 'turbo3x' is no match, the second q6_0 is the same string
    assert lines[-2:] == ["  host-kv          strings  4", "  q6_0             symbols  n/a (no ELF symbols; use a strings family)"]


def test_project_pattern_file_parses() -> None:
    names = [(f.name, f.method) for f in binary_report.load_families()]
    assert names[:4] == [("dca", "symbols"), ("turbo", "symbols"), ("tcq", "symbols"), ("q6_0", "symbols")]
    assert ("host-kv-types", "strings") in names


def test_bad_pattern_lines_are_named() -> None:
    with pytest.raises(ValueError, match=r"test:2: expected '<name> symbols\|strings <regex>'"):
        families("# comment\ndca nm dca_fused_case\n")
    with pytest.raises(ValueError, match=r"test:1: bad regex '\(unclosed'"):
        families("dca symbols (unclosed\n")


def test_series_shows_the_recorded_patch_chain(tmp_path: Path, capsys) -> None:
    record = tmp_path / "applied-series.json"
    assert binary_report.main(["--series", str(record)]) == 0
    assert f"series: no complete apply recorded at {record}" in capsys.readouterr().out
    record.write_text(json.dumps({
        "format": 1, "state": "applied", "source": "/src", "upstreamCommit": "abc123",
        "submodules": {"llama.cpp": "def456"},
        "patches": [{"name": "0001-slot-ctx.patch", "sha256": "f" * 64, "series": "opencoti"}],
        "files": {}, "stateSha256": "0" * 64,
    }))
    assert binary_report.main(["--series", str(record)]) == 0
    out = capsys.readouterr().out
    assert "upstream commit: abc123" in out and "submodule llama.cpp: def456" in out
    assert f"opencoti  0001-slot-ctx.patch  sha256 {'f' * 64}" in out
