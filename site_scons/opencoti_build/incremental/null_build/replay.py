"""The fast path's output: what the recorded run printed while reading, then the lines it printed before its summary
that a run finding nothing to do prints too (how to run each artifact `package` made), then the summary (no "is up
to date" lines: a full run drops them too, the summary counts what is current)."""
from __future__ import annotations

import sys

from opencoti_build.incremental.null_build.record import Record


def replay(record: Record, quiet: bool, seconds: float) -> None:
    """Print what a full run prints when it finds nothing to do (``seconds``: this run's time so far)."""
    from opencoti_build.report import summary

    streams = {1: sys.stdout, 2: sys.stderr}
    for stream, text in record.replay:
        streams[stream].write(text)
        streams[stream].flush()
    out = sys.stdout
    if not quiet:
        out.write("scons: done reading SConscript files.\nscons: Building targets ...\n")
    if not quiet:
        out.write("scons: done building targets.\n")
    out.writelines(line + "\n" for line in record.end_lines)
    out.write(summary.line(summary.Counts(current=record.steps), seconds) + "\n")
    out.flush()

