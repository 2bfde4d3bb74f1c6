"""SCons tool: ``[n/N]`` before each step's line, and opencoti_build.summary's line when the build ends.

SCons ends with "done building targets" (nothing with -Q): no count an IDE or a script could read.
This tool wraps SCons' BuildTask.executed/failed (once per process) to classify each finished task
whose target is a built file, and prints the summary at exit. Step lines are written in one write
each (PRINT_CMD_LINE_FUNC), so two steps finishing at once under -j never share a line.

N is known before the first step starts, as Ninja knows it: once the SConscripts are read, a plan
walks the requested targets' graph bottom-up. A step whose input is rebuilt in this run is counted
without asking more (Ninja's dirty propagation); any other is asked exactly what the build will ask
(``is_up_to_date``: inputs, then exact_outputs' record). That question is only put to a node whose
inputs are final for this run, so the signatures it memoises are the ones the build itself uses, and
its answer is kept (SCons' own ``allowcache``) instead of being computed twice. A step whose inputs
are only known once a generated source exists may still be found current at run time: then N is
larger than the steps shown, never smaller.

Other tools add lines before the summary through REPORTS; with CCWRAPPER=sccache or ccache, one of them
says what the launcher did in this build.

Construction variables read: CCWRAPPER, CCWRAPPER_ARGV, ENV (for the launcher's line). Set: PRINT_CMD_LINE_FUNC.
Method: StartSummary. A node whose ``attributes.not_a_step`` is true (the compile database) is not counted.
"""
from __future__ import annotations

import atexit
import sys
import threading
import time
from collections.abc import Callable

import SCons.Node
import SCons.Node.Alias
import SCons.Node.FS
import SCons.Script
import SCons.Script.Main

from opencoti_build import launchers, summary

COUNTS = summary.Counts()
_STEPS: dict[int, int] = {}  # id(executor) -> its n, in the order steps print their first line
_PLANNED: list[int] = [0]
_START = getattr(SCons.Script, "start_time", None) or time.time()  # SCons' own start: reading counts too
_PRINT_LOCK = threading.Lock()
_installed: list[bool] = []
# Other tools' end-of-build lines (the cache tiers' counts), printed just before the summary, which stays last.
REPORTS: list[Callable[[], list[str]]] = []


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


def step_prefix(node) -> str:
    """``[n/N] `` for the step writing ``node`` (its first line takes the next n); "" for bookkeeping."""
    if not _counted(node):
        return ""
    with _PRINT_LOCK:
        n = _STEPS.setdefault(id(node.get_executor()), len(_STEPS) + 1)
    return f"[{n}/{max(_PLANNED[0], n)}] "


def _print_line(text: str, target, source, env) -> None:
    line = step_prefix(target[0]) + text if target else text
    with _PRINT_LOCK:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _forget_scan(node) -> None:
    """Drop what scanning ``node`` found before its inputs were rebuilt (a generated source not written
    yet scans as empty). SCons rescans a node when an input it waited for is built, but not when that
    input was built before SCons reached the node: the stale list would go into the sconsign, and the
    next run, finding the real includes, would rebuild it."""
    node.implicit = None
    node.implicit_set = set()
    node._children_reset()


def _will_run(node, plan: dict, executors: set) -> bool:
    """True when ``node`` is rebuilt (or restored) in this run; every step that is goes into ``executors``."""
    if node in plan:
        return plan[node]
    plan[node] = False  # a cycle is SCons' to report
    inputs_rebuilt = False
    for child in node.children():
        inputs_rebuilt |= _will_run(child, plan, executors)
    if inputs_rebuilt:
        _forget_scan(node)
    if not node.has_builder():
        plan[node] = inputs_rebuilt
        return inputs_rebuilt
    if isinstance(node, SCons.Node.FS.File):
        if inputs_rebuilt or node.always_build:
            rebuilt = True
        else:
            if node.exists():
                node.changed(allowcache=True)  # inputs final: the build reuses this answer
            rebuilt = not node.is_up_to_date()
        if rebuilt and _counted(node):
            executors.add(id(node.get_executor()))
    else:
        rebuilt = inputs_rebuilt or bool(node.always_build)
    plan[node] = rebuilt
    return rebuilt


def _requested(env) -> list:
    nodes = []
    for target in SCons.Script.BUILD_TARGETS:
        if isinstance(target, SCons.Node.Node):
            nodes.append(target)
        else:
            nodes.append(SCons.Node.Alias.default_ans.lookup(str(target)) or env.Entry(str(target)))
    return nodes


def plan(env) -> int:
    """N: the steps this run will execute (see the module docstring)."""
    executors: set = set()
    visited: dict = {}
    for node in _requested(env):
        _will_run(node, visited, executors)
    return len(executors)


def _say_summary() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    for report in REPORTS:
        for line in report():
            print(line)
    print(summary.line(COUNTS, time.time() - _START), flush=True)


def _launcher_stats(env) -> None:
    """With CCWRAPPER=sccache or ccache, one line (a REPORTS line, of its own) of what the launcher did in this
    build: its counters are read now and when the build ends (opencoti_build.launchers)."""
    name, argv = env.get("CCWRAPPER"), env.get(launchers.ARGV_VARS["gcc"])
    if not name or not argv or SCons.Script.GetOption("no_exec") or SCons.Script.GetOption("question"):
        return  # -n and -q compile nothing, and must not start an sccache server either
    program, environ = str(argv[0]), dict(env["ENV"])
    before = launchers.counters(name, program, environ)

    def report() -> list[str]:
        line = launchers.stats_line(name, before, launchers.counters(name, program, environ))
        return [line] if line else []

    REPORTS.append(report)


def start(env) -> None:
    """Plan N and print the summary when this process exits (call once the SConscripts are read)."""
    if not _installed:
        _installed.append(True)
        _PLANNED[0] = plan(env)
        _launcher_stats(env)
        atexit.register(_say_summary)


def generate(env) -> None:
    if not getattr(SCons.Script.Main.BuildTask, "_opencoti_counted", False):
        SCons.Script.Main.BuildTask.executed = _executed
        SCons.Script.Main.BuildTask.failed = _failed
        SCons.Script.Main.BuildTask._opencoti_counted = True
    env["PRINT_CMD_LINE_FUNC"] = _print_line
    env.AddMethod(start, "StartSummary")


def exists(env) -> bool:
    # What generate wraps: SCons' task hooks.
    task = SCons.Script.Main.BuildTask
    return callable(getattr(task, "executed", None)) and callable(getattr(task, "failed", None))
