"""Benchmarks: this build against make + ccache on a generated fat tree (one-shot and through the build server),
against CMake + Ninja on the real
llama.cpp tree, its fat lane on that tree against its native lane, packaging a large GGUF, and a second checkout built from a warm Redis and from a REAPI cache (against make + ccache's
remote storage).

    python3 bench/run.py            # medians of 5 everywhere (hours on 2 cores: 20 cold builds of the real tree)
    python3 bench/run.py --quick    # 3 runs, 1 cold build and 1 ggml.h edit of the real tree, growth to 840 TUs,
                                    # a 1 MiB and a 2 GiB model only
    python3 bench/run.py --parts realtree --heavy-runs 1   # one part; the others' last results are kept
    python3 bench/run.py --parts realfat --runs 3 --heavy-runs 1   # the fat lane on the real tree vs the native lane
    python3 bench/run.py --parts realfat --real-cosmocc DIR ...     # ...and the fat lane on a real cosmocc beside them
    python3 bench/run.py --parts shared --runs 3            # a second checkout, empty local cache, warm Redis
    python3 bench/run.py --parts server --runs 5            # the build server against make + ccache and one-shot scons

Writes docs/benchmarks.json (every measurement) and docs/benchmarks.md (tables, then bench/tuning.md appended;
`--report-only` rewrites the .md from the .json),
plus docs/benchmarks-null-growth.png when matplotlib is installed. Measures and records; never asserts on time.
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(PROJECT), str(PROJECT / "site_scons")]

from bench import fatbench, packbench, realbench, realfatbench, reapibench, report, serverbench, sharedbench  # noqa: E402
from bench.llamacpp_sdist import sdist_llamacpp  # noqa: E402
from bench.measure import machine, median  # noqa: E402

GIB = 1 << 30
PARTS = ("fat", "server", "realtree", "realfat", "package", "shared")


def _commit(project: Path) -> str:
    proc = subprocess.run(["git", "-C", str(project), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return proc.stdout.strip() or "not a git checkout"


def _log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def fat_part(project: Path, work: Path, tus: int, runs: int, warm_runs: int, recache_runs: int, jobs: int) -> dict:
    tree, builds = fatbench.prepare(work / f"fat-{tus}", tus, project, jobs)
    _log(f"{tus} TUs: cold builds")
    cold = fatbench.cold(builds)
    for name, outcome in cold.items():
        if outcome["returncode"] != 0:
            raise SystemExit(f"bench: the cold {name} build of the generated tree failed (rc {outcome['returncode']})")
    _log("null builds")
    null = fatbench.null(builds, runs)
    floor = fatbench.floor(work, runs, builds[0])
    _log("header edits")
    edit = fatbench.header_edit(tree, builds, runs)
    _log("warm-cache rebuilds")
    scons, make = builds
    recache = fatbench.MakeBuild(project, tree.root, make.work, jobs, recache=True)
    warm = fatbench.warm_cache(tree.root, [scons, make, recache],
                               {scons.name: warm_runs, make.name: warm_runs, recache.name: recache_runs})
    return {"tus": tus, "headers": tree.headers, "cold": cold, "null": null, "floor": floor, "header_edit": edit,
            "warm_cache": warm}


def growth_point(project: Path, work: Path, tus: int, runs: int, jobs: int) -> dict:
    _, builds = fatbench.prepare(work / f"fat-{tus}", tus, project, jobs)
    _log(f"{tus} TUs: cold builds, then null builds")
    cold = fatbench.cold(builds)
    null = fatbench.null(builds, runs)
    return {"tus": tus, "cold": cold, **null}


def _after_tables(results: dict) -> list[str]:
    """What follows the tables: the shared part's REAPI section (bench/reapibench.py), then the hand-written tuning
    record."""
    return reapibench.report_lines(results.get("shared")) + [(PROJECT / "bench" / "tuning.md").read_text()]


def _merge(previous: Path, results: dict, parts: set[str]) -> dict:
    """Keep the parts this run did not measure from the previous results (one table, several runs)."""
    if parts >= set(PARTS) or not previous.exists():
        results["commands"] = [results.pop("command")]
        return results
    old = json.loads(previous.read_text())
    kept = {k: old[k] for k in ("fat", "growth", "server", "realtree", "realfat", "packaging", "shared")
            if k in old and k not in results}
    commits = {**old.get("commits", {}), **results.pop("commits")}
    command = results.pop("command")  # a command run again moves to the end: the list reproduces the record once
    commands = [c for c in old.get("commands", []) if c != command] + [command]
    return {**results, **kept, "commits": commits, "commands": commands}


def _keep_rows(previous: Path, real: dict, rows: tuple[str, ...], commit: str) -> dict:
    """The real-tree rows not measured this time, from the previous results; each row says which commit it is from."""
    old = json.loads(previous.read_text()).get("realtree", {}) if previous.exists() else {}
    measured_at = {**old.get("measured_at", {}), **dict.fromkeys(rows, commit)}
    kept = {k: old[k] for k in realbench.ROWS if k not in rows and k in old}
    return {**real, **kept, "measured_at": {k: v for k, v in measured_at.items() if k in {*rows, *kept}}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="3 runs, 1 heavy run, growth to 840 TUs, the 1 MiB and 2 GiB models only")
    parser.add_argument("--tus", type=int, default=420, help="TUs of the main fat tree (default 420)")
    parser.add_argument("--shared-tus", type=int, default=420,
                        help="TUs of the shared part's tree (checkouts A and B, warm Redis; default 420)")
    parser.add_argument("--growth", type=int, nargs="*", help="larger trees for the null-build growth (default 2000)")
    parser.add_argument("--runs", type=int, help="repetitions for medians (default 5; --quick 3)")
    parser.add_argument("--heavy-runs", type=int,
                        help="repetitions of the real tree's cold builds and ggml.h edits (default --runs; --quick 1)")
    parser.add_argument("--model-gib", type=float, nargs="*",
                        help="model sizes in GiB (default 0.001 2 4.5; --quick 0.001 2): the smallest is the RSS baseline")
    parser.add_argument("--realtree-rows", default=",".join(realbench.ROWS),
                        help="which real-tree measurements to take (the others are kept from the last results; "
                             f"default all: {','.join(realbench.ROWS)})")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma list of: {', '.join(PARTS)} (default all)")
    parser.add_argument("--project", type=Path, default=PROJECT, help="the opencoti-build checkout to measure")
    parser.add_argument("--work", type=Path, default=Path("/tmp/opencoti-bench"), help="scratch dir (trees, outputs, models)")
    parser.add_argument("--docs", type=Path, default=PROJECT / "docs", help="where benchmarks.md/.json go")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--real-cosmocc", type=Path, default=os.environ.get("OPENCOTI_REAL_COSMOCC") or None,
                        help="part realfat: also the fat lane on this cosmocc (default $OPENCOTI_REAL_COSMOCC)")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite benchmarks.md from the benchmarks.json already in --docs; measure nothing")
    args = parser.parse_args(argv)
    if args.report_only:
        results = json.loads((args.docs / "benchmarks.json").read_text())
        _log(f"wrote {report.write(results, args.docs, _after_tables(results))}")
        return 0
    runs = args.runs or (3 if args.quick else 5)
    heavy_runs = args.heavy_runs or (1 if args.quick else runs)
    growth = args.growth if args.growth is not None else ([840] if args.quick else [2000])
    models = args.model_gib if args.model_gib is not None else ([0.001, 2.0] if args.quick else [0.001, 2.0, 4.5])
    parts = set(args.parts.split(","))
    if parts - set(PARTS):
        parser.error(f"unknown part {sorted(parts - set(PARTS))[0]}; the parts are {', '.join(PARTS)}")
    rows = tuple(args.realtree_rows.split(","))
    if set(rows) - set(realbench.ROWS):  # checked before any part runs: a typo must not cost the parts before it
        parser.error(f"unknown real-tree row {sorted(set(rows) - set(realbench.ROWS))[0]}; "
                     f"the rows are {', '.join(realbench.ROWS)}")
    project = args.project.resolve()
    # Every timed run starts SCons on the build's Python code: compiled once here, as a user's Python does on its
    # first run; where that is off (PYTHONDONTWRITEBYTECODE), each start would compile ~80 modules again (0.1 s).
    compileall.compile_dir(project / "site_scons", quiet=1)

    results: dict = {
        "command": shlex.join(["python3", "bench/run.py", *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine(), "project": str(project), "jobs": args.jobs,
        "commits": dict.fromkeys(parts, _commit(project)),  # per part: a later run of one part keeps the others
    }
    if "fat" in parts:
        results["fat"] = fat_part(project, args.work, args.tus, runs, warm_runs=runs, recache_runs=1, jobs=args.jobs)
        null = results["fat"]["null"]
        results["growth"] = [{"tus": args.tus, "medians": null["medians"], "ratio_median": null["ratio_median"]}]
        results["growth"] += [growth_point(project, args.work, n, runs, args.jobs) for n in growth]
    if "server" in parts:
        results["server"] = serverbench.measure(project, args.work / f"server-{args.tus}", args.tus, runs, args.jobs, _log)
    if "realtree" in parts:
        source = sdist_llamacpp(download=True)
        real = realbench.measure(source, project, args.work / "realtree", args.jobs, runs, heavy_runs, _log, rows)
        results["realtree"] = _keep_rows(args.docs / "benchmarks.json", real, rows, results["commits"]["realtree"])
    if "realfat" in parts:
        source = sdist_llamacpp(download=True)
        results["realfat"] = realfatbench.measure(source, project, args.work / "realfat", args.jobs, runs, heavy_runs, _log,
                                                  real_cosmocc=args.real_cosmocc)
    if "package" in parts:
        results["packaging"] = []
        for gib in models:
            _log(f"packaging a {gib} GiB model")
            results["packaging"].append(packbench.bench_size(project, args.work / "package", int(gib * GIB), runs))
    if "shared" in parts:
        results["shared"] = sharedbench.measure(project, args.work / f"shared-{args.shared_tus}", args.shared_tus, runs,
                                                args.jobs, _log)
    args.docs.mkdir(parents=True, exist_ok=True)
    results = _merge(args.docs / "benchmarks.json", results, parts)
    (args.docs / "benchmarks.json").write_text(json.dumps(results, indent=1) + "\n")
    path = report.write(results, args.docs, _after_tables(results))
    _log(f"wrote {path}")
    if "fat" in results:
        _log(f"null build: scons/make median ratio {results['fat']['null']['ratio_median']:.1f}; header edit "
             f"compiles {median(results['fat']['header_edit']['compiles']['scons'])} "
             f"(dependents {results['fat']['header_edit']['expected_dependents']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
