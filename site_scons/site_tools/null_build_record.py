"""SCons tool: the build's side of the null build's record (opencoti_build/null_build.py).

Notes, for the recorder SConstruct started, the top-level targets in the order a null build says "is up
to date" of them, refuses a graph with a step that always runs (it would run on a null build too), and
writes the record at exit when the build phase ended (SCons wrote its sconsign) without a failure.

Construction variables: none read or set. Load it once, with ``recorder=`` (a ``null_build.Recorder``);
it patches ``SCons.Script.Main.BuildTask.prepare``, ``SCons.Taskmaster.Taskmaster.__init__`` and
``SCons.SConsign.write``.
"""
from __future__ import annotations

import atexit
import sys
from typing import Any

import SCons.SConsign
import SCons.Script
import SCons.Script.Main
import SCons.Taskmaster

from opencoti_build.null_build import Recorder


def _watch(recorder: Recorder) -> None:
    prepare = SCons.Script.Main.BuildTask.prepare

    def prepare_noting(task: Any) -> Any:
        if any(t.always_build for t in task.targets):
            recorder.ok = False
        return prepare(task)

    taskmaster_init = SCons.Taskmaster.Taskmaster.__init__

    def taskmaster_noting(self: Any, targets: Any = (), *args: Any, **kwargs: Any) -> None:
        # in this order a null build says "is up to date" of each top-level target that has a builder
        recorder.top_targets[:] = [str(t) for t in targets if t.has_builder()]
        taskmaster_init(self, targets, *args, **kwargs)

    write = SCons.SConsign.write

    def write_noting() -> None:
        write()
        recorder.build_ended = True

    SCons.Script.Main.BuildTask.prepare = prepare_noting
    SCons.Taskmaster.Taskmaster.__init__ = taskmaster_noting
    SCons.SConsign.write = write_noting


def _steps() -> int:
    counts = getattr(sys.modules.get("build_summary"), "COUNTS", None)  # SCons loads a site tool by its name
    return counts.compiled + counts.cached + counts.current if counts else 0


def _finish(recorder: Recorder) -> None:
    failed = bool(SCons.Script.GetBuildFailures()) or bool(getattr(SCons.Script.Main, "exit_status", 0))
    try:
        recorder.finish(failed, _steps())
    except OSError:
        pass  # no record is always safe: the next run takes the full path


_watched: list[Recorder] = []  # SCons hooks are process-wide: installed once


def generate(env: Any, recorder: Recorder | None = None) -> None:
    if recorder is not None and not _watched:
        _watched.append(recorder)
        _watch(recorder)
        atexit.register(_finish, recorder)


def exists(env: Any) -> bool:
    return all(hasattr(owner, name) for owner, name in (
        (SCons.Script.Main.BuildTask, "prepare"), (SCons.Taskmaster.Taskmaster, "__init__"),
        (SCons.SConsign, "write"), (SCons.Script, "GetBuildFailures")))
