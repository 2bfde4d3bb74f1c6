"""SCons tool: ``[n/N]`` before each step's line, and opencoti_build.report.summary's line when the build ends.

SCons ends with "done building targets" (nothing with -Q): no count an IDE or a script could read.
This tool counts each finished task whose target is a built file (SCons's BuildTask.executed/failed, wrapped
through the engine, which hands them the run it is bound to) into that :class:`opencoti_scons.progress.BuildRun`,
and prints its end lines at exit.
Step lines are written in one write each (PRINT_CMD_LINE_FUNC), so two steps finishing at once under -j never
share a line. How N is known before the first step: opencoti_scons/progress.py.

With CCWRAPPER=sccache or ccache, one line before the summary says what the launcher did in this build.

Load it with ``run=`` (the BuildRun SConstruct made). Construction variables read: CCWRAPPER, CCWRAPPER_ARGV,
ENV (for the launcher's line). Set: PRINT_CMD_LINE_FUNC. Method: StartSummary. A node whose
``attributes.not_a_step`` is true (the compile database) is not counted.
"""
from __future__ import annotations

import atexit
from typing import Any

import SCons.Node
import SCons.Script

from opencoti_build.cache import launchers
from opencoti_scons import engine
from opencoti_scons.progress import BuildRun


def _requested(env: Any) -> list:
    nodes = []
    for target in SCons.Script.BUILD_TARGETS:
        if isinstance(target, SCons.Node.Node):
            nodes.append(target)
        else:
            nodes.append(engine.alias(str(target)) or env.Entry(str(target)))
    return nodes


def _launcher_report(env: Any, run: BuildRun) -> None:
    """With CCWRAPPER=sccache or ccache, a report line of what the launcher did in this build: its counters are
    read now and when the build ends (opencoti_build.cache.launchers)."""
    name, argv = env.get("CCWRAPPER"), env.get(launchers.ARGV_VARS["gcc"])
    if not name or not argv or SCons.Script.GetOption("no_exec") or SCons.Script.GetOption("question"):
        return  # -n and -q compile nothing, and must not start an sccache server either
    program, environ = str(argv[0]), dict(env["ENV"])
    before = launchers.counters(name, program, environ)

    def report() -> list[str]:
        line = launchers.stats_line(name, before, launchers.counters(name, program, environ))
        return [line] if line else []

    run.reports.append(report)


def generate(env: Any, run: BuildRun) -> None:
    engine.install("task execute", lambda original: lambda bound, task: bound.timed(task, original))
    engine.install("task needs execute", engine.quiet_needs_execute)  # the summary line counts what is current
    engine.install("task executed", lambda original: lambda bound, task: bound.executed(task, original))
    engine.install("task failed", lambda original: lambda bound, task: bound.failed(task, original))
    env["PRINT_CMD_LINE_FUNC"] = run.print_step

    def start(env: Any) -> None:
        """Plan N and print the end lines when this process exits (call once the SConscripts are read)."""
        run.plan(_requested(env))
        _launcher_report(env, run)
        atexit.register(run.say_end)

    env.AddMethod(start, "StartSummary")


def exists(env: Any) -> bool:
    return engine.supported()
