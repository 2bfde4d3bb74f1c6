"""The null build's recorder in-process: what a full run observes, how it classifies it, when it writes its
record, and what the fast path prints. A Recorder is driven by hand here, with the events SConstruct's hooks
would hand it (site_tools/null_build_record.py wires them up in a real run)."""
from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest
import SCons

from opencoti_build.incremental import null_build
from opencoti_build.incremental.null_build import record as record_mod

RUNNING = null_build.interpreter(SCons.__version__)


@pytest.fixture(autouse=True)
def settled_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every path these tests observe is looked at long after its last change (the racily-clean rule's own tests
    set the clock themselves)."""
    monkeypatch.setattr(record_mod, "now_ns", lambda: time.time_ns() + 10 * 10**9)


def recorder(tmp_path: Path, outputs: tuple[str, ...] = ()) -> null_build.Recorder:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    rec = null_build.Recorder(null_build.record_file(str(out)), ["-Q"], str(tmp_path), {"PATH": "/bin"}, RUNNING,
                              (null_build.record_file(str(out)),), ())
    rec.locate([str(out / "cache")], [str(out / "o"), *outputs], [])
    return rec


def write(path: Path, text: str = "x", mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def finish(rec: null_build.Recorder, failed: bool = False, end_lines: tuple[str, ...] = ()) -> null_build.Record | None:
    null_build.reading_done(rec)
    rec.build_ended = True
    rec.finish(failed, steps=4, end_lines=end_lines)
    return null_build.Record.load(rec.record_path)


def test_a_successful_run_records_what_it_observed_and_classifies_it(tmp_path: Path) -> None:
    opened, stated, tool, listed = (tmp_path / "SConscript", tmp_path / "a.c", tmp_path / "bin" / "probe",
                                    tmp_path / "inc")
    write(opened), write(stated), write(tool, mode=0o755), write(listed / "x.h")
    rec = recorder(tmp_path)
    rec.audit("open", (str(opened), "r", 0))
    rec.observe(str(stated))
    rec.observe(str(tool))
    rec.observe(str(tmp_path / "bin"))  # a directory only stat'ed: whether it is there, whatever its mode
    rec.audit("os.listdir", (str(listed),))
    rec.read_phase.append((1, "NOTE: toolchain\n"))
    rec.memo["compdb"] = "d1"
    record = finish(rec, end_lines=("run: sh dist/a.llamafile",))
    assert record is not None and record.steps == 4 and record.args == ["-Q"] and record.interpreter == RUNNING
    assert (record.replay, record.memo) == ([(1, "NOTE: toolchain\n")], {"compdb": "d1"})
    assert record.end_lines == ["run: sh dist/a.llamafile"]
    assert str(tmp_path / "bin") in record.reading_found
    assert record.paths[str(opened)] == null_build.signature(str(opened), False)
    assert record.listed >= {str(listed)} and record.paths[str(listed)][0] == "d"
    assert {str(opened), str(tool), str(listed)} <= record.reading  # read, run-able, listed: content counts
    assert str(stated) in record.reading_found and str(stated) not in record.reading  # only whether it is there
    assert null_build.difference(record, ["-Q"], str(tmp_path), {"PATH": "/bin"}, RUNNING) is None
    write(stated, "y")
    assert null_build.difference(record, ["-Q"], str(tmp_path), {"PATH": "/bin"}, RUNNING) == f"{stated} changed"


def test_the_code_that_ran_is_recorded_as_read(tmp_path: Path) -> None:
    record = finish(recorder(tmp_path))
    assert null_build.__file__ in record.paths and null_build.__file__ in record.reading
    assert os.path.abspath(pytest.__file__) in record.paths


@pytest.mark.parametrize("how", ["failed", "not ok", "no build end"])
def test_no_record_is_written_for_a_run_that_did_not_end_well_and_a_stale_one_goes(tmp_path: Path, how: str) -> None:
    rec = recorder(tmp_path)
    write(Path(rec.record_path), "stale")
    rec.ok = how != "not ok"
    null_build.reading_done(rec)
    rec.build_ended = how != "no build end"
    rec.finish(how == "failed", steps=1)
    assert not os.path.exists(rec.record_path)


def test_a_run_refused_while_reading_leaves_the_last_record(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    write(Path(rec.record_path), "the last run's")
    rec.finish(True, steps=0)  # reading never ended
    assert Path(rec.record_path).read_text() == "the last run's"


def test_an_input_that_changed_during_the_run_leaves_no_record_an_output_may(tmp_path: Path) -> None:
    source, output = write(tmp_path / "a.c"), write(tmp_path / "out" / "o" / "a.o")
    rec = recorder(tmp_path)
    rec.observe(str(source)), rec.observe(str(output))
    write(output, "rebuilt")
    assert finish(rec) is not None  # the output is recorded as the build left it
    rec = recorder(tmp_path)
    rec.observe(str(source))
    write(source, "edited meanwhile")
    assert finish(rec) is None


def test_what_is_never_observed(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    cache_entry = write(tmp_path / "out" / "cache" / "ab" / "entry")
    bytecode = write(tmp_path / "__pycache__" / "m.cpython-311.pyc")
    for path in (str(cache_entry), str(bytecode), "/proc/self/status", "/dev/null", "/sys/kernel"):
        rec.observe(path)
    rec.observe(3)  # a descriptor
    rec.audit("open", (None, "r", 0))
    rec.audit("open", (5, "r", 0))
    assert rec.first == {}
    rec.audit("os.listdir", (None,))  # the working directory
    assert os.path.abspath(".") in rec.listed


def test_what_is_opened_after_reading_is_not_the_reading(tmp_path: Path) -> None:
    during, after = write(tmp_path / "during.py"), write(tmp_path / "after.o")
    rec = recorder(tmp_path)
    rec.audit("open", (str(during), "r", 0))
    null_build.reading_done(rec)
    rec.audit("open", (str(after), "r", 0))
    assert str(during) in rec.used and str(after) not in rec.used
    assert str(during) in rec.reading and str(after) not in rec.reading | rec.reading_found


def test_a_directory_listed_before_the_outputs_were_known_is_listed_again_without_them(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write(tmp_path / "src" / "a.c")
    rec = null_build.Recorder(str(tmp_path / "record"), [], str(tmp_path), {}, RUNNING, (), ())
    rec.observe(str(tmp_path / "src"), listed=True)
    write(tmp_path / "src" / "a.o")  # a cold build's output beside its source
    write(out / "x")
    rec.observe(str(out / "x"))
    rec.locate([str(out)], [str(tmp_path / "src" / "a.o")], [str(tmp_path / "sconsign")])
    assert str(out / "x") not in rec.first  # under an ignored place now
    assert rec.first[str(tmp_path / "src")] == null_build.signature(str(tmp_path / "src"), True, rec.hidden)
    assert rec.present == [str(tmp_path / "sconsign")] and str(tmp_path / "sconsign") in rec.ignored


def test_a_program_run_is_observed_where_path_finds_it_and_git_adds_its_repository(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    git_dir = tmp_path / "repo" / ".git"
    write(git_dir / "HEAD", "ref: refs/heads/main\n")
    probe = write(tmp_path / "bin" / "probe", mode=0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    rec = recorder(tmp_path)
    rec.audit("subprocess.Popen", (None, ["probe", "--version"], None, None))
    assert str(probe) in rec.used
    rec.audit("subprocess.Popen", (b"/usr/bin/git", [b"git", b"-C", b"repo", b"rev-parse", b"HEAD"], str(tmp_path),
                                   None))
    assert {str(git_dir), str(git_dir / "HEAD"), str(git_dir / "index"), str(git_dir / "packed-refs"),
            str(git_dir / "refs/heads/main")} <= rec.used
    rec.audit("subprocess.Popen", (None, "", None, None))  # nothing to run: nothing observed
    rec.audit("subprocess.Popen", (None, [], None, None))


def test_git_files_follow_the_head_ref_and_the_c_option(tmp_path: Path) -> None:
    write(tmp_path / ".git" / "HEAD", "0123456789abcdef\n")  # a detached head: no ref file
    files = null_build.observe._git_files(["git", "rev-parse", "HEAD"], str(tmp_path))
    git = str(tmp_path / ".git")
    assert files == [git, f"{git}/HEAD", f"{git}/index", f"{git}/packed-refs"]
    assert null_build.observe._git_files(["git", "status", "-C"], str(tmp_path / "none"))[0] == str(tmp_path / "none" / ".git")


def test_the_fast_path_prints_what_a_full_null_build_prints(capsys) -> None:
    record = null_build.Record([], "/co", {}, RUNNING, {}, set(), [], (), [(1, "NOTE: a\n"), (2, "WARN: b\n")], 7,
                               end_lines=["run: sh a.llamafile"])
    null_build.replay(record, quiet=False, seconds=0.5)
    out, err = capsys.readouterr()
    assert err == "WARN: b\n"
    assert out == ("NOTE: a\nscons: done reading SConscript files.\nscons: Building targets ...\n"
                   "scons: done building targets.\nrun: sh a.llamafile\n0 compiled, 0 from cache, 7 up to date in 0.5 s\n")
    null_build.replay(record, quiet=True, seconds=0.5)
    assert capsys.readouterr().out == "NOTE: a\nrun: sh a.llamafile\n0 compiled, 0 from cache, 7 up to date in 0.5 s\n"


def test_the_reading_phase_output_is_kept_and_still_written(tmp_path: Path, capsys) -> None:
    rec = recorder(tmp_path)
    real = sys.stdout
    sys.stdout = null_build.observe._Tee(sys.stdout, 1, rec.read_phase)
    try:
        print("NOTE: toolchain")
        assert sys.stdout.encoding == real.encoding  # the rest of the stream is the real one's
    finally:
        null_build.reading_done(rec)
    assert sys.stdout is real
    assert rec.read_phase == [(1, "NOTE: toolchain"), (1, "\n")]
    assert capsys.readouterr().out == "NOTE: toolchain\n"


def test_a_carried_over_reading_is_vouched_for_by_the_next_record(tmp_path: Path) -> None:
    conf, header = write(tmp_path / "SConscript"), write(tmp_path / "x.h")
    rec = recorder(tmp_path)
    rec.audit("open", (str(conf), "r", 0))
    rec.observe(str(header))
    record = finish(rec)
    record.memo = {f"compdb {tmp_path}": "digest-1"}  # what that reading computed
    carry = null_build.carry_over(record, ["-Q"], str(tmp_path), {"PATH": "/bin"}, RUNNING)
    assert carry is not None and carry.implicit_cache and carry.memo == record.memo
    second = recorder(tmp_path)
    second.seed(record, carry)
    memo = null_build.Memo(carried=dict(carry.memo), kept=second.memo)  # as SConstruct makes the run's
    assert memo.remembered(f"compdb {tmp_path}") == "digest-1" and memo.remembered("other") is None
    memo.remember("compdb next", "digest-2")
    assert second.memo == {"compdb next": "digest-2"}  # what the next record keeps
    assert second.first[str(conf)] == record.paths[str(conf)]
    assert second.carried == set(carry.now) - record.reading - record.reading_found
    assert str(conf) in second.kept_reading
    again = finish(second)
    assert str(conf) in again.reading and str(header) in again.paths


def test_start_observes_stats_and_output_from_then_on(tmp_path: Path, monkeypatch) -> None:
    hooks: list = []
    monkeypatch.setattr(sys, "addaudithook", hooks.append)  # a real hook could never be removed again
    real = os.stat, os.lstat, sys.stdout, sys.stderr
    seen, opened, relative = write(tmp_path / "seen.h"), write(tmp_path / "opened.py"), write(tmp_path / "rel.h")
    (tmp_path / "link").symlink_to(seen)
    rec = null_build.start(str(tmp_path / "record"), ["-Q", "host"], RUNNING)
    try:
        os.stat(seen)
        os.lstat(tmp_path)
        assert os.path.islink(tmp_path / "link")  # lstat's own arguments still reach it
        assert stat.S_ISLNK(os.stat(tmp_path / "link", follow_symlinks=False).st_mode)
        fd = os.open(tmp_path, os.O_RDONLY)
        try:
            os.stat("rel.h", dir_fd=fd)  # relative to a directory descriptor: not a path of the run's own
        finally:
            os.close(fd)
        print("NOTE: reading")
        print("WARN: reading", file=sys.stderr)
    finally:
        os.stat, os.lstat, sys.stdout, sys.stderr = real
    assert hooks == [rec.audit]
    hooks[0]("open", (str(opened), "r", 0))
    assert (rec.record_path, rec.args, rec.cwd, rec.interpreter) == (str(tmp_path / "record"), ["-Q", "host"],
                                                                     os.getcwd(), RUNNING)
    assert rec.environ == null_build.environment(os.environ) and rec.ignored == (str(tmp_path / "record"),)
    assert {str(seen), str(tmp_path), str(opened)} <= rec.first.keys() and str(opened) in rec.used
    assert os.path.abspath("rel.h") not in rec.first and str(relative) not in rec.first
    assert rec.read_phase == [(1, "NOTE: reading"), (1, "\n"), (2, "WARN: reading"), (2, "\n")]
    assert rec.memo == {}  # filled by the run's Memo (SConstruct's), not by observing


def test_the_record_lives_in_the_build_directory() -> None:
    assert null_build.record_file("/co/build") == "/co/build/.null-build"


def test_a_reading_read_ahead_is_vouched_for_only_while_what_it_used_holds(tmp_path: Path) -> None:
    """A build server's reader (opencoti_scons/reader.py) asks, when its request comes: what the reading read or
    listed must be unchanged; what it only stat'ed must still be there as the same kind of thing."""
    opened, stated, listed = write(tmp_path / "SConscript"), write(tmp_path / "a.c"), tmp_path / "inc"
    write(listed / "x.h")
    rec = recorder(tmp_path)
    rec.audit("open", (str(opened), "r", 0))
    rec.observe(str(stated))
    rec.audit("os.listdir", (str(listed),))
    null_build.reading_done(rec)
    assert rec.reading_changed() is None
    write(stated, "edited")  # a source the SConscripts only looked for: the build reads it afresh
    assert rec.reading_changed() is None
    write(listed / "y.h")
    assert rec.reading_changed() == f"{listed} changed"
    (listed / "y.h").unlink()
    assert rec.reading_changed() is None
    stated.unlink()
    stated.mkdir()
    assert rec.reading_changed() == f"{stated} appeared, vanished or changed kind"
    stated.rmdir()
    write(stated, "back")
    write(opened, "edited SConscript")
    assert rec.reading_changed() == f"{opened} changed"


def test_a_file_the_reading_took_a_fact_from_may_change_while_it_gives_that_fact(tmp_path: Path) -> None:
    """A prebuilt host binary, a model: the SConscripts check them and keep what the check says (a version, a list of
    names), so new bytes that say the same leave the reading as it was; the build reads the file afresh."""
    host = write(tmp_path / "host", "llamafile v1 | build 1")
    rec = recorder(tmp_path)
    rec.audit("open", (str(host), "rb", 0))

    def version() -> str:
        text = host.read_text()
        if not text.startswith("llamafile v"):
            raise ValueError("not a llamafile")  # what a check raises on a bad input
        return text.split(" | ")[0]

    rec.derive(host, null_build.Fact(version, version()))
    null_build.reading_done(rec)
    write(host, "llamafile v1 | build 2")
    assert rec.reading_changed() is None and rec.rederived == {str(host)}
    rec.retake(set(rec.first) - rec.reading | rec.rederived, {})  # what the reader does as it resumes
    assert rec.first[str(host)] == null_build.signature(str(host), False)
    for text, said in (("llamafile v2 | build 3", f"{host} changed"), ("garbage", f"{host} changed")):
        rec.rederived.clear()  # a new check (one per request, in a reader)
        write(host, text)
        assert rec.reading_changed() == said


def test_a_carried_over_reading_holds_for_a_file_whose_fact_holds(tmp_path: Path) -> None:
    model = write(tmp_path / "model.gguf", "GGUF v3 | weights 1")
    rec = recorder(tmp_path)
    rec.audit("open", (str(model), "rb", 0))
    record = finish(rec)
    write(model, "GGUF v3 | weights 2")
    args = (["-Q"], str(tmp_path), {"PATH": "/bin"}, RUNNING)
    assert null_build.carry_over(record, *args) is None
    carry = null_build.carry_over(record, *args, fact_holds=lambda path: path == str(model))
    assert carry is not None and carry.now[str(model)] == null_build.signature(str(model), False)


def test_retaken_paths_count_as_first_seen_now(tmp_path: Path) -> None:
    source = write(tmp_path / "a.c")
    rec = recorder(tmp_path)
    rec.observe(str(source))
    null_build.reading_done(rec)
    write(source, "edited after the reading")
    rec.retake([str(source)], {})
    assert rec.first[str(source)] == null_build.signature(str(source), False)
    rec.retake([str(source)], {str(source): None})  # a signature just taken (a carry-over's) is used as it is
    assert rec.first[str(source)] is None


# --- git's racily-clean rule: a stat taken within its file's timestamp tick does not vouch for the bytes ---------

def looked_at_the_change(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """From now on the clock reads the moment ``path`` last changed: every stat of it is within its tick."""
    changed = os.stat(path).st_ctime_ns
    monkeypatch.setattr(record_mod, "now_ns", lambda: changed)


def test_an_input_stat_ed_within_its_tick_is_not_vouched_for(tmp_path: Path, monkeypatch) -> None:
    """A header edited, read by the build and put back within one second (ext2) keeps its stat: the record must not
    answer for it, so the next run takes the full path, whose decider hashes it again."""
    header, opened = write(tmp_path / "x.h"), write(tmp_path / "SConscript")
    rec = recorder(tmp_path)
    looked_at_the_change(monkeypatch, header)
    rec.observe(str(header))
    rec.audit("open", (str(opened), "r", 0))
    monkeypatch.setattr(record_mod, "now_ns", lambda: time.time_ns() + 10 * 10**9)
    record = finish(rec)
    assert record is not None and record.unsettled == {str(header), str(opened)}
    assert null_build.difference(record, ["-Q"], str(tmp_path), {"PATH": "/bin"}, RUNNING) == (
        f"{min(str(header), str(opened))} was stat'ed within its timestamp tick (it may have changed unseen)")
    assert null_build.paths_difference(record, only=[]) is not None  # whatever a watcher saw: never answered
    # the SConscripts read a file that may have changed unseen: their reading is not carried over either
    assert null_build.carry_over(record, ["-Q"], str(tmp_path), {"PATH": "/bin"}, RUNNING) is None
    record.unsettled.discard(str(opened))  # only a build-phase file: the reading holds, the stat is taken again
    carry = null_build.carry_over(record, ["-Q"], str(tmp_path), {"PATH": "/bin"}, RUNNING)
    assert carry is not None and carry.unsettled == frozenset()


def test_a_reading_read_ahead_is_not_vouched_for_when_it_read_within_a_tick(tmp_path: Path, monkeypatch) -> None:
    opened = write(tmp_path / "SConscript")
    rec = recorder(tmp_path)
    looked_at_the_change(monkeypatch, opened)
    rec.audit("open", (str(opened), "r", 0))
    null_build.reading_done(rec)
    assert rec.reading_changed() == f"{opened} was stat'ed within its timestamp tick (it may have changed unseen)"


def test_the_code_counts_from_when_the_run_started(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    record = finish(rec)
    assert null_build.__file__ not in record.unsettled  # the clock of these tests: long after any change
    rec = recorder(tmp_path)
    rec.started_ns = 1  # a run started before its code last changed: imported within its tick, for all it knows
    record = finish(rec)
    assert {null_build.__file__, os.path.abspath(pytest.__file__)} <= record.unsettled


def test_outputs_count_from_the_end_and_their_last_jiffy_is_waited_for(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(record_mod, "now_ns", time.time_ns)  # the real clock
    output = write(tmp_path / "out" / "o" / "a.o")
    rec = recorder(tmp_path)
    rec.observe(str(output))
    write(output, "just built")
    settles = null_build.signed(str(output), False)[1]
    record = finish(rec)
    assert time.time_ns() >= settles and record is not None
    assert str(output) not in record.unsettled


def test_outputs_of_the_runs_last_second_on_coarse_stamps_are_not_vouched_for(tmp_path: Path, monkeypatch) -> None:
    from opencoti_build.incremental import timestamps

    monkeypatch.setattr(record_mod, "now_ns", time.time_ns)
    monkeypatch.setattr(timestamps, "granularity_ns", lambda st: timestamps.SECOND_NS)  # ext2: whole seconds
    output = write(tmp_path / "out" / "o" / "a.o")
    rec = recorder(tmp_path)
    rec.observe(str(output))
    started = time.monotonic()
    record = finish(rec)
    assert time.monotonic() - started < 0.5  # not waited for: the next run takes the full path instead
    assert record is not None and record.unsettled >= {str(output)}
