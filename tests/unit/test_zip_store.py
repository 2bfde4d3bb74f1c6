"""The thin binary's own zip store (opencoti_build.tree.zip_sources): which tree files it holds, bad names.

In-process checks of the core here; the real builds and tools: tests/integration/test_zip_store.py.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from opencoti_build.tree import zip_sources

from scons_runs import MINI_TREE

METAL = "llama.cpp/ggml/src/ggml-metal/ggml-metal.metal"


def literals(tree: Path) -> set[str]:
    """Every "/zip/<dir>/<file>" in the tree's llamafile/*.c, read here independently of the module."""
    found = set()
    for source in tree.glob("llamafile/*.c"):
        found |= set(re.findall(r'"/zip/([\w.+-]+(?:/[\w.+-]+)+)"', source.read_text()))
    return found


def test_the_store_is_every_tree_file_the_sources_open_under_zip() -> None:
    paths = zip_sources.zip_paths(MINI_TREE)
    assert set(paths) == literals(MINI_TREE) and len(paths) == 14
    assert {METAL, "llama.cpp/ggml/src/ggml-metal/ggml-metal.m", "llama.cpp/ggml/include/ggml-metal.h"} <= set(paths)


def test_formats_bare_names_and_prefix_tests_are_not_files_and_a_missing_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "llamafile").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.h").write_text("x\n")
    (tmp_path / "llamafile" / "x.c").write_text(
        'const char *s[] = {"/zip/a/b.h", "/zip/%s", "/zip/", "/zip/ggml-cuda.so", "/zip/.args"};\n')
    assert zip_sources.zip_paths(tmp_path) == ["a/b.h"]
    (tmp_path / "llamafile" / "y.c").write_text('\n\nconst char *t = "/zip/a/gone.h";\n')
    with pytest.raises(zip_sources.ZipSourceError) as caught:
        zip_sources.zip_paths(tmp_path)
    assert str(caught.value).startswith("llamafile/y.c:3 opens /zip/a/gone.h, which is no file of the tree")
