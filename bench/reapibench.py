"""Part 4's REAPI column: checkout B built from a REAPI cache (BuildGrid's all-in-one server, bench/servers.py)
beside the same build from Redis, in one run of bench/sharedbench.py.

BuildGrid is filled without compiling anything: checkout A, just built cold with Redis, pushes its current outputs
with ``scons --cache-populate CACHE_URL=grpc://127.0.0.1:P`` (each step one ActionCache entry over CAS blobs). Then B,
with an empty local cache and ``CACHE_URL=grpc://127.0.0.1:P``, runs interleaved with B from Redis and the make +
ccache runs, its outputs and local cache wiped before each run. The server binds 127.0.0.1 on a free port, keeps its
blobs on disk and its ActionCache in memory, and is stopped by its PID.
"""
from __future__ import annotations

from pathlib import Path

from bench import servers
from bench.measure import run

NAME = "scons, REAPI"  # B's runs from BuildGrid, in the results' "second"


def start(work: Path, log) -> servers.BuildGridServer | None:
    """BuildGrid for this run, or None (with a line saying why) where it is not installed."""
    try:
        server = servers.BuildGridServer(work / "buildgrid")
    except RuntimeError as exc:
        log(f"shared: no REAPI column: {exc}")
        return None
    log(f"shared: BuildGrid on {server.url}")
    return server


def populate(argv: list[str], url: str) -> dict:
    """Checkout A's current outputs pushed to the REAPI cache at ``url`` (``--cache-populate``: nothing compiled)."""
    from bench.sharedbench import tiers  # the cache line's reader, beside the part that uses it

    result = run([a for a in argv if not a.startswith("CACHE_URL=")] + [f"CACHE_URL={url}", "--cache-populate"])
    counts = tiers(result.output).get(url, {})
    return {"returncode": result.returncode, "wall": result.wall, "pushed": counts.get("pushed"),
            "tail": result.output.splitlines()[-3:]}


def usage(server: servers.BuildGridServer) -> dict:
    """What the server holds after the populate: CAS blobs and their bytes (the ActionCache is in its memory)."""
    blobs = server.blobs()
    return {"blobs": len(blobs), "bytes": sum(p.stat().st_size for p in blobs)}


def report_lines(shared: dict | None) -> list[str]:
    """The REAPI section after the tables (bench/run.py passes it to report.write): B from BuildGrid beside B from
    Redis, same run, same checkouts."""
    reapi = (shared or {}).get("reapi")
    if not shared or not reapi or NAME not in shared["second"]:
        return []
    rows = []
    for name, label in (("scons", "Redis"), (NAME, f"REAPI (BuildGrid {reapi['buildgrid']})")):
        got = shared["second"][name]["runs"]
        walls = ", ".join(f"{r['wall']:.2f}" for r in got)
        same = ", ".join(f"{r['against_a']['identical']}/{r['against_a']['compared']}" for r in got)
        rows.append([label, f"{shared['second'][name]['median_wall']:.2f} s ({walls})",
                     f"{sum(r['returncode'] == 0 for r in got)}/{len(got)}", ", ".join(str(r["compiles"]) for r in got),
                     ", ".join(f"{r['from_cache']} steps ({r['remote_hits']} hits)" for r in got), same])
    ratio = shared["second"][NAME]["median_wall"] / shared["second"]["scons"]["median_wall"]
    fill = reapi["populate"]
    return [f"## Shared cache: the same second checkout from a REAPI cache ({shared['tus']} TUs)", "",
            "`bench/reapibench.py`, in the same run: BuildGrid's all-in-one server (PyPI `buildgrid` "
            f"{reapi['buildgrid']} on Python 3.13, its cache services only, blobs on local disk) was filled from "
            f"checkout A by `scons --cache-populate CACHE_URL=grpc://127.0.0.1:P` ({fill['pushed']} targets pushed "
            f"in {fill['wall']:.2f} s, nothing compiled; {reapi['usage']['blobs']} CAS blobs, "
            f"{reapi['usage']['bytes'] / (1 << 20):.1f} MiB), then B ran with an empty local cache and that "
            "`CACHE_URL`, interleaved with B from Redis above. Each step is one ActionCache lookup, then its "
            "blobs in one BatchReadBlobs call (ByteStream for those over 4 MiB).", "",
            "| B from | wall (median; runs) | build succeeded | fat compiles | restored (remote hits) | files "
            "byte-identical to A's |", "|---|---|---|---|---|---|", *("| " + " | ".join(row) + " |" for row in rows), "",
            f"REAPI / Redis, B's median wall: {ratio:.2f}×.", ""]
