"""SCons tool: the build's side of the null build's record (opencoti_build/incremental/null_build/).

For the recorder SConstruct started: refuses a graph with a step that always runs (it would run on a null build
too), and writes the record at exit when the build phase ended (SCons wrote its sconsign) without a failure. A sconsign that
cannot be written (a full disk) is one error line and exit 2, and no record.

Construction variables: none read or set. Load it once a run, with ``recorder=`` (a ``null_build.Recorder``, which
becomes the run's) and ``run=`` (the run's ``opencoti_scons.progress.BuildRun``, whose step count and standing lines
go into the record); it wraps SCons's task preparation and its sconsign write (through opencoti_scons.engine, which
hands them the run it is bound to: a run without a recorder records nothing).
"""
from __future__ import annotations

import atexit
import sys
from typing import Any

import SCons.Script

from opencoti_build.errors import os_error_line
from opencoti_build.incremental.null_build import Recorder
from opencoti_scons import engine
from opencoti_scons.progress import BuildRun


def _prepare(prepare: Any) -> Any:
    def prepare_noting(run: BuildRun, task: Any) -> Any:
        if run.recorder is not None and any(t.always_build for t in task.targets):
            run.recorder.ok = False
        return prepare(task)
    return prepare_noting


def _sconsign_write(write: Any) -> Any:
    def write_noting(run: BuildRun) -> None:
        try:
            write()
        except OSError as exc:  # a full disk: SCons's last record stays whole (it writes a temporary, then renames)
            what = f"cannot write the build's record {exc.filename or '.sconsign.dblite'}"
            sys.stderr.write(f"scons: error: {os_error_line(exc, what)} (the next build redoes what this one "
                             "built)\n")
            engine.abandon_sconsign()
            engine.set_exit_status(2)
            return
        if run.recorder is not None:
            run.recorder.build_ended = True
    return write_noting


def _finish(recorder: Recorder, run: BuildRun) -> None:
    failed = bool(SCons.Script.GetBuildFailures()) or bool(engine.exit_status())
    try:
        recorder.finish(failed, run.steps(), run.standing_lines())
    except OSError:
        pass  # no record is always safe: the next run takes the full path


def generate(env: Any, recorder: Recorder, run: BuildRun) -> None:
    run.recorder = recorder
    engine.install("task prepare", _prepare)
    engine.install("sconsign write", _sconsign_write)
    atexit.register(_finish, recorder, run)


def exists(env: Any) -> bool:
    return engine.supported()
