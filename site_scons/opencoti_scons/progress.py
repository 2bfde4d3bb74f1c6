"""One build's progress: ``[n/N]`` before each step's line, the count of what each step did, and the lines printed
when the build ends (opencoti_build.report.summary's line last). :class:`BuildRun` holds it all for one scons run;
SConstruct makes it and hands it to the tools that report (build_summary, verified_cache, null_build_record).

N is known before the first step starts, as Ninja knows it: once the SConscripts are read, :meth:`BuildRun.plan`
walks the requested targets' graph bottom-up. A step whose input is rebuilt in this run is counted without asking
more (Ninja's dirty propagation); any other is asked exactly what the build will ask (``is_up_to_date``: inputs,
then exact_outputs' record). That question is only put to a node whose inputs are final for this run, so the
signatures it memoises are the ones the build itself uses, and its answer is kept (SCons's own ``allowcache``)
instead of being computed twice. A step whose inputs are only known once a generated source exists may still be
found current at run time: then N is larger than the steps shown, never smaller.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import SCons.Node
import SCons.Node.FS

from opencoti_build import errors, files
from opencoti_build.cache import file_digests
from opencoti_build.incremental import null_build
from opencoti_build.report import summary, trace
from opencoti_build.report.notes import Notes
from opencoti_scons import engine
from opencoti_scons.stamps import Stamps

Report = Callable[[], list[str]]


def counted(node: Any) -> bool:
    """Whether ``node`` is a step of the summary: a built file that is not bookkeeping (the compile database)."""
    return (isinstance(node, SCons.Node.FS.File) and node.has_builder()
            and not getattr(node.attributes, "not_a_step", False))


def count_as(nodes: Iterable[Any], kind: str) -> None:
    """The steps writing ``nodes`` count as ``kind`` in the summary (summary.PACKAGED, summary.INSTALLED) when they
    run, not as "compiled": a package or install run says how much it compiled apart from what it packaged."""
    for node in nodes:
        node.attributes.step_kind = kind


class BuildRun:
    """The state of one scons run that tools share: counts, step numbers, the plan's N, end-of-build reports."""

    def __init__(self, started: float | None = None, out: Any = None, memo: null_build.Memo | None = None,
                 notes: Notes | None = None, dry_run: bool = False, trace_file: str | None = None) -> None:
        self.counts = summary.Counts()
        self.started = started or time.time()
        self.planned = 0
        self.reports: list[Report] = []  # lines printed just before the summary, which stays last
        # lines after the reports that depend only on the graph and its outputs (how to run each artifact), which a
        # null build prints too: its record keeps them (opencoti_build.incremental.null_build)
        self.standing: list[Report] = []
        self.digests = file_digests.Digests()  # SHA-256s of files the run read or wrote whole (the packager's)
        self.stamps = Stamps()  # the decider's stamps, a file's stat within its timestamp tick withheld
        self.memo = memo or null_build.Memo()  # what the reading computes, carried between runs by the null build
        self._out = out  # None: whatever sys.stdout is when a line is written (the null build's recorder swaps it)
        self.dry_run = dry_run  # scons -n: the end line says what a build would do
        self.trace_file = trace_file  # TRACE=FILE: every step's timing, written when the build ends
        self.trace = trace.Trace(self.started) if trace_file else None
        self._timing: dict[int, tuple[float, float, int]] = {}  # id(task) -> (start, end, worker), with a trace
        self.notes = notes or Notes(None)  # what earlier runs said once (the toolchain, the web UI)
        self._noted: set[str] = set()
        self._said_once: set[str] = set()  # say_once's topics said this run
        self.recorder: null_build.Recorder | None = None  # the null build's recorder, when the run keeps one
        self.interrupted = False  # Ctrl-C stopped the build
        self.unsettled: dict[str, list[str]] = {}  # step's first target -> its inputs that moved while it ran
        self._steps: dict[int, int] = {}  # id(executor) -> its n, in the order steps print their first line
        self._lock = threading.Lock()

    # --- step lines --------------------------------------------------------------------------------------

    def say_step(self, node: Any, text: str) -> None:
        """Say a line of the step writing ``node``: its first line gets ``[n/N] `` with the next n, taken and written
        under one lock so that n only grows down the output (under -j a step's later lines, e.g. a link's
        verification, come after other steps' and carry no number); bookkeeping (not counted) gets none."""
        out = self._out or sys.stdout
        with self._lock:
            prefix = ""
            if counted(node) and id(node.get_executor()) not in self._steps:
                n = self._steps[id(node.get_executor())] = len(self._steps) + 1
                prefix = f"[{n}/{max(self.planned, n)}] "
            out.write(prefix + text + "\n")
            out.flush()

    def say(self, line: str) -> None:
        """One write per line: steps finish in SCons's worker threads, and print() writes the newline apart."""
        out = self._out or sys.stdout
        with self._lock:
            out.write(line + "\n")
            out.flush()

    def say_once(self, topic: str, line: str) -> None:
        """Say ``line`` unless this run said a line for ``topic`` already (a WARN any number of files could give)."""
        with self._lock:
            if topic in self._said_once:
                return
            self._said_once.add(topic)
        self.say(line)

    def note(self, topic: str, line: str | None) -> None:
        """Say ``line`` once this run, however many parts of the build come to it, and only when earlier runs
        did not say it for ``topic`` (opencoti_build.report.notes; None: nothing to say this run); never in what
        a null build replays."""
        if line is None:
            self.notes.should_say(topic, None)
            return
        if line in self._noted:
            return
        self._noted.add(line)
        if self.notes.should_say(topic, line):
            out = null_build.unrecorded(self._out or sys.stdout)
            with self._lock:
                out.write(line + "\n")
                out.flush()

    def warn(self, topic: str, lines: list[str] | None, always: bool = False) -> None:
        """WARN ``lines`` on stderr when they are news for ``topic`` (a toolchain that went missing, a ROCm that
        cannot build some targets), or ``always`` (the backend was asked for by name); None or []: nothing to warn of
        this run, so the next WARN is news again. Never in what a null build replays: it is said once, as notes are
        (:meth:`note`)."""
        if not lines:
            self.notes.should_say(topic, None)
            return
        text = "\n".join(lines)
        if self.notes.should_say(topic, text) or always:
            stream = null_build.unrecorded(sys.stderr)
            stream.write(text + "\n")
            stream.flush()

    def print_step(self, text: str, target: list, source: list, env: Any) -> None:
        """SCons's PRINT_CMD_LINE_FUNC: a step's line with its ``[n/N]``."""
        if target:
            self.say_step(target[0], text)
        else:
            self.say(text)

    # --- what each step did ------------------------------------------------------------------------------

    def timed(self, task: Any, original: Callable[[Any], None]) -> None:
        """SCons's BuildTask.execute, timed for the trace (in the worker thread that runs the step)."""
        if self.trace is None:
            original(task)
            return
        start = time.time()
        try:
            original(task)
        finally:
            self._timing[id(task)] = (start, time.time(), self.trace.worker(threading.get_ident()))

    def _traced(self, task: Any, outcome: str) -> None:
        timing = self._timing.pop(id(task), None)
        if self.trace is None or timing is None or not counted(task.targets[0]):
            return
        start, end, worker = timing
        lane = task.targets[0].get_env().get("LANE", "build")
        self.trace.add(trace.Step(tuple(map(str, task.targets)), lane, outcome, start, end, worker))

    def executed(self, task: Any, original: Callable[[Any], None]) -> None:
        node = task.targets[0]
        cached = all(getattr(t, "cached", 0) for t in task.targets)  # read first: built() clears it
        state = node.get_state()
        moved = moved_inputs(node) if state == SCons.Node.executing else []
        if state == SCons.Node.executing:
            self._traced(task, "cached" if cached else "compiled")
        original(task)
        if moved:  # built from inputs that moved under it: no record, so the next run redoes the step
            for target in task.targets:
                engine.forget_record(target)
            with self._lock:
                self.unsettled[str(node)] = moved
        if not counted(node):
            return
        if state == SCons.Node.executing:
            self.counts.add("cached" if cached else getattr(node.attributes, "step_kind", "compiled"))
        elif state == SCons.Node.up_to_date:
            self.counts.add("current")

    def failed(self, task: Any, original: Callable[[Any], None]) -> None:
        self._traced(task, "failed")
        if engine.interrupted_step(task):  # Ctrl-C: one line at the end, not one per step in flight
            self.interrupted = True
            engine.fail_quietly(task)
            return
        if counted(task.targets[0]):
            self.counts.add("failed")
        original(task)

    def steps(self) -> int:
        """How many steps ran, came from cache or were found current so far."""
        counts = self.counts
        return counts.compiled + counts.cached + counts.current + counts.packaged + counts.installed

    # --- the plan and the end ----------------------------------------------------------------------------

    def plan(self, requested: Iterable[Any]) -> int:
        """N: the steps this run will execute (see the module docstring); kept for the step lines."""
        executors: set[int] = set()
        visited: dict[Any, bool] = {}
        for node in requested:
            _will_run(node, visited, executors)
        self.planned = len(executors)
        return self.planned

    def unsettled_line(self) -> list[str]:
        """The WARN for steps whose inputs changed while they ran (none: no line)."""
        if not self.unsettled:
            return []
        inputs = sorted({path for moved in self.unsettled.values() for path in moved})
        return [f"WARN: {len(inputs)} input(s) changed while this build read them ({', '.join(inputs[:3])}"
                f"{', …' if len(inputs) > 3 else ''}): {len(self.unsettled)} step(s) built from them were not "
                "recorded or cached; the next build redoes them"]

    def end_lines(self, now: float | None = None) -> list[str]:
        """The reports' lines, then the summary line; after Ctrl-C, one line alone."""
        if self.dry_run:
            return [*(line for report in self.reports for line in report()), *self.standing_lines(),
                    summary.dry_line(self.counts)]
        done = summary.line(self.counts, (now or time.time()) - self.started)
        if self.interrupted:
            return [f"interrupted: {done}; the next build redoes what this one left (nothing unfinished is kept)"]
        lines = [*self.unsettled_line(), *(line for report in self.reports for line in report())]
        return [*lines, *self.standing_lines(), done]

    def standing_lines(self) -> list[str]:
        """The lines of the standing reports: what a null build prints before its summary."""
        return [line for report in self.standing for line in report()]

    def say_end(self) -> None:
        """The end of the build: the trace written, then the end lines."""
        sys.stderr.flush()
        lines = self.end_lines()
        if self.trace is not None and self.trace_file:
            try:
                self.trace.write(self.trace_file)
            except OSError as exc:
                lines.insert(0, "WARN: " + errors.os_error_line(exc, f"TRACE={self.trace_file}: cannot write the trace"))
        for line in lines:
            self.say(line)


def dry_run_input_rebuilt(node: Any) -> bool:
    """In ``scons -n``, whether an input of ``node`` would have been rebuilt by this run: the dry run wrote none, so
    the old input still stands there, yet the step would run (``make -n``'s answer) and its cache key is unknown."""
    return not engine.executes_actions() and any(c.get_state() == SCons.Node.executed for c in node.children())


def moved_inputs(node: Any) -> list[str]:
    """The input files of the step writing ``node`` that are no longer the files this run decided with: their
    stat identity now differs from the stat SCons took before the step (an editor saved one while it ran).

    Bazel re-checks an action's inputs the same way after it runs; the signature this run recorded for such an
    input, and the key the step's outputs would be cached under, describe bytes the step may not have read."""
    moved = []
    for child in node.children(scan=0):  # scanned before it was built
        if not isinstance(child, SCons.Node.FS.File):
            continue
        seen = engine.seen_stat(child)
        if seen is None:
            continue  # not stat'ed this run: nothing was decided from it
        try:
            now = files.identity(os.stat(child.get_abspath()))
        except OSError:
            now = None
        if now != files.identity(seen):
            moved.append(str(child))
    return moved


def _will_run(node: Any, plan: dict[Any, bool], executors: set[int]) -> bool:
    """True when ``node`` is rebuilt (or restored) in this run; every step that is goes into ``executors``."""
    if node in plan:
        return plan[node]
    plan[node] = False  # a cycle is SCons's to report
    inputs_rebuilt = False
    for child in node.children():
        inputs_rebuilt |= _will_run(child, plan, executors)
    if inputs_rebuilt:
        # What scanning ``node`` found before its inputs were rebuilt (a generated source not written yet scans
        # as empty) would go into the sconsign: SCons rescans when an input it waited for is built, not when that
        # input was built before SCons reached the node, and the next run would rebuild it.
        engine.forget_scan(node)
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
        if rebuilt and counted(node):
            executors.add(id(node.get_executor()))
    else:
        rebuilt = inputs_rebuilt or bool(node.always_build)
    plan[node] = rebuilt
    return rebuilt
