"""Part 1: the generated fat tree built by this project's SCons build and by make + ccache.

Both builds run the same fat driver (site_scons/cosmocc_shim) with the same flags. SCons's
compiles are its ``FATCC <obj> (+ .aarch64)`` lines; make's are the x86-64 ``-c`` lines the fat
driver writes to ``$BUILDLOG`` (one per fat compile; its ``-E`` lines are ccache's preprocessor runs).
"""
from __future__ import annotations

import os
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import fattree, makebuild
from bench.measure import Run, median, run
from opencoti_build.report import summary
from opencoti_build.tree import sources


@dataclass(frozen=True)
class Outcome:
    """One build: exit status, wall seconds, fat compiles, ccache preprocessor runs (make only)."""

    returncode: int
    wall: float
    compiles: int
    preprocesses: int = 0


def object_paths(tree: Path) -> list[str]:
    """The fat objects (x86-64 halves) both builds write under ``o/``, tree-relative."""
    out = []
    for package in sources.HOST_PROGRAM.packages:
        for rel in package.resolve(tree):
            out.append((rel[: -len(".gperf")] + ".c" if rel.endswith(".gperf") else rel) + ".o")
    return out


class SconsBuild:
    """``scons -j2 SRC=<tree>`` of ``project`` with every output under ``work``."""

    name = "scons"

    def __init__(self, project: Path, tree: Path, work: Path, jobs: int) -> None:
        self.tree, self.work, self.out = tree, work, work / "out"
        vars_ = {"SRC": tree, "BUILD_DIR": self.out, "CACHE_DIR": work / "cache", "DIST_DIR": work / "dist",
                 "BACKEND_DIST_DIR": work / "vendors-dist", "COMPILEDB": work / "compile_commands.json",
                 "COSMOCC": "stand-in"}  # measured with the stand-in, never a downloaded cosmocc
        self.argv = [sys.executable, "-m", "SCons", "-C", str(project), "-Q", f"-j{jobs}",
                     *(f"{k}={v}" for k, v in vars_.items())]

    def build(self) -> Outcome:
        result = run(self.argv)
        compiles = sum(1 for line in summary.unprefixed(result.output) if line.startswith("FATCC "))
        return Outcome(result.returncode, result.wall, compiles)

    def wipe_outputs(self) -> None:
        shutil.rmtree(self.out, ignore_errors=True)  # the .sconsign lives here too; the cache stays


class MakeBuild:
    """GNU make over the generated Makefile, ccache (private CCACHE_DIR) in front of the fat driver."""

    def __init__(self, project: Path, tree: Path, work: Path, jobs: int, recache: bool = False) -> None:
        self.name = "make+ccache (CCACHE_RECACHE=1)" if recache else "make+ccache"
        self.tree, self.work, self.out = tree, work, work / "out"
        self.log = work / "buildlog"
        makefile = work / "Makefile"
        if not makefile.exists():
            work.mkdir(parents=True, exist_ok=True)
            makefile.write_text(makebuild.makefile(project, tree, self.out, project / "site_scons" / "cosmocc_shim"))
        self.argv = ["make", "-f", str(makefile), f"-j{jobs}"]
        self.cwd: Path | None = None  # where make runs (the bench's own cwd unless set)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "CCACHE"))}
        self.env.update(CCACHE_DIR=str(work / "ccache"), BUILDLOG=str(self.log))
        if recache:
            self.env["CCACHE_RECACHE"] = "1"

    def build(self) -> Outcome:
        self.log.unlink(missing_ok=True)
        result: Run = run(self.argv, env=self.env, cwd=self.cwd)
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        compiles = sum(1 for line in lines if line.startswith(("gcc ", "g++ ")) and " -c " in line)
        preprocesses = sum(1 for line in lines if " -E " in line)
        return Outcome(result.returncode, result.wall, compiles, preprocesses)

    def wipe_outputs(self) -> None:
        shutil.rmtree(self.out, ignore_errors=True)  # objects and .d files; ccache's store stays


Builder = SconsBuild | MakeBuild


def cold(builds: list[Builder]) -> dict[str, dict]:
    """The first build of a fresh tree (empty caches): one run each."""
    return {b.name: asdict(b.build()) for b in builds}


EMPTY_SCONS = "scons -Q, empty SConstruct"


def null(builds: list[Builder], runs: int) -> dict:
    """Null builds, both builders per run (order alternating); ratios scons/make taken per run."""
    walls: dict[str, list[float]] = {b.name: [] for b in builds}
    compiles: dict[str, int] = {b.name: 0 for b in builds}
    ratios = []
    for i in range(runs):
        order = builds if i % 2 == 0 else builds[::-1]
        got = {b.name: b.build() for b in order}
        for name, o in got.items():
            walls[name].append(o.wall)
            compiles[name] += o.compiles
        ratios.append(got[builds[0].name].wall / got[builds[1].name].wall)
    return {"walls": walls, "medians": {k: median(v) for k, v in walls.items()}, "ratios": ratios,
            "ratio_median": median(ratios), "needless_compiles": compiles}


def floor(work: Path, runs: int, scons: SconsBuild) -> dict:
    """What any SCons null build pays before reading a SConscript (the interpreter, then SCons with an empty
    SConstruct), each run interleaved with this build's null build; ``ratios``: null build / empty scons -Q."""
    empty = work / "empty-sconstruct"
    empty.mkdir(parents=True, exist_ok=True)
    (empty / "SConstruct").write_text("")
    commands = {"python3 -c pass": [sys.executable, "-c", "pass"],
                "python3 -c 'import SCons.Script'": [sys.executable, "-c", "import SCons.Script"],
                EMPTY_SCONS: [sys.executable, "-m", "SCons", "-C", str(empty), "-Q"]}
    walls: dict[str, list[float]] = {k: [] for k in commands}
    null_walls, ratios = [], []
    for _ in range(runs):
        for name, argv in commands.items():
            walls[name].append(run(argv).wall)
        null_walls.append(scons.build().wall)
        ratios.append(null_walls[-1] / walls[EMPTY_SCONS][-1])
    return {"walls": walls, "medians": {k: median(v) for k, v in walls.items()}, "null_walls": null_walls,
            "ratios": ratios, "ratio_median": median(ratios)}


def header_edit(tree: fattree.FatTree, builds: list[Builder], runs: int, header: str = fattree.EDIT_HEADER) -> dict:
    """Edit one header (a new value each run), rebuild with each builder, then null-build again."""
    expected = len(tree.dependents(header))
    walls: dict[str, list[float]] = {b.name: [] for b in builds}
    compiles: dict[str, list[int]] = {b.name: [] for b in builds}
    after: dict[str, int] = {b.name: 0 for b in builds}
    preprocesses: dict[str, list[int]] = {b.name: [] for b in builds}
    ratios = []
    for i in range(runs):
        fattree.edit_header(tree, header, serial=1000 + i)
        got = {b.name: b.build() for b in builds}
        for name, o in got.items():
            walls[name].append(o.wall)
            compiles[name].append(o.compiles)
            preprocesses[name].append(o.preprocesses)
        ratios.append(got[builds[0].name].wall / got[builds[1].name].wall)
        for b in builds:
            after[b.name] += b.build().compiles
    return {"header": header, "expected_dependents": expected, "walls": walls,
            "medians": {k: median(v) for k, v in walls.items()}, "compiles": compiles,
            "preprocesses": preprocesses, "compiles_in_next_null_build": after, "ratios": ratios,
            "ratio_median": median(ratios)}


def _present(out: Path, objects: list[str]) -> tuple[int, int]:
    """(x86-64 objects, .aarch64 twins) present under ``out``/o."""
    x86 = sum(1 for o in objects if (out / "o" / o).is_file())
    twins = sum(1 for o in objects if (out / "o" / Path(o).parent / ".aarch64" / Path(o).name).is_file())
    return x86, twins


def warm_cache(tree: Path, builds: list[Builder], runs: dict[str, int]) -> dict:
    """Delete the output directory, keep the cache, build: time, compiles, objects and twins restored."""
    objects = object_paths(tree)
    results: dict[str, dict] = {}
    for b in builds:
        rows = []
        for _ in range(runs[b.name]):
            b.wipe_outputs()
            o = b.build()
            x86, twins = _present(b.out, objects)
            rows.append({**asdict(o), "x86_objects": x86, "aarch64_twins": twins})
        results[b.name] = {"runs": rows, "median_wall": median([r["wall"] for r in rows])}
    return {"objects": len(objects), "results": results}


def prepare(root: Path, n: int, project: Path, jobs: int) -> tuple[fattree.FatTree, list[Builder]]:
    """A fresh N-TU tree under ``root`` and its two builders (SCons first)."""
    shutil.rmtree(root, ignore_errors=True)
    tree = fattree.generate(root / "src", n)
    builds: list[Builder] = [SconsBuild(project, tree.root, root / "scons", jobs), MakeBuild(project, tree.root, root / "make", jobs)]
    return tree, builds
