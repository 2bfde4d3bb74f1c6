"""One run's progress state in-process: step numbers, what each finished step counts as, the end lines and the
plan's N, over real SCons file nodes with stand-in builders (as SCons's own unit tests use its FS)."""
from __future__ import annotations

import io
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import SCons.Action
import SCons.Environment
import SCons.Errors
import SCons.Executor
import SCons.Node
import SCons.Node.FS
import SCons.Script.Main

from opencoti_build import files
from opencoti_build.incremental import timestamps
from opencoti_build.report import steplines, summary, trace
from opencoti_build.report.notes import Notes
from opencoti_scons import engine
from opencoti_scons.progress import BuildRun, count_as, counted, moved_inputs
from opencoti_scons.stamps import Stamps


class _Task:
    def __init__(self, *targets: SCons.Node.Node) -> None:
        self.targets = list(targets)

    def exc_info(self) -> tuple:
        return None, None, None


@pytest.fixture
def fs(tmp_path: Path) -> SCons.Node.FS.FS:
    return SCons.Node.FS.FS(str(tmp_path))


def _built(fs: SCons.Node.FS.FS, name: str, executor: object | None = None) -> SCons.Node.FS.File:
    node = fs.File(name)
    node.builder = SimpleNamespace(name="stand-in")
    node.executor = executor or SimpleNamespace(name=name, cleanup=lambda: None)
    return node


def test_built_files_are_steps_and_sources_and_bookkeeping_are_not(fs) -> None:
    compdb = _built(fs, "compile_commands.json")
    compdb.attributes.not_a_step = True
    assert counted(_built(fs, "a.o"))
    assert not counted(fs.File("a.c")) and not counted(compdb) and not counted(fs.Dir("out"))


def test_each_step_numbers_its_first_line_and_numbers_only_grow_down_the_output(fs) -> None:
    out = io.StringIO()
    run = BuildRun(started=0.0, out=out)
    run.planned = 2
    x86 = _built(fs, "a.o")
    twin = _built(fs, ".aarch64/a.o", executor=x86.executor)  # one step writes both halves
    b, c = _built(fs, "b.o"), _built(fs, "c.o")
    for node, text in ((x86, "FATCC a.o"), (b, "LINK b.o"), (twin, "more of a.o"), (b, "Verifying b.o"),
                       (c, "CC c.o"), (fs.File("a.c"), "a source's line")):
        run.say_step(node, text)
    # a later line of a step already numbered carries none; N grows when more steps start than planned
    assert out.getvalue().splitlines() == ["[1/2] FATCC a.o", "[2/2] LINK b.o", "more of a.o", "Verifying b.o",
                                           "[3/3] CC c.o", "a source's line"]


def test_steps_printing_from_many_threads_get_every_number_once_in_order(fs) -> None:
    out = io.StringIO()
    run = BuildRun(started=0.0, out=out)
    nodes = [_built(fs, f"{i}.o") for i in range(400)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda node: run.say_step(node, f"CC {node}"), nodes))
    assert [n for n, _ in summary.progress(out.getvalue())] == list(range(1, 401))


@pytest.mark.parametrize(("targets", "line"), [
    (["out/a.o"], "CACHED out/a.o"),
    (["out/a.o", "out/.aarch64/a.o"], "CACHED out/a.o (+ .aarch64)"),
    (["a.o", ".aarch64/a.o"], "CACHED a.o (+ .aarch64)"),
    (["out/bin/x", "out/bin/x.aarch64.elf", "out/bin/x.com.dbg"], "CACHED out/bin/x (+ 2 more)"),
])
def test_a_restored_step_is_one_line_shaped_like_the_others(targets: list[str], line: str) -> None:
    assert steplines.cached_line(targets) == line


@pytest.mark.parametrize(("state", "cached", "kind"), [(SCons.Node.executing, 0, "compiled"),
                                                       (SCons.Node.executing, 1, "cached"),
                                                       (SCons.Node.up_to_date, 0, "current")])
def test_a_finished_step_counts_as_what_it_did(fs, state: int, cached: int, kind: str) -> None:
    run, node, seen = BuildRun(started=0.0), _built(fs, "a.o"), []
    node.set_state(state)
    node.cached = cached

    run.executed(_Task(node), lambda task: seen.append((task.targets[0].cached, task.targets[0].get_state())))

    assert seen == [(cached, state)]  # SCons's own executed ran, after the state was read
    assert {k: getattr(run.counts, k) for k in ("compiled", "cached", "current", "failed")} == {
        "compiled": 0, "cached": 0, "current": 0, "failed": 0, kind: 1}
    assert run.steps() == 1


def test_an_input_saved_after_the_run_stat_it_moves_and_its_step_is_not_recorded(fs, tmp_path: Path,
                                                                                   monkeypatch) -> None:
    monkeypatch.setattr(SCons.Node.FS, "Save_Strings", True)  # the SConscripts are read: SCons keeps stats
    (tmp_path / "a.h").write_text("one")
    (tmp_path / "b.h").write_text("two")
    header, other = fs.File("a.h"), fs.File("b.h")
    node = _built(fs, "a.o")
    node.add_source([header, other, fs.File("never-stat.h")])
    sconsign = node.dir.sconsign()
    header.stat(), other.stat()  # what the run decided with
    assert moved_inputs(node) == []
    (tmp_path / "a.h").write_text("ONE")  # an editor saves while the step runs
    assert moved_inputs(node) == ["a.h"]

    run = BuildRun(started=0.0, out=io.StringIO())
    node.set_state(SCons.Node.executing)
    sconsign.entries["a.o"] = "what the last run recorded"
    run.executed(_Task(node), lambda task: sconsign.to_be_merged.update({"a.o": node}))  # SCons's visited()
    assert "a.o" not in sconsign.to_be_merged and "a.o" not in sconsign.entries  # no record: the next run rebuilds
    assert run.counts.compiled == 1 and run.unsettled == {"a.o": ["a.h"]}
    assert run.end_lines(now=1.0)[0] == ("WARN: 1 input(s) changed while this build read them (a.h): 1 step(s) built "
                                         "from them were not recorded or cached; the next build redoes them")


def test_a_pair_is_cached_only_when_both_halves_came_from_the_cache(fs) -> None:
    run = BuildRun(started=0.0)
    x86, twin = _built(fs, "a.o"), _built(fs, ".aarch64/a.o")
    x86.set_state(SCons.Node.executing)
    x86.cached, twin.cached = 1, 0
    run.executed(_Task(x86, twin), lambda task: None)
    assert (run.counts.compiled, run.counts.cached) == (1, 0)


def test_sources_and_failures_are_counted_apart(fs) -> None:
    run, called = BuildRun(started=0.0), []
    source = fs.File("a.c")
    source.set_state(SCons.Node.up_to_date)
    run.executed(_Task(source), called.append)
    run.failed(_Task(_built(fs, "b.o")), called.append)
    run.failed(_Task(fs.File("c.c")), called.append)
    assert (run.counts.current, run.counts.failed, run.steps(), len(called)) == (0, 1, 0, 3)


def test_the_end_lines_are_the_reports_then_the_summary(fs) -> None:
    run = BuildRun(started=100.0)
    run.counts.add("compiled")
    run.reports += [lambda: ["cache: local 1 hit"], lambda: []]
    assert run.end_lines(now=102.25) == ["cache: local 1 hit", "1 compiled, 0 from cache, 0 up to date in 2.2 s"]
    assert summary.parse("\n".join(run.end_lines(now=102.25))) == {"compiled": 1, "cached": 0, "current": 0,
                                                                  "failed": 0, "packaged": 0, "installed": 0}


def test_packaging_and_installing_steps_are_counted_apart_from_compiles(fs) -> None:
    run = BuildRun(started=1.0)
    compiled, artifact, manifest, copy = (_built(fs, name) for name in ("a.o", "x.llamafile", "x.json", "bin/x"))
    count_as([artifact, manifest], summary.PACKAGED)
    count_as([copy], summary.INSTALLED)
    for node in (compiled, artifact, manifest, copy):
        node.set_state(SCons.Node.executing)
        run.executed(_Task(node), lambda task: None)
    assert (run.counts.compiled, run.counts.packaged, run.counts.installed, run.steps()) == (1, 2, 1, 4)
    done = run.end_lines(now=2.5)[-1]
    assert done == "1 compiled, 0 from cache, 0 up to date, 2 packaged, 1 installed in 1.5 s"
    assert summary.parse(done) == {"compiled": 1, "cached": 0, "current": 0, "failed": 0, "packaged": 2,
                                   "installed": 1}
    assert summary.dry_line(run.counts) == ("would compile 1, restore 0 from cache, 0 up to date, package 2, install 1 "
                                            "(dry run: nothing was written)")


class _Step(SCons.Node.FS.File):
    """A file step whose up-to-date answer is given (File has slots: its methods cannot be set per node)."""

    def __init__(self, fs: SCons.Node.FS.FS, name: str, sources: list, current: bool, asked: list[str]) -> None:
        super().__init__(name, fs.Dir("."), fs)
        self.builder = SimpleNamespace(name="stand-in")
        self.executor = SimpleNamespace(name=name, cleanup=lambda: None)
        self.sources, self.depends, self.implicit = sources, [], []
        self.current, self.asked = current, asked

    def children(self, scan: int = 1) -> list:
        return self.sources

    def exists(self) -> bool:
        return True

    def changed(self, node=None, allowcache=False) -> bool:
        return not self.current

    def is_up_to_date(self) -> bool:
        self.asked.append(self.name)
        return self.current


def test_the_plan_counts_a_step_whose_input_is_rebuilt_without_asking_it(fs) -> None:
    asked: list[str] = []
    obj = _Step(fs, "a.o", [fs.File("a.c")], current=False, asked=asked)
    archive = _Step(fs, "liba.a", [obj], current=True, asked=asked)  # current by itself, rebuilt because a.o is
    other = _Step(fs, "b.o", [fs.File("b.c")], current=True, asked=asked)
    out = io.StringIO()
    run = BuildRun(started=0.0, out=out)

    assert run.plan([archive, other]) == 2 == run.planned
    assert asked == ["a.o", "b.o"]  # liba.a was never asked: its input is rebuilt
    assert archive.implicit is None  # what it scanned before its input was rebuilt is dropped
    run.say_step(obj, "CC a.o")
    assert out.getvalue() == "[1/2] CC a.o\n"


def test_lines_go_to_the_stdout_of_the_moment_they_are_written(fs, monkeypatch) -> None:
    run = BuildRun(started=0.0)  # made while the null build's recorder had swapped stdout for its copy
    later = io.StringIO()
    monkeypatch.setattr("sys.stdout", later)
    run.say("3 compiled")
    assert later.getvalue() == "3 compiled\n"


def test_a_note_is_said_once_a_run_however_many_parts_reach_it() -> None:
    out = io.StringIO()
    run = BuildRun(started=0.0, out=out)
    for _ in range(2):
        run.note("web UI", "NOTE: web UI off")
    run.note("toolchain", "toolchain: stand-in")
    assert out.getvalue() == "NOTE: web UI off\ntoolchain: stand-in\n"


def _notes_run(path: Path, always: bool = False) -> tuple[BuildRun, io.StringIO]:
    out = io.StringIO()
    return BuildRun(started=0.0, out=out, notes=Notes(path, always=always)), out


def test_a_note_is_said_again_only_when_its_line_changes_or_verbose_asks(tmp_path: Path) -> None:
    said = tmp_path / "out" / "notes-said.json"
    lines = []
    for toolchain, always in [("stand-in", False), ("stand-in", False), ("cosmocc 4.0.2", False),
                              ("stand-in", False), ("stand-in", True)]:
        run, out = _notes_run(said, always)
        run.note("toolchain", f"toolchain: {toolchain}")
        run.note("web UI", "NOTE: web UI off")
        run.notes.save()
        lines.append(out.getvalue().splitlines())
    assert lines == [["toolchain: stand-in", "NOTE: web UI off"], [], ["toolchain: cosmocc 4.0.2"],
                     ["toolchain: stand-in"], ["toolchain: stand-in", "NOTE: web UI off"]]
    for web_ui_note in (None, "NOTE: web UI off"):  # a run with nothing to say on the topic: the next line is news
        run, out = _notes_run(said)
        run.note("web UI", web_ui_note)
        run.notes.save()
        assert out.getvalue() == (f"{web_ui_note}\n" if web_ui_note else "")
    assert [p.name for p in said.parent.iterdir()] == ["notes-said.json"]  # written by rename, no temporary left


def test_a_warn_is_said_on_stderr_when_it_changes_or_is_asked_for_and_is_news_again_once_gone(tmp_path: Path,
                                                                                                capsys) -> None:
    said = tmp_path / "notes-said.json"
    heard = []
    for lines, always in [(["WARN: cuda skipped: no nvcc"], False), (["WARN: cuda skipped: no nvcc"], False),
                          (["WARN: cuda skipped: no nvcc"], True), (None, False), (["WARN: cuda skipped: no nvcc"], False),
                          (["WARN: a", "WARN: b"], False)]:
        run, out = _notes_run(said)
        run.warn("cuda skipped", lines, always=always)
        run.notes.save()
        captured = capsys.readouterr()
        assert out.getvalue() == captured.out == ""  # stderr only
        heard.append(captured.err)
    assert heard == ["WARN: cuda skipped: no nvcc\n", "", "WARN: cuda skipped: no nvcc\n", "",
                     "WARN: cuda skipped: no nvcc\n", "WARN: a\nWARN: b\n"]


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"toolchain": 3}'])
def test_a_damaged_notes_file_only_means_the_notes_are_said_again(tmp_path: Path, content: str) -> None:
    said = tmp_path / "notes-said.json"
    said.write_text(content)
    run, out = _notes_run(said)
    run.note("toolchain", "toolchain: stand-in")
    run.notes.save()
    assert out.getvalue() == "toolchain: stand-in\n"
    assert json.loads(said.read_text()) == {"toolchain": "toolchain: stand-in"}


def test_notes_without_a_file_keep_nothing(tmp_path: Path) -> None:  # a dry run, `-h`
    run, out = _notes_run(None)
    run.note("toolchain", "toolchain: stand-in")
    run.notes.save()
    assert out.getvalue() == "toolchain: stand-in\n" and list(tmp_path.iterdir()) == []


class _FailedTask(_Task):
    """A task SCons hands to BuildTask.failed: its exception, and what failing does."""

    def __init__(self, node: SCons.Node.Node, error: Exception) -> None:
        super().__init__(node)
        self.node, self.error, self.failed_with = node, error, None

    def exc_info(self) -> tuple:
        return type(self.error), self.error, None

    def do_failed(self, status: int) -> None:
        self.failed_with = (status, self.exception[1].errstr)

    def exc_clear(self) -> None:
        self.error = None


@pytest.mark.parametrize("error", [SCons.Errors.BuildError(errstr="Build interrupted."),  # SCons stopped the step
                                   SCons.Errors.BuildError(errstr="Error 130", status=130),  # the driver's exit 130
                                   SCons.Errors.BuildError(errstr="Error -2", status=-2)],  # gcc killed by SIGINT
                         ids=["marked", "exit-130", "killed"])
def test_a_step_ctrl_c_stopped_fails_without_its_line_and_the_build_ends_in_one(fs, error, capsys) -> None:
    run, node, originals = BuildRun(started=1.0, out=io.StringIO()), _built(fs, "a.o"), []
    run.counts.add("compiled", 3)
    task = _FailedTask(node, error)
    run.failed(task, originals.append)
    assert originals == [] and task.failed_with == (2, error.errstr) and task.error is None
    assert capsys.readouterr().err == ""  # no "scons: *** [a.o] Build interrupted."
    assert run.end_lines(now=3.0) == ["interrupted: 3 compiled, 0 from cache, 0 up to date in 2.0 s; the next build "
                                      "redoes what this one left (nothing unfinished is kept)"]


def test_any_other_failure_is_scons_own(fs) -> None:
    run, node, originals = BuildRun(started=0.0), _built(fs, "a.o"), []
    run.failed(_FailedTask(node, SCons.Errors.BuildError(errstr="Error 1", status=1)), originals.append)
    assert len(originals) == 1 and run.counts.failed == 1 and not run.interrupted


def test_a_trace_is_one_complete_event_per_step_and_a_named_track_per_worker(tmp_path: Path) -> None:
    traced = trace.Trace(origin=100.0)
    first, second = traced.worker(7001), traced.worker(7002)
    assert (first, second, traced.worker(7001)) == (1, 2, 1)
    traced.add(trace.Step(("b.o",), "cuda", "cached", 100.5, 100.5000004, second))
    traced.add(trace.Step(("a.o", ".aarch64/a.o"), "fat", "compiled", 100.25, 101.0, first))
    assert traced.document() == {"displayTimeUnit": "ms", "traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "worker 1"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "worker 2"}},
        {"ph": "X", "name": "a.o", "cat": "fat", "pid": 1, "tid": 1, "ts": 250000, "dur": 750000,
         "args": {"outcome": "compiled", "lane": "fat", "targets": ["a.o", ".aarch64/a.o"]}},
        {"ph": "X", "name": "b.o", "cat": "cuda", "pid": 1, "tid": 2, "ts": 500000, "dur": 0,
         "args": {"outcome": "cached", "lane": "cuda", "targets": ["b.o"]}}]}


def test_a_trace_that_cannot_be_written_is_one_warn_before_the_summary(tmp_path: Path) -> None:
    out = io.StringIO()
    (tmp_path / "afile").write_text("")
    run = BuildRun(started=0.0, out=out, trace_file=str(tmp_path / "afile" / "trace.json"))
    run.say_end()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"WARN: TRACE={tmp_path / 'afile' / 'trace.json'}: cannot write the trace: ")
    assert summary.parse(lines[-1]) is not None and len(lines) == 2


def test_what_a_killed_run_left_while_writing_the_notes_or_a_trace_is_swept(tmp_path: Path) -> None:
    dead = [tmp_path / ".notes-said.json.k1ll3d.tmp", tmp_path / ".trace.json.k1ll3d.tmp"]  # no writer holds them
    for path in dead:
        path.write_text("half")
    run, _ = _notes_run(tmp_path / "notes-said.json")
    run.note("toolchain", "toolchain: stand-in")
    run.notes.save()
    traced = trace.Trace(origin=0.0)
    traced.write(tmp_path / "trace.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes-said.json", "trace.json"]


def test_a_stamp_taken_within_its_files_tick_is_one_no_run_matches_and_a_built_file_settles_at_the_end(
        fs, tmp_path: Path, monkeypatch) -> None:
    """Git's racily-clean rule for the decider (opencoti_scons/stamps.py): a stat that may not vouch for the bytes
    gets a stamp below zero, never given again; what the run wrote gets its real stamp back once it is settled when
    the sconsign is written, an input does not (it was read when stamped)."""
    header, obj = tmp_path / "a.h", tmp_path / "a.o"
    header.write_text("x")
    obj.write_text("o")
    stamps = Stamps()
    source, built = fs.File("a.h"), _built(fs, "a.o")
    monkeypatch.setattr(timestamps, "settled", lambda st, looked_at: False)  # both looked at within their tick
    given = {node: stamps.stamp(node, node.stat()) for node in (source, built)}
    assert all(stamp < 0 for stamp in given.values()) and stamps.stamp(source, source.stat()) != given[source]
    assert stamps.unsettled() == sorted(str(n) for n in (source, built))
    for node in (source, built):
        node.get_ninfo().timestamp = given[node]  # what the sconsign would record
    built.set_state(SCons.Node.executed)
    monkeypatch.undo()
    monkeypatch.setattr(timestamps, "settled", lambda st, looked_at: True)  # by the time the sconsign is written
    stamps.settle()
    assert built.get_ninfo().timestamp == files.stamp(os.stat(obj))  # a file the run wrote: its real stamp back
    assert source.get_ninfo().timestamp == given[source]  # an input stays withheld: the next run reads it again
    assert stamps.stamp(source, source.stat()) == files.stamp(os.stat(header))  # settled: the stat identity


TOOLS = str(Path(__file__).resolve().parents[2] / "site_scons/site_tools")


def test_two_runs_in_one_process_each_get_their_own_counts_and_lines(tmp_path: Path, monkeypatch) -> None:
    """The engine's patches are installed once per process, by the first run's tools; a second run (a build server's
    child, a test) must not feed the first's counts or print on its output."""
    monkeypatch.setattr(engine.Bound, "run", None)  # the patches stay installed: unbound, they are SCons's own
    fs = SCons.Node.FS.FS(str(tmp_path))
    env = SCons.Environment.Base(tools=[])
    future = time.time_ns() + 3600 * 10**9
    runs = []
    for name in ("first", "second"):
        run = BuildRun(started=0.0, out=io.StringIO())
        engine.bind(run)
        env.Tool("build_summary", toolpath=[TOOLS], run=run)
        env.Tool("exact_outputs", toolpath=[TOOLS])
        node = fs.File(f"{name}.o")
        node.builder = SimpleNamespace(name="stand-in")
        node.executor = SCons.Executor.Executor(SCons.Action.Action("touch $TARGET"), env, [], [node], [])
        node.set_state(SCons.Node.up_to_date)
        SCons.Script.Main.BuildTask.executed(SimpleNamespace(targets=[node], top=False, node=node,
                                                             tm=SimpleNamespace(trace=None)))
        (tmp_path / f"{name}.h").write_text("")
        os.utime(tmp_path / f"{name}.h", ns=(future, future))  # its stamp says so, once a run
        fs.File(f"{name}.h").getmtime()
        runs.append(run)

    assert [(run.counts.current, run.steps()) for run in runs] == [(1, 1), (1, 1)]
    assert [[line.split(" was ")[0] for line in run._out.getvalue().splitlines()] for run in runs] == [
        ["WARN: first.h"], ["WARN: second.h"]]
