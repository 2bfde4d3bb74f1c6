"""What a fat build recorded against what its compilers say: the dependencies SCons keeps for each object, the
headers each half's compiler reports, and the compile database of either half (COMPILEDB_ARCH)."""
from __future__ import annotations

import json
import pickle
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import SCons.dblite

from scons_runs import PROJECT, scons


def recorded_dependencies(build_dir: Path, obj: Path) -> set[str]:
    """The implicit dependencies SCons recorded for one object (from BUILD_DIR's .sconsign), resolved."""
    db = SCons.dblite.open(str(build_dir / ".sconsign"), "r")
    entry = pickle.loads(db[str(obj.parent)])[obj.name]
    return {str((PROJECT / p).resolve()) for p in entry.binfo.bimplicit}


def compiler_dependencies(entry: dict, flag: str, within: Path) -> set[str]:
    """The files gcc reports (``-MM`` or ``-M``) for a compile_commands entry, those under ``within``."""
    argv = entry["arguments"]
    cmd = argv[: argv.index("-c")] + [flag, entry["file"]]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=entry["directory"], check=True).stdout
    words = out.replace("\\\n", " ").split(":", 1)[1].split()
    paths = {str(Path(entry["directory"], w).resolve()) for w in words[1:]}
    return {p for p in paths if p.startswith(str(within.resolve()) + "/")}


def half_entries(*args: str, build: Path, arch: str, objdir: Path) -> list[dict]:
    """compile_commands.json entries of one half (``arch``) of the fat objects under ``objdir``, from a
    ``scons compiledb`` run with ``args`` over ``build`` (the database goes to its own file per half)."""
    database = build / f"compile_commands.{arch}.json"
    scons(*args, "compiledb", f"COMPILEDB_ARCH={arch}", f"COMPILEDB={database}", build=build, timeout=1800)
    entries = json.loads(database.read_text())
    return [e for e in entries if e["output"].startswith(str(objdir) + "/")]


def both_halves_mm(x86: list[dict], arm: list[dict], within: Path) -> dict[str, set[str]]:
    """Object -> the union of what the x86-64 and the aarch64 compiler report with ``-MM`` (under ``within``), over
    every entry, run on every core."""
    by_output = {e["output"]: e for e in arm}
    assert sorted(by_output) == sorted(e["output"] for e in x86), "the halves' databases name other objects"
    with ThreadPoolExecutor() as pool:
        x86_deps = dict(zip([e["output"] for e in x86], pool.map(lambda e: compiler_dependencies(e, "-MM", within), x86)))
        arm_deps = dict(zip([e["output"] for e in x86],
                            pool.map(lambda e: compiler_dependencies(by_output[e["output"]], "-MM", within), x86)))
    return {out: x86_deps[out] | arm_deps[out] for out in x86_deps}
