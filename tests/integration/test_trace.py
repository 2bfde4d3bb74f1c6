"""`TRACE=FILE`: a Chrome trace-event JSON of the run, through the real scons on the miniature tree."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from opencoti_build.report import summary

from scons_runs import MINI_TREE, scons


def steps_shown(proc) -> list[str]:
    """Each step line's first target (``WORD target ...``)."""
    return [line.split("] ", 1)[1].split()[1] for line in proc.stdout.splitlines() if summary.PROGRESS.match(line)]


def test_a_trace_has_one_complete_event_per_step_on_per_worker_tracks(tmp_path: Path) -> None:
    build, trace = tmp_path / "b", tmp_path / "trace.json"
    cold = scons("-j2", f"SRC={MINI_TREE}", f"TRACE={trace}", build=build)
    document = json.loads(trace.read_text())
    names = [e for e in document["traceEvents"] if e["ph"] == "M"]
    events = [e for e in document["traceEvents"] if e["ph"] == "X"]
    counts = summary.parse(cold.stdout)
    assert len(events) == counts["compiled"] == 50
    assert sorted(e["name"] for e in events) == sorted(steps_shown(cold))
    assert {e["args"]["outcome"] for e in events} == {"compiled"}
    assert {e["cat"] for e in events} == {"fat"} and all(e["args"]["lane"] == "fat" for e in events)
    assert {e["tid"] for e in events} == {1, 2} == {n["tid"] for n in names}  # -j2: two workers, each a named track
    assert [n["args"]["name"] for n in sorted(names, key=lambda n: n["tid"])] == ["worker 1", "worker 2"]
    for tid in (1, 2):  # a worker runs one step at a time
        track = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["tid"] == tid)
        assert all(end <= next_start for (_, end), (next_start, _) in zip(track, track[1:]))
    fat_pair = next(e for e in events if e["name"].endswith("/llamafile.c.o"))
    assert fat_pair["args"]["targets"] == [fat_pair["name"], fat_pair["name"].replace("/llamafile.c.o",
                                                                                       "/.aarch64/llamafile.c.o")]
    assert all(e["dur"] > 0 for e in events if e["name"].endswith(".o"))

    shutil.rmtree(build / "out")
    warm = scons("-j2", f"SRC={MINI_TREE}", f"TRACE={trace}", build=build)  # not the null build: the trace is new
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(events) == summary.parse(warm.stdout)["cached"] == 50
    assert {e["args"]["outcome"] for e in events} == {"cached"}
    again = scons("-j2", f"SRC={MINI_TREE}", f"TRACE={trace}", build=build)  # nothing to do: an empty trace
    assert summary.parse(again.stdout)["current"] == 50
    assert [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"] == []
