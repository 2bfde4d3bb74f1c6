"""The comparison build: a GNU Makefile with cosmocc-style fat rules, running the SCons build's own commands.

What llamafile's make build plus the seed's patch 0007 does: one rule per fat object whose recipe
is ``ccache <fat driver> … -MMD -MF $@.d -c -o $@ $<``, ``-include`` of every dep file, each
archive made twice (x86-64 and its ``.aarch64/`` twin), one fat link. The compile commands are
taken verbatim from ``scons -n VERBOSE=1`` of the same tree into the same output directory, so
both builds run the same compiler commands whatever the package table says; archives and the link
follow the same table (``opencoti_build.tree.sources``), in the same order.
"""
from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from opencoti_build.cosmo.cosmo_toolchain import SHIM_DIR
from opencoti_build.report import summary
from opencoti_build.tree import sources

DRIVERS = ("/cosmocc", "/cosmoc++")


def _obj_rel(rel: str) -> str:
    return (rel[: -len(".gperf")] + ".c" if rel.endswith(".gperf") else rel) + ".o"


def _q(arg: str) -> str:
    return shlex.quote(arg).replace("$", "$$")


def scons_compile_commands(project: Path, tree: Path, build: Path) -> dict[str, list[str]]:
    """x86 object path -> the fat compile argv SCons would run for it (a dry run, nothing written)."""
    scratch = build.parent / (build.name + "-dry-run")
    argv = [sys.executable, "-m", "SCons", "-C", str(project), "-Q", "-n", "--cache-disable", "VERBOSE=1", "COSMOCC=stand-in",
            f"SRC={tree}", f"BUILD_DIR={build}", f"DIST_DIR={scratch}/dist", f"BACKEND_DIST_DIR={scratch}/vd",
            f"COMPILEDB={scratch}/compile_commands.json"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"scons -n failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    commands = {}
    for line in summary.unprefixed(proc.stdout):
        words = line.split(" ")  # the fat driver refuses any argument holding a space: split is exact
        if words[0].endswith(DRIVERS) and "-c" in words:
            commands[words[words.index("-o") + 1]] = words
    return commands


def makefile(project: Path, tree: Path, build: Path, shim: Path = SHIM_DIR) -> str:
    """The Makefile text building ``tree`` into ``build``/o with the commands SCons runs."""
    commands = scons_compile_commands(project, tree, build)
    objdir = build / "o"
    out = ["MAKEFLAGS += --no-builtin-rules", ".SUFFIXES:", ".SECONDARY:", "CCACHE ?= ccache",
           f"AR := /bin/sh {shim}/bin/ar.ape", f"CXX := {shim}/bin/cosmoc++", "", f"{objdir / sources.HOST_PROGRAM.output}:", ""]
    libs, deps = [], []
    for package in sources.HOST_PROGRAM.packages:
        rels = package.resolve(tree)
        if not rels:
            continue
        objs = []
        for rel in rels:
            obj = str(objdir / _obj_rel(rel))
            argv = commands[obj]
            source = argv[-1]
            if rel.endswith(".gperf"):
                out += [f"{source}: {tree / rel}", "\t@mkdir -p $(@D)", "\tgperf $< > $@", ""]
            at = argv.index("-c")
            argv = argv[:at] + ["-MMD", "-MF", obj + ".d"] + argv[at:]
            out += [f"{obj}: {source}", "\t@mkdir -p $(@D)", "\t$(CCACHE) " + " ".join(map(_q, argv)), ""]
            objs.append(obj)
        deps += [o + ".d" for o in objs]
        lib = objdir / "lib" / f"{package.name}.a"
        twin = lib.parent / ".aarch64" / lib.name
        libs.append(str(lib))
        out += [
            f"{lib}: {' '.join(objs)}",
            f"\t@mkdir -p {twin.parent}",
            f"\trm -f {lib} {twin}",
            f"\t$(AR) rcsD {lib} {' '.join(objs)}",
            f"\t$(AR) rcsD {twin} {' '.join(str(Path(o).parent / '.aarch64' / Path(o).name) for o in objs)}",
            "",
        ]
    program = sources.HOST_PROGRAM
    out += [
        f"{objdir / program.output}: {' '.join(libs)}",
        f"\t$(CXX) {' '.join(program.link_flags)} -o $@ -Wl,--start-group $^ -Wl,--end-group {' '.join(program.libs)}",
        "",
        f"-include {' '.join(deps)}",
        "",
    ]
    return "\n".join(out)
