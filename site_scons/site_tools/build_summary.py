"""SCons tool: counts what each step did and prints opencoti_build.summary's line when the build ends.

SCons ends with "done building targets" (nothing with -Q): no count an IDE or a script could read.
This tool wraps SCons' BuildTask.executed/failed (once per process) to classify each finished task
whose target is a built file, and prints the summary at exit. Step lines are written in one write
each (PRINT_CMD_LINE_FUNC), so two steps finishing at once under -j never share a line.

Construction variables set: PRINT_CMD_LINE_FUNC. A node whose ``attributes.not_a_step`` is true (the
compile database) is not counted.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time

import SCons.Node
import SCons.Node.FS
import SCons.Script
import SCons.Script.Main

from opencoti_build import summary

COUNTS = summary.Counts()
_START = getattr(SCons.Script, "start_time", None) or time.time()  # SCons' own start: reading counts too
_PRINT_LOCK = threading.Lock()
_installed: list[bool] = []


def _counted(node) -> bool:
    return (isinstance(node, SCons.Node.FS.File) and node.has_builder()
            and not getattr(node.attributes, "not_a_step", False))


def _executed(task, original=SCons.Script.Main.BuildTask.executed) -> None:
    node = task.targets[0]
    cached = all(getattr(t, "cached", 0) for t in task.targets)  # read first: built() clears it
    state = node.get_state()
    original(task)
    if not _counted(node):
        return
    if state == SCons.Node.executing:
        COUNTS.add("cached" if cached else "compiled")
    elif state == SCons.Node.up_to_date:
        COUNTS.add("current")


def _failed(task, original=SCons.Script.Main.BuildTask.failed) -> None:
    if _counted(task.targets[0]):
        COUNTS.add("failed")
    original(task)


def _print_line(text: str, target, source, env) -> None:
    with _PRINT_LOCK:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def _say_summary() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    print(summary.line(COUNTS, time.time() - _START), flush=True)


def start(env) -> None:
    """Print the summary when this process exits (call once the SConscripts are read)."""
    if not _installed:
        _installed.append(True)
        atexit.register(_say_summary)


def generate(env) -> None:
    if not getattr(SCons.Script.Main.BuildTask, "_opencoti_counted", False):
        SCons.Script.Main.BuildTask.executed = _executed
        SCons.Script.Main.BuildTask.failed = _failed
        SCons.Script.Main.BuildTask._opencoti_counted = True
    env["PRINT_CMD_LINE_FUNC"] = _print_line
    env.AddMethod(start, "StartSummary")


def exists(env) -> bool:
    return True
