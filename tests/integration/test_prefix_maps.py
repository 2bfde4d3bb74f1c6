"""opencoti_build.cosmo.prefix_maps: the one list of -ffile-prefix-map flags every compile and link takes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opencoti_build.cosmo.prefix_maps import gcc_flags, nvcc_flags, path_maps, prefix_maps

from scons_runs import PROJECT


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


@pytest.mark.parametrize("compiler, suffix", [
    ("gcc", ".c"), ("g++", ".cpp"), ("aarch64-linux-gnu-gcc", ".c"), ("/usr/local/cuda-13.0/bin/nvcc", ".cu")])
def test_the_preprocessor_spelling_gives_the_same_object_bytes(tmp_path: Path, compiler: str, suffix: str) -> None:
    """What CCWRAPPER=sccache runs (opencoti_scons/compile_maps.py) against what SCons signs: the same object."""
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
from opencoti_scons.compile_maps import compile_maps

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
    """opencoti_scons/compile_maps.py: SCons signs ``-ffile-prefix-map=…``; the command run behind sccache carries the
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


def test_a_short_relative_build_dir_gives_the_bytes_of_one_elsewhere_with_real_gcc(tmp_path: Path) -> None:
    """BUILD_DIR=b: gcc compares prefixes as strings and maps a header's directory twice, so a bare ``b=build``
    named the generated source's directory ``builduild/o/gen`` (the random-layouts soak test found it)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    objects = []
    for checkout, build_dir in ((tmp_path / "co", "b"), (tmp_path / "other" / "co", str(tmp_path / "out"))):
        checkout.mkdir(parents=True)
        gen = checkout / build_dir / "o" / "gen"
        gen.mkdir(parents=True)
        (gen / "g.h").write_text("static inline int twice(int x) { return 2 * x; }\n")
        (gen / "build-info.c").write_text('#include "g.h"\nconst char *where = __FILE__;\nint f(int x) { return twice(x); }\n')
        obj = gen / "build-info.c.o"
        named = (lambda path: os.path.relpath(path, checkout)) if build_dir == "b" else str  # as SCons names them
        argv = ["gcc", "-g", "-O0", *prefix_maps(str(checkout), str(tmp_path / "src"), build_dir),
                "-c", "-o", named(obj), named(gen / "build-info.c")]
        subprocess.run(argv, cwd=checkout, check=True)
        data = obj.read_bytes()
        assert b"build/o/gen" in data and b"builduild" not in data
        objects.append(data)
    assert objects[0] == objects[1]
