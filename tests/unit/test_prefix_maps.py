"""opencoti_build.cosmo.prefix_maps: the one list of -ffile-prefix-map flags every compile and link takes.

In-process checks of the core here; the real builds and tools: tests/integration/test_prefix_maps.py.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from opencoti_build.cosmo.prefix_maps import gcc_flags, nvcc_flags, path_maps, prefix_maps, remap, renamed_twice


def test_checkout_src_and_build_dir_map_general_to_specific() -> None:
    maps = path_maps("/w/co", "/w/co/vendors/sources/llamafile", "/w/co/build")
    assert maps == [
        ("/w/co", "."),
        ("vendors/sources/llamafile/", "src/"),  # SCons names a file inside the checkout relative to it
        ("/w/co/vendors/sources/llamafile/", "src/"),
        ("/w/co/build/", "build/"),
    ]
    assert prefix_maps("/w/co", "/w/co/vendors/sources/llamafile", "/w/co/build") == gcc_flags(maps)
    assert gcc_flags(maps)[0] == "-ffile-prefix-map=/w/co=."


@pytest.mark.parametrize("path, mapped", [
    ("/w/co", "."),
    ("/w/co/site_scons/x.h", "./site_scons/x.h"),
    ("/w/co/vendors/sources/llamafile/llama.cpp/ggml/src/ggml.c", "src/llama.cpp/ggml/src/ggml.c"),
    ("vendors/sources/llamafile/llamafile/sgemm.cpp", "src/llamafile/sgemm.cpp"),
    ("/w/co/build/o/gen/build-info.cpp", "build/o/gen/build-info.cpp"),
    ("/usr/include/stdio.h", "/usr/include/stdio.h"),
])
def test_the_most_specific_map_names_a_path(path: str, mapped: str) -> None:
    assert remap(path, path_maps("/w/co", "vendors/sources/llamafile", "build")) == mapped


def test_a_tree_outside_the_checkout_and_a_build_dir_inside_src() -> None:
    maps = path_maps("/w/co", "/srv/tree", "/srv/tree/out")
    assert remap("/srv/tree/llama.cpp/src/llama.cpp", maps) == "src/llama.cpp/src/llama.cpp"
    assert remap("/srv/tree/out/o/gen/build-info.cpp", maps) == "build/o/gen/build-info.cpp"
    assert remap("/w/co/site_scons/x", maps) == "./site_scons/x"


def test_two_checkouts_give_the_same_names() -> None:
    for rel in ("llama.cpp/ggml/src/ggml.c", "o/x"):
        a = remap(f"/a/x/t/{rel}", path_maps("/a/x", "/a/x/t", "/a/x/t/o"))
        b = remap(f"/bbbbbb/yy/t/{rel}", path_maps("/bbbbbb/yy", "/bbbbbb/yy/t", "/bbbbbb/yy/t/o"))
        assert a == b


def test_the_order_does_not_depend_on_the_paths_lengths() -> None:
    # The flags are part of every cache key: a checkout at a longer path than SRC must order them as one at a shorter path.
    short = [new for _, new in path_maps("/a", "/srv/tree", "/a/build")]
    long = [new for _, new in path_maps("/a/much/longer/checkout/path", "/srv/tree", "/a/much/longer/checkout/path/build")]
    assert short == long == [".", "src/", "build/"]


def test_llamacpp_maps_only_when_it_is_not_srcs_own() -> None:
    assert path_maps("/w/co", "/srv/tree", "/w/co/build", "/srv/tree/llama.cpp") == path_maps(
        "/w/co", "/srv/tree", "/w/co/build")
    maps = path_maps("/w/co", "/srv/tree", "/w/co/build", "/opt/llama")
    assert ("/opt/llama/", "src/llama.cpp/") in maps
    assert remap("/opt/llama/ggml/src/ggml.c", maps) == "src/llama.cpp/ggml/src/ggml.c"


def test_a_symlinked_tree_is_mapped_as_given_and_resolved(tmp_path: Path) -> None:
    real = tmp_path / "real-tree"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    maps = path_maps(str(tmp_path / "co"), str(link), None)
    assert (f"{link}/", "src/") in maps and (f"{real}/", "src/") in maps


def test_unmappable_paths_are_left_out() -> None:
    maps = path_maps("/w/co", "/srv/a=b", "/w/co/build")
    assert all("=" not in old for old, _ in maps)
    assert nvcc_flags(path_maps("/w/co", "/srv/a,b", "/w/co/build")) == [
        "-Xcompiler=-ffile-prefix-map=/w/co=.", "-Xcompiler=-ffile-prefix-map=/w/co/build/=build/"]
    assert path_maps("/", None, None) == []  # never map the root itself


def test_the_preprocessor_spelling_is_one_word_more_per_map() -> None:
    maps = path_maps("/w/co", "/srv/a,b", "/w/co/build")
    assert gcc_flags(maps, via_preprocessor=True) == [
        "-Xpreprocessor", "-ffile-prefix-map=/w/co=.", "-Xpreprocessor", "-ffile-prefix-map=/srv/a,b/=src/",
        "-Xpreprocessor", "-ffile-prefix-map=/w/co/build/=build/"]
    assert nvcc_flags(maps, via_preprocessor=True) == [
        "-Xcompiler=-Xpreprocessor,-ffile-prefix-map=/w/co=.",
        "-Xcompiler=-Xpreprocessor,-ffile-prefix-map=/w/co/build/=build/"]


@pytest.mark.parametrize("path, mapped", [
    ("b/o/gen/build-info.cpp", "build/o/gen/build-info.cpp"),
    ("build/o/gen", "build/o/gen"),  # gcc maps a header's directory again: the mapped name stays as it is
    ("backends/cuda/x.cu", "backends/cuda/x.cu"),  # a name that merely starts like BUILD_DIR
    ("/w/co/backends/cuda/x.cu", "./backends/cuda/x.cu"),
    ("/w/co/b/o/gen/t.c", "build/o/gen/t.c"),
    ("/w/src-other/x.c", "/w/src-other/x.c"),  # a sibling of SRC whose name starts like it
])
def test_a_short_relative_build_dir_names_only_its_own_files(path: str, mapped: str) -> None:
    maps = path_maps("/w/co", "../src", "b")
    assert remap(path, maps) == mapped
    if not path.startswith("/"):  # what gcc does to a directory's name: a second pass changes nothing
        assert remap(remap(path, maps), maps) == mapped


def test_a_tree_the_debug_info_would_rename_twice_is_named(tmp_path: Path) -> None:
    co = tmp_path / "co"
    (co / "src" / "tree" / "llama.cpp").mkdir(parents=True)
    (co / "src" / "tree" / "tree").mkdir()
    assert renamed_twice(str(co), "/srv/t", "build/o") == "BUILD_DIR=build/o"  # its o/gen -> build/o/gen -> build/gen
    assert renamed_twice(str(co), "/srv/t", f"{co}/build/o/") == f"BUILD_DIR={co}/build/o/"
    assert renamed_twice(str(co), "src/tree", "build") == "SRC=src/tree"  # it holds a tree/ of its own
    for build_dir in ("build", "b", "build/cuda", "build-o", "/elsewhere/build/o"):
        assert renamed_twice(str(co), "/srv/t", build_dir) is None
    assert renamed_twice(str(co), "src/x", "build") is None  # no x/ inside src/x
