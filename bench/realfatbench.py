"""Part 2b: the real llama.cpp tree through the fat lane, `scons LLAMACPP=<copy>`, against the native lane.

Both build one scratch copy of the tree at the same -j, each with a private CacheDir under the work directory:

- the fat lane: ``scons -jN LLAMACPP=<copy> COSMOCC=stand-in``, llama.cpp's own llama-server, every TU compiled for
  x86-64 and for aarch64 (the stand-in driver runs both halves' compilers at once), both halves linked;
- the native lane: ``scons -jN native CPU_ONLY=1 LLAMACPP=<copy>``, one half, this machine's, the same sources;
- with a real cosmocc given (``--real-cosmocc DIR``), the fat lane again on it: ``COSMOCC=DIR``, whose halves are
  clang's or gcc's as each TU asks (``-mclang``/``-mgcc``), each object through ``fixupobj``, the link ``apelink``'s.

Rows: the cold build (what the second half costs), the null build against the SCons floor (an empty SConstruct,
run by run beside it), and an edit of one leaf header (a new constant each time, realbench.append_edit). Compiles
are the FATCC and NATIVECC step lines.
"""
from __future__ import annotations

import itertools
import secrets
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from bench import fatbench, realbench
from bench.measure import run

ROWS = ("cold", "null", "leaf_edit")


class SconsFat(realbench.SconsNative):
    """``scons -jN LLAMACPP=<copy>`` (the fat host lane) of ``project``, outputs and CacheDir under ``work``."""

    name = "scons fat"
    compile_line = "FATCC "

    def __init__(self, project: Path, tree: Path, work: Path, jobs: int, cosmocc: str = "stand-in") -> None:
        if cosmocc != "stand-in":
            self.name = "scons fat, real cosmocc"
        self.out, self.cache = work / "out", work / "cache"
        self.argv = [sys.executable, "-m", "SCons", "-C", str(project), "-Q", f"-j{jobs}", "host", f"COSMOCC={cosmocc}",
                     f"LLAMACPP={tree}", f"BUILD_DIR={self.out}", f"CACHE_DIR={self.cache}",
                     f"COMPILEDB={work / 'compile_commands.json'}"]
        self.server = self.out / "o" / "checkout" / "llama.cpp" / "tools" / "server" / "llama-server"


def measure(source: Path, project: Path, work: Path, jobs: int, runs: int, heavy_runs: int,
            log: Callable[[str], None], leaf_header: str = realbench.LEAF_HEADER, real_cosmocc: Path | None = None) -> dict:
    """The rows (``heavy_runs`` cold builds, ``runs`` of the others) over a scratch copy of ``source``; the ratios
    are the stand-in's fat lane against the native lane (a real cosmocc's build, when given, is a third column)."""
    tree = work / "llama.cpp"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(source, tree, symlinks=True)
    fat = SconsFat(project, tree, work / "fat", jobs)
    native = realbench.SconsNative(project, tree, work / "native", jobs)
    builds: list[realbench.Build] = [fat, native]
    real = SconsFat(project, tree, work / "real-fat", jobs, str(real_cosmocc)) if real_cosmocc else None
    if real is not None:
        builds.append(real)
    edits = (f"{secrets.token_hex(4)}_{i}" for i in itertools.count(1))

    def wipe_all(_: int) -> None:
        for b in builds:
            b.wipe_outputs(keep_cache=False)

    log(f"real tree, fat lane: {heavy_runs} cold build(s) each")
    results: dict = {"tree": str(source), "cold": realbench.series(builds, heavy_runs, wipe_all)}
    log(f"real tree, fat lane: {runs} null builds against the floor")
    results["null"] = fatbench.floor(work / "floor", runs, fat)
    log(f"real tree, fat lane: {runs} edits of {leaf_header} each")
    results["leaf_edit"] = realbench.series(builds, runs, lambda _: realbench.append_edit(tree, leaf_header, next(edits)))
    results["leaf_edit"]["header"] = leaf_header
    results["servers_run"] = {
        "scons fat (x86-64)": run([fat.server, "--version"]).returncode == 0,
        "scons fat (aarch64, qemu-aarch64)": run(["qemu-aarch64", f"{fat.server}.aarch64.elf", "--version"]).returncode == 0,
        native.name: run([native.server, "--version"]).returncode == 0,
    }
    if real is not None:
        results["servers_run"][f"{real.name} (x86-64, an APE)"] = run(["sh", real.server, "--version"]).returncode == 0
    results["translation_units"] = {
        fat.name: sum(1 for p in (fat.out / "o" / "checkout").rglob("*.o") if ".aarch64" not in p.parts),
        native.name: sum(1 for p in (native.out / "native" / "obj").rglob("*.o*") if p.suffix in (".o", ".os")),
    }
    if real is not None:
        results["translation_units"][real.name] = sum(
            1 for p in (real.out / "o" / "checkout").rglob("*.o") if ".aarch64" not in p.parts)
    return results
