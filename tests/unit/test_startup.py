"""opencoti_scons.startup: SConstruct's one answer to what a run is (one-shot, a build server's child or its
reader), and the order a reader's reading ends in."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from opencoti_scons import startup


def test_a_run_no_server_forked_is_one_shot_and_may_replay_and_say_its_wait(capsys) -> None:
    this_run = startup.this_run()
    assert this_run.kind is startup.Kind.ONE_SHOT and this_run.replays and this_run.ahead is None
    this_run.say("waiting for the build running in build (pid 42) to finish")
    assert capsys.readouterr().out == "waiting for the build running in build (pid 42) to finish\n"


def test_a_servers_child_is_what_the_server_said_it_is(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(startup, "_this_run", startup.this_run())  # put back after the test
    startup.enter(startup.Startup(startup.Kind.SERVER_CHILD))
    assert startup.this_run().kind is startup.Kind.SERVER_CHILD and startup.this_run().replays
    reader = startup.Startup(startup.Kind.READER, ahead=None)
    startup.enter(reader)
    assert startup.this_run() is reader and not reader.replays
    reader.say("waiting for the build running in build (pid 42) to finish")  # its request has not come yet
    assert capsys.readouterr().out == ""


def test_help_and_runs_never_recorded_start_no_recorder(tmp_path: Path) -> None:
    one_shot = startup.Startup(startup.Kind.ONE_SHOT)
    for args, asks_help in ((["-h"], True), (["--interactive"], False)):
        reading = one_shot.null_build_first(str(tmp_path), args, asks_help=asks_help, quiet=False)
        assert (reading.recorder, reading.record, reading.carried) == (None, None, None)
        assert reading.memo().carried == {} and reading.memo().kept == {}
    assert list(tmp_path.iterdir()) == []


class _Ahead:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def prepare(self) -> None:
        self.calls.append("prepare")

    def wait(self, reading: Any, build_dir: str, run: Any) -> None:
        self.calls.append(f"wait {build_dir}")


def test_a_reader_prepares_before_its_reading_ends_and_waits_after() -> None:
    ahead = _Ahead()
    reading = startup.Reading(None, None, None, "python")
    startup.Startup(startup.Kind.READER, ahead=ahead).reading_done(reading, "out", run=None)  # type: ignore[arg-type]
    assert ahead.calls == ["prepare", "wait out"]
    startup.Startup(startup.Kind.ONE_SHOT).reading_done(reading, "out", run=None)  # type: ignore[arg-type]


def test_each_run_starts_with_an_empty_scratch_directory_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "tmp" / "killed").mkdir(parents=True)
    (tmp_path / "tmp" / "killed" / "half.o").write_bytes(b"")
    startup.clean_scratch(str(tmp_path))
    assert list((tmp_path / "tmp").iterdir()) == [] and (tmp_path / "tmp").stat().st_mode & 0o777 == 0o700
