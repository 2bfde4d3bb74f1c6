"""Part 2: the real llama.cpp tree (the llama-cpp-python sdist's) built by `scons native` and by its own CMake + Ninja.

Both build a scratch copy of the tree (edits never touch the cache) at the same -j, for this machine, CPU only:

- this project: ``scons -jN native CPU_ONLY=1 LLAMACPP=<copy>`` with a private CacheDir;
- the tree's CMake, configured like the native lane compiles: ``RelWithDebInfo`` (``-O2 -g``, the description's
  optimisation and debug flags), ``GGML_NATIVE=OFF`` (the x86-64 instruction sets the lane also uses), ccache in
  front (``GGML_CCACHE``, upstream's default, with a private ``CCACHE_DIR``: the counterpart of CacheDir), and the
  unity build of ``src/models/`` switched off in the copy, so both compile the same translation units one by one.

Compiles are SCons's ``NATIVECC`` lines and Ninja's ``Building C/CXX object`` lines.
"""
from __future__ import annotations

import itertools
import os
import re
import secrets
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import fatbench
from bench.measure import median, run
from opencoti_build.report import summary

LEAF_HEADER = "src/llama-sampler.h"
CORE_HEADER = "ggml/include/ggml.h"
UNITY_LINE = "UNITY_BUILD ON"
CMAKE_FLAGS = ("-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DGGML_NATIVE=OFF", "-DGGML_CCACHE=ON",
               "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF")
_NINJA_COMPILE = re.compile(r"^\[\d+/\d+\] Building (C|CXX) object ", re.M)


def ninja_compiles(output: str) -> int:
    """Compiler runs in Ninja's progress lines (links and custom commands are not compiles)."""
    return len(_NINJA_COMPILE.findall(output))


@dataclass(frozen=True)
class Outcome:
    """One build: exit status, wall seconds (configure included where there is one), compiles, cache restores."""

    returncode: int
    wall: float
    compiles: int
    restored: int
    max_rss_kib: int


def scratch_copy(source: Path, dest: Path) -> Path:
    """A copy of the tree to edit, with upstream's unity build of src/models/ switched off (one TU per file)."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest, symlinks=True)
    cmakelists = dest / "src" / "CMakeLists.txt"
    text = cmakelists.read_text()
    if UNITY_LINE not in text:
        raise SystemExit(f"bench: {cmakelists} has no `{UNITY_LINE}`; update bench/realbench.py for this tree")
    cmakelists.write_text(text.replace(UNITY_LINE, "UNITY_BUILD OFF"))
    return dest


def append_edit(tree: Path, header: str, serial: str) -> None:
    """A change no cache can have seen, in every includer's object: a new constant at the end of the header.

    Not a comment: ccache's preprocessor mode hashes the preprocessed text, so a comment-only edit is a
    ccache hit (the first recorded run measured exactly that). Not an unused declaration either: it reaches
    the preprocessed text but not the code, and the objects it gave differed only in their debug info, alike
    for the k-th edit of every bench run, so a work directory kept from an earlier run restored the archive
    and the link from the build's cache (2 restores in each run of a leaf-edit row at e10eb65). A kept
    (``used``) constant named and valued by ``serial``, unique to the bench run, lands in every includer's
    object, as a real edit's code does.
    """
    with open(tree / header, "a") as f:
        f.write(f'__attribute__((used)) static const char opencoti_bench_edit_{serial}[] = "{serial}";\n')


class SconsNative:
    """``scons -jN native CPU_ONLY=1`` of ``project`` on the copy, outputs and CacheDir under ``work``."""

    name = "scons native"
    compile_line = "NATIVECC "  # the step line of one compile

    def __init__(self, project: Path, tree: Path, work: Path, jobs: int) -> None:
        self.out, self.cache = work / "out", work / "cache"
        self.argv = [sys.executable, "-m", "SCons", "-C", str(project), "-Q", f"-j{jobs}", "native", "CPU_ONLY=1", "COSMOCC=stand-in",
                     f"SRC={project / 'tests' / 'fixtures' / 'llamafile-mini'}", f"LLAMACPP={tree}",
                     f"BUILD_DIR={self.out}", f"CACHE_DIR={self.cache}", f"COMPILEDB={work / 'compile_commands.json'}"]
        self.server = self.out / "native" / "bin" / "llama-server"

    def build(self) -> Outcome:
        r = run(self.argv)
        lines = summary.unprefixed(r.output)
        return Outcome(r.returncode, r.wall, sum(1 for line in lines if line.startswith(self.compile_line)),
                       sum(1 for line in lines if line.startswith("CACHED ")), r.max_rss_kib)

    def wipe_outputs(self, keep_cache: bool) -> None:
        shutil.rmtree(self.out, ignore_errors=True)  # objects, .sconsign
        if not keep_cache:
            shutil.rmtree(self.cache, ignore_errors=True)


class CMakeNinja:
    """The tree's own CMake + Ninja (``ninja llama-server``), ccache with a private store under ``work``."""

    name = "CMake + Ninja"

    def __init__(self, tree: Path, work: Path, jobs: int) -> None:
        self.tree, self.out, self.ccache = tree, work / "build", work / "ccache"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CCACHE")}
        self.env["CCACHE_DIR"] = str(self.ccache)
        self.jobs = jobs
        self.server = self.out / "bin" / "llama-server"

    def _configure(self) -> tuple[int, float, int]:
        if (self.out / "build.ninja").exists():
            return 0, 0.0, 0
        r = run(["cmake", "-S", str(self.tree), "-B", str(self.out), *CMAKE_FLAGS], env=self.env)
        if r.returncode != 0:
            sys.stderr.write(r.output[-4000:])
        return r.returncode, r.wall, r.max_rss_kib

    def _ccache_hits(self) -> int:
        r = run(["ccache", "--print-stats"], env=self.env)
        stats = dict(line.split("\t", 1) for line in r.output.splitlines() if "\t" in line)
        return int(stats.get("direct_cache_hit", 0)) + int(stats.get("preprocessed_cache_hit", 0))

    def build(self) -> Outcome:
        run(["ccache", "--zero-stats"], env=self.env)
        rc, configure_wall, configure_rss = self._configure()
        if rc != 0:
            return Outcome(rc, configure_wall, 0, 0, configure_rss)
        r = run(["ninja", "-C", str(self.out), f"-j{self.jobs}", "llama-server"], env=self.env)
        return Outcome(r.returncode, configure_wall + r.wall, ninja_compiles(r.output),
                       self._ccache_hits(), max(configure_rss, r.max_rss_kib))

    def wipe_outputs(self, keep_cache: bool) -> None:
        shutil.rmtree(self.out, ignore_errors=True)  # build.ninja, .ninja_log/.ninja_deps, objects
        if not keep_cache:
            shutil.rmtree(self.ccache, ignore_errors=True)


Build = SconsNative | CMakeNinja


def series(builds: list[Build], runs: int, before_each=None) -> dict:
    """``runs`` rounds, both builds per round (order alternating), ``before_each(i)`` first; per-round ratios."""
    rows: dict[str, list[dict]] = {b.name: [] for b in builds}
    ratios = []
    for i in range(runs):
        if before_each:
            before_each(i)
        for b in (builds if i % 2 == 0 else builds[::-1]):
            rows[b.name].append(asdict(b.build()))
        ratios.append(rows[builds[0].name][-1]["wall"] / rows[builds[1].name][-1]["wall"])
    return {"runs": rows, "medians": {k: median([r["wall"] for r in v]) for k, v in rows.items()},
            "ratios": ratios, "ratio_median": median(ratios)}


ROWS = ("cold", "null", "leaf_edit", "core_edit", "warm_cache")


def measure(source: Path, project: Path, work: Path, jobs: int, runs: int, heavy_runs: int, log,
            rows: tuple[str, ...] = ROWS) -> dict:
    """The ``rows`` of: cold, null, leaf-header edit, ggml.h edit, warm-cache rebuild (``heavy_runs`` for the
    full-cost cold build and ggml.h edit). Without ``cold``, both builds are first brought up to date (not timed)."""
    tree = scratch_copy(source, work / "llama.cpp")
    builds: list[Build] = [SconsNative(project, tree, work / "scons", jobs), CMakeNinja(tree, work / "cmake", jobs)]
    edits = (f"{secrets.token_hex(4)}_{i}" for i in itertools.count(1))

    def wipe_all(_: int) -> None:
        for b in builds:
            b.wipe_outputs(keep_cache=False)

    def wipe_outputs(_: int) -> None:
        for b in builds:
            b.wipe_outputs(keep_cache=True)

    series = {
        "cold": (heavy_runs, "cold build(s)", wipe_all),
        "null": (runs, "null builds", None),
        "leaf_edit": (runs, f"edits of {LEAF_HEADER}", lambda _: append_edit(tree, LEAF_HEADER, next(edits))),
        "core_edit": (heavy_runs, f"edit(s) of {CORE_HEADER}", lambda _: append_edit(tree, CORE_HEADER, next(edits))),
        "warm_cache": (runs, "warm-cache rebuilds", wipe_outputs),
    }
    results: dict = {"tree": str(source), "cmake_flags": list(CMAKE_FLAGS)}
    if "cold" not in rows:
        log("real tree: bringing both builds up to date (not timed)")
        for b in builds:
            if b.build().returncode != 0:
                raise SystemExit(f"bench: the {b.name} build of {tree} failed")
    for key in ROWS:
        if key in rows:
            n, what, before_each = series[key]
            log(f"real tree: {n} {what} each")
            results[key] = series(builds, n, before_each)
    if "null" in rows:  # the target is set against what any SCons run pays, measured beside it
        log(f"real tree: {runs} null builds against the floor")
        results["null"]["floor"] = fatbench.floor(work / "floor", runs, builds[0])
    for key, header in (("leaf_edit", LEAF_HEADER), ("core_edit", CORE_HEADER)):
        if key in results:
            results[key]["header"] = header
    results["servers_run"] = {b.name: run([b.server, "--version"]).returncode == 0 for b in builds}
    results["translation_units"] = {
        builds[0].name: sum(1 for p in (builds[0].out / "native" / "obj").rglob("*.o*") if p.suffix in (".o", ".os")),
        builds[1].name: sum(1 for _ in builds[1].out.rglob("*.o")),
    }
    return results
