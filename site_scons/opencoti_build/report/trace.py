"""``TRACE=FILE``: a run's steps as a Chrome trace-event JSON (the format Perfetto and chrome://tracing read, as
ninja's ``.ninja_log`` converters and Bazel's ``--profile`` write it).

One complete event (``"ph": "X"``) per step: its first target as the name, its lane (fat, cuda, native, package...)
as the category, what it did (compiled, cached, failed) and its targets in ``args``; start and duration in µs from
the run's start. Each SCons worker thread is a track (``tid``), named by a metadata event, so a -j build shows what
ran in parallel and where a worker sat idle.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from opencoti_build import tempfiles


@dataclass(frozen=True)
class Step:
    targets: tuple[str, ...]
    lane: str
    outcome: str  # compiled, cached, failed
    start: float  # seconds since the epoch (time.time)
    end: float
    worker: int  # 1, 2, ... in the order the workers ran their first step


class Trace:
    """The steps of one run, from any worker thread."""

    def __init__(self, origin: float) -> None:
        self.origin = origin  # the run's start: ts 0
        self.steps: list[Step] = []
        self._workers: dict[int, int] = {}
        self._lock = threading.Lock()

    def worker(self, thread_ident: int) -> int:
        """The track of the thread ``thread_ident``: numbered as the threads first ran a step."""
        with self._lock:
            return self._workers.setdefault(thread_ident, len(self._workers) + 1)

    def add(self, step: Step) -> None:
        with self._lock:
            self.steps.append(step)

    def document(self) -> dict:
        """The trace-event JSON object: the workers' names, then every step ordered by its start."""
        def us(t: float) -> int:
            return max(0, round((t - self.origin) * 1e6))

        names = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": n, "args": {"name": f"worker {n}"}}
                 for n in sorted(self._workers.values())]
        events = [{"ph": "X", "name": s.targets[0], "cat": s.lane, "pid": 1, "tid": s.worker, "ts": us(s.start),
                   "dur": max(0, us(s.end) - us(s.start)),
                   "args": {"outcome": s.outcome, "lane": s.lane, "targets": list(s.targets)}}
                  for s in sorted(self.steps, key=lambda s: (s.start, s.targets))]
        return {"displayTimeUnit": "ms", "traceEvents": names + events}

    def write(self, path: Path | str) -> None:
        """Write the trace by rename (a killed run leaves the last whole one, or none)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tempfiles.remove_stale(path.parent, path.name)  # what a run killed while writing it left
        fd, tmp = tempfiles.create(path)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.document(), fh, indent=0)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
