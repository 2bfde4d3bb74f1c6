"""opencoti_build.prefix_maps: the one list of -ffile-prefix-map flags every compile and link takes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROJECT
from opencoti_build.prefix_maps import gcc_flags, nvcc_flags, path_maps, prefix_maps, remap


def test_checkout_src_and_build_dir_map_general_to_specific() -> None:
    maps = path_maps("/w/co", "/w/co/vendors/sources/llamafile", "/w/co/build")
    assert maps == [
        ("/w/co", "."),
        ("vendors/sources/llamafile", "src"),  # SCons names a file inside the checkout relative to it
        ("/w/co/vendors/sources/llamafile", "src"),
        ("/w/co/build", "build"),
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
    assert short == long == [".", "src", "build"]


def test_llamacpp_maps_only_when_it_is_not_srcs_own() -> None:
    assert path_maps("/w/co", "/srv/tree", "/w/co/build", "/srv/tree/llama.cpp") == path_maps(
        "/w/co", "/srv/tree", "/w/co/build")
    maps = path_maps("/w/co", "/srv/tree", "/w/co/build", "/opt/llama")
    assert ("/opt/llama", "src/llama.cpp") in maps
    assert remap("/opt/llama/ggml/src/ggml.c", maps) == "src/llama.cpp/ggml/src/ggml.c"


def test_a_symlinked_tree_is_mapped_as_given_and_resolved(tmp_path: Path) -> None:
    real = tmp_path / "real-tree"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    maps = path_maps(str(tmp_path / "co"), str(link), None)
    assert (str(link), "src") in maps and (str(real), "src") in maps


def test_unmappable_paths_are_left_out() -> None:
    maps = path_maps("/w/co", "/srv/a=b", "/w/co/build")
    assert all("=" not in old for old, _ in maps)
    assert nvcc_flags(path_maps("/w/co", "/srv/a,b", "/w/co/build")) == [
        "-Xcompiler=-ffile-prefix-map=/w/co=.", "-Xcompiler=-ffile-prefix-map=/w/co/build=build"]
    assert path_maps("/", None, None) == []  # never map the root itself


def test_the_same_bytes_from_two_checkouts_with_real_gcc(tmp_path: Path) -> None:
    """__FILE__, DWARF names and the compile directory: gcc -g from two checkout paths of different lengths."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    objects = []
    for checkout in (tmp_path / "a" / "x", tmp_path / "bbbbbbbbbb" / "yyyy"):
        src = checkout / "tree"
        (src / "include").mkdir(parents=True)
        (src / "include" / "h.h").write_text("static inline int twice(int x) { return 2 * x; }\n")
        (src / "f.c").write_text('#include "h.h"\nconst char *where = __FILE__;\nint f(int x) { return twice(x); }\n')
        obj = checkout / "build" / "f.o"
        obj.parent.mkdir()
        argv = ["gcc", "-g", "-O0", "-I", str(src / "include"), *prefix_maps(str(checkout), str(src), str(obj.parent)),
                "-c", "-o", str(obj), os.path.relpath(src / "f.c", checkout)]
        subprocess.run(argv, cwd=checkout, check=True)
        data = obj.read_bytes()
        assert str(checkout).encode() not in data
        assert b"src/f.c" in data
        objects.append(data)
    assert objects[0] == objects[1]


def test_the_preprocessor_spelling_is_one_word_more_per_map() -> None:
    maps = path_maps("/w/co", "/srv/a,b", "/w/co/build")
    assert gcc_flags(maps, via_preprocessor=True) == [
        "-Xpreprocessor", "-ffile-prefix-map=/w/co=.", "-Xpreprocessor", "-ffile-prefix-map=/srv/a,b=src",
        "-Xpreprocessor", "-ffile-prefix-map=/w/co/build=build"]
    assert nvcc_flags(maps, via_preprocessor=True) == [
        "-Xcompiler=-Xpreprocessor,-ffile-prefix-map=/w/co=.",
        "-Xcompiler=-Xpreprocessor,-ffile-prefix-map=/w/co/build=build"]


@pytest.mark.parametrize("compiler, suffix", [
    ("gcc", ".c"), ("g++", ".cpp"), ("aarch64-linux-gnu-gcc", ".c"), ("/usr/local/cuda-13.0/bin/nvcc", ".cu")])
def test_the_preprocessor_spelling_gives_the_same_object_bytes(tmp_path: Path, compiler: str, suffix: str) -> None:
    """What CCWRAPPER=sccache runs (site_tools/compile_maps.py) against what SCons signs: the same object."""
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} not installed")
    checkout = tmp_path / "checkout"
    src = checkout / "tree"
    src.mkdir(parents=True)
    (src / f"f{suffix}").write_text('const char *where = __FILE__;\nint f(int x) { return 3 * x; }\n')
    maps = path_maps(str(checkout), str(src), str(checkout / "build"))
    spell = nvcc_flags if compiler.endswith("nvcc") else gcc_flags
    objects = []
    obj = checkout / "f.o"  # one name: nvcc -objtemp names its intermediates, and so a symbol, after it
    for via in (False, True):
        debug = ["-Xcompiler=-g", "-objtemp"] if compiler.endswith("nvcc") else ["-g"]
        subprocess.run([compiler, *debug, *spell(maps, via), "-c", "-o", str(obj), str(src / f"f{suffix}")],
                       cwd=checkout, check=True, env={**os.environ, "TMPDIR": str(tmp_path)})
        objects.append(obj.read_bytes())
    assert str(checkout).encode() not in objects[0] and b"src/f" + suffix.encode() in objects[0]
    assert objects[0] == objects[1]


COMPILE_MAPS_SCONSTRUCT = """
import json
import SCons.Subst
from SCons.Script import Environment
from site_tools.compile_maps import compile_maps

result = {}
for via in (False, True):
    env = Environment(tools=[], X_PATH_MAPS=[("/w/co", "."), ("/srv/t", "src")], CCWRAPPER_MAPS_VIA_PREPROCESSOR=via,
                      _GCCMAPS=compile_maps("X_PATH_MAPS"), _NVCCMAPS=compile_maps("X_PATH_MAPS", nvcc=True),
                      COM="cc $_GCCMAPS -c", NVCOM="nvcc $_NVCCMAPS -c")
    for var in ("COM", "NVCOM"):
        for mode, name in ((SCons.Subst.SUBST_SIG, "signed"), (SCons.Subst.SUBST_CMD, "run")):
            result[f"{var} {name} {via}"] = [str(w) for w in env.subst_list("$" + var, mode)[0]]
json.dump(result, open("words.json", "w"))
"""


def test_compile_maps_are_signed_plain_and_run_as_the_launcher_wants(tmp_path: Path) -> None:
    """site_tools/compile_maps.py: SCons signs ``-ffile-prefix-map=…``; the command run behind sccache carries the
    same maps behind -Xpreprocessor, so switching CCWRAPPER changes no signature."""
    (tmp_path / "SConstruct").write_text(COMPILE_MAPS_SCONSTRUCT)
    subprocess.run([sys.executable, "-m", "SCons", "-C", str(tmp_path), "-Q", f"--site-dir={PROJECT / 'site_scons'}",
                    "."], check=True, capture_output=True)
    words = json.loads((tmp_path / "words.json").read_text())
    plain = ["cc", "-ffile-prefix-map=/w/co=.", "-ffile-prefix-map=/srv/t=src", "-c"]
    assert words["COM signed False"] == words["COM run False"] == words["COM signed True"] == plain
    assert words["COM run True"] == ["cc", "-Xpreprocessor", "-ffile-prefix-map=/w/co=.",
                                     "-Xpreprocessor", "-ffile-prefix-map=/srv/t=src", "-c"]
    assert words["NVCOM signed True"] == ["nvcc", "-Xcompiler=-ffile-prefix-map=/w/co=.",
                                          "-Xcompiler=-ffile-prefix-map=/srv/t=src", "-c"]
    assert words["NVCOM run True"] == ["nvcc", "-Xcompiler=-Xpreprocessor,-ffile-prefix-map=/w/co=.",
                                       "-Xcompiler=-Xpreprocessor,-ffile-prefix-map=/srv/t=src", "-c"]
