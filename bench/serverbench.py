"""Part "server": the build server on the generated fat tree, side by side with make + ccache and the one-shot
scons build, in one run.

Three builders of the same tree, each with its own outputs and cache (so each compiles an edited header's
dependents itself): make + ccache, one-shot ``scons``, and requests to a server started for the same variables,
through ``python3 -m opencoti_build build`` and through the C client ``serve`` compiles (null requests: both; the
edits: the C client's, since the next client's request would find them built). Null requests, a one-header code
edit and a comment appended to the same header are timed per run, the three in turn (order alternating); ratios are taken per run against make + ccache. After the edits, the server's
binaries are compared byte for byte with the one-shot build's, and the server's next request must compile
nothing. The server's own log gives how it answered each request and how long it took inside the server.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from bench import fatbench, fattree
from bench.measure import median, run
from opencoti_build.report import summary
from opencoti_build.server import native_client, protocol, request_loop

COMPARED = ("o/llamafile/llamafile", "o/llamafile/linked/llamafile.aarch64.elf", "o/llamafile/linked/llamafile.com.dbg")


class ServerBuild:
    """A build server for ``project`` with every output under ``work`` (its cache seeded from another's)."""

    def __init__(self, project: Path, tree: Path, work: Path, jobs: int) -> None:
        self.project, self.tree, self.work, self.out = project, tree, work, work / "out"
        vars_ = {"SRC": tree, "BUILD_DIR": self.out, "CACHE_DIR": work / "cache", "DIST_DIR": work / "dist",
                 "BACKEND_DIST_DIR": work / "vendors-dist", "COMPILEDB": work / "compile_commands.json",
                 "COSMOCC": "stand-in"}
        self.variables = [f"{k}={v}" for k, v in vars_.items()]
        request = ["-Q", f"-j{jobs}", *self.variables]
        self.clients = {  # the same requests to the same server, from each client
            "scons via server": Client("scons via server", [sys.executable, "-m", "opencoti_build", "build", *request],
                                       project),
            "scons via server, C client": Client("scons via server, C client", [
                str(protocol.server_dir(project, self.variables) / native_client.NAME), *request], project)}

    def start(self) -> None:
        subprocess.run([sys.executable, "-m", "opencoti_build", "serve", "--detach", *self.variables],
                       cwd=self.project, check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run([sys.executable, "-m", "opencoti_build", "stop", *self.variables], cwd=self.project,
                       capture_output=True)

    def log_lines(self) -> list[str]:
        log = protocol.server_file(self.project, self.variables, ".log")
        return [line for line in log.read_text().splitlines() if " build " in line]


class Client:
    """Requests through one client (``python3 -m opencoti_build build``, or the C client ``serve`` compiled)."""

    def __init__(self, name: str, argv: list[str], project: Path) -> None:
        self.name, self.argv, self.project = name, argv, project

    def build(self) -> fatbench.Outcome:
        result = run(self.argv, cwd=self.project)
        compiles = sum(1 for line in summary.unprefixed(result.output) if line.startswith("FATCC "))
        return fatbench.Outcome(result.returncode, result.wall, compiles)


def measure(project: Path, work: Path, tus: int, runs: int, jobs: int, log) -> dict:
    tree, (scons, make) = fatbench.prepare(work, tus, project, jobs)
    log(f"server part: cold builds of {tus} TUs")
    cold = fatbench.cold([scons, make])
    for name, outcome in cold.items():
        if outcome["returncode"] != 0:
            raise SystemExit(f"bench: the cold {name} build failed (rc {outcome['returncode']})")
    server = ServerBuild(project, tree.root, work / "server", jobs)
    shutil.copytree(scons.work / "cache", server.work / "cache")  # its first build restores; its edits compile
    python_client, c_client = server.clients.values()
    server.start()
    try:
        first = python_client.build()
        if first.returncode != 0 or first.compiles:
            raise SystemExit(f"bench: the server's first build failed or compiled ({first})")
        log("server part: null requests")
        null = _timed([c_client, python_client, make, scons], runs, edit=None)
        log("server part: header edits")  # through one client: the next one's request would find them built
        edit = _timed([c_client, make, scons], runs, edit=tree)
        log("server part: comment-only edits")
        comment = _timed([c_client, make, scons], runs, edit=tree, change=fattree.comment_header)
        after = python_client.build().compiles
        differing = [rel for rel in COMPARED if (server.out / rel).read_bytes() != (scons.out / rel).read_bytes()]
        answers = server.log_lines()
    finally:
        server.stop()
    return {"tus": tus, "cold": cold, "null": null, "header_edit": {**edit, "header": fattree.EDIT_HEADER,
            "expected_dependents": len(tree.dependents(fattree.EDIT_HEADER))}, "comment_edit": comment,
            "compiles_in_next_request": after, "differing_from_one_shot": differing,
            "answered_from_record": sum(request_loop.NULL_ANSWER in line for line in answers), "requests": len(answers),
            "server_log": answers}


def _timed(builds: list, runs: int, edit: fattree.FatTree | None, change=fattree.edit_header) -> dict:
    """Each run: (an edit of ``edit``'s header by ``change``, then) every builder in turn, order alternating; ratios
    against make + ccache per run."""
    walls: dict[str, list[float]] = {b.name: [] for b in builds}
    compiles: dict[str, list[int]] = {b.name: [] for b in builds}
    ratios: dict[str, list[float]] = {b.name: [] for b in builds if b.name != "make+ccache"}
    for i in range(runs):
        if edit is not None:
            change(edit, fattree.EDIT_HEADER, serial=2000 + i)
        order = builds if i % 2 == 0 else builds[::-1]
        got = {b.name: b.build() for b in order}
        for name, outcome in got.items():
            if outcome.returncode != 0:
                raise SystemExit(f"bench: {name} failed in the server part (rc {outcome.returncode})")
            walls[name].append(outcome.wall)
            compiles[name].append(outcome.compiles)
        for name in ratios:
            ratios[name].append(got[name].wall / got["make+ccache"].wall)
    return {"walls": walls, "medians": {k: median(v) for k, v in walls.items()}, "compiles": compiles,
            "ratios": ratios, "ratio_medians": {k: median(v) for k, v in ratios.items()}}
