"""The resident build server (python3 -m opencoti_build serve | build | stop) on a private checkout: what a user
sees of it (outputs, the summary, the exit status, the server's log) against what one-shot scons runs do.

The seeded differential rounds (random edits through the server, each compared with a full evaluation and a
clean one-shot build) are in tests/soak/test_server.py.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencoti_build.server import native_client, protocol, request_loop
from opencoti_build.server.watcher import Changes, Watcher

from null_build_checkout import Checkout, append_text, assert_equals_clean_build, prepare
from scons_runs import compiled, summary
from server_runs import Server, build, client, native_build, popen_build, request_args, start


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Checkout:
    root = tmp_path_factory.mktemp("server")
    return prepare(root / "co", root / "cache", 1, 0)


@pytest.fixture(scope="module")
def server(checkout: Checkout) -> Iterator[Server]:
    started = start(checkout)
    yield started
    started.stop()


def _unclocked(text: str) -> str:
    """Output with the summary's time left out (the only thing two runs of the same build may print differently)."""
    return "\n".join(line.rsplit(" in ", 1)[0] if summary.parse(line + "\n") else line for line in text.splitlines())


def test_a_null_request_is_answered_from_the_record_as_a_scons_run_would_answer(checkout: Checkout,
                                                                              server: Server) -> None:
    first = build(checkout)
    assert first.returncode == 0, first.stdout + first.stderr
    null = build(checkout)
    assert null.returncode == 0, null.stdout + null.stderr
    assert server.answers()[-1] == request_loop.NULL_ANSWER
    counts = summary.parse(null.stdout)
    assert counts and counts["compiled"] == counts["cached"] == 0 and counts["current"] > 0
    server.reader_ready(0)  # the reader forked after the first request holds BUILD_DIR's lock while it reads ahead
    argv, env = checkout.command()  # the same request as a one-shot scons run in the checkout takes the fast path
    plain = subprocess.run([sys.executable, "-m", "SCons", *argv[5:]], cwd=checkout.root, env=env,
                           capture_output=True, text=True, timeout=900)
    assert plain.returncode == 0
    assert (_unclocked(null.stdout), null.stderr) == (_unclocked(plain.stdout), plain.stderr)


def test_a_header_edit_through_the_server_compiles_exactly_its_dependents(checkout: Checkout,
                                                                          server: Server) -> None:
    append_text(checkout.tree.joinpath(*GGML_H), "\n#define OPENCOTI_EDITED_THROUGH_THE_SERVER_1 1\n")
    would = checkout.run("-n")  # a one-shot dry run: what a scons run would compile now
    edited = build(checkout)
    assert edited.returncode == 0, edited.stdout + edited.stderr
    assert server.answers()[-1] == request_loop.FORKED_RUN
    assert compiled(edited) == compiled(would) != []
    assert checkout.run("-q").returncode == 0  # a full evaluation finds it current
    again = build(checkout)
    assert summary.parse(again.stdout)["compiled"] == 0 and server.answers()[-1] == request_loop.NULL_ANSWER
    assert_equals_clean_build(checkout, "after a header edit through the server")


GGML_H = ("llama.cpp", "ggml", "include", "ggml.h")


def test_a_comment_edit_through_the_server_compiles_no_fat_object(checkout: Checkout, server: Server) -> None:
    """opencoti_scons/code_decider.py in the server's runs (the Vulkan DSO's gcc compiles decide by bytes)."""
    append_text(checkout.tree.joinpath(*GGML_H), "\n/* a comment: no token changes, no line of it moves */\n")
    edited = build(checkout)
    assert edited.returncode == 0, edited.stdout + edited.stderr
    assert compiled(edited) == [] and checkout.run("-q").returncode == 0


def _planned(output: str) -> set[str]:
    """The N of the ``[n/N]`` step lines."""
    return {line.split("]")[0].split("/")[1] for line in output.splitlines() if line.startswith("[")}


def _declined(server: Server) -> str:
    """Why the reader declined the last request ("" when it did not)."""
    line = server.build_lines()[-1]
    return line.split("(the reader declined: ", 1)[1].split(")", 1)[0] if "(the reader declined: " in line else ""


def test_an_edit_after_a_run_is_built_by_the_reader_that_read_the_graph_ahead(checkout: Checkout,
                                                                             server: Server) -> None:
    append_text(checkout.tree.joinpath(*GGML_H), "\n#define OPENCOTI_A_RUN_THE_SERVER_FORKS_A_READER_AFTER_IT_2 1\n")
    assert build(checkout).returncode == 0
    append_text(checkout.tree.joinpath(*GGML_H), "\n#define OPENCOTI_BUILT_BY_THE_READER_3 1\n")
    would = checkout.run("-n")  # a one-shot dry run writes nothing: the reader's reading still holds
    edited = build(checkout)
    assert edited.returncode == 0, edited.stdout + edited.stderr
    assert server.answers()[-1] == request_loop.READ_AHEAD, server.build_lines()[-1]
    # the log says why it was not answered from the record: the edited header, by its path
    assert f"(the record does not hold: {checkout.tree.joinpath(*GGML_H)} changed)" in server.build_lines()[-1]
    assert compiled(edited) == compiled(would) != []
    assert _planned(edited.stdout) == _planned(would.stdout)  # the [n/N] plan's N, as a one-shot run counts it
    assert edited.stderr == ""
    assert checkout.run("-q").returncode == 0  # a full evaluation finds it current
    again = build(checkout)
    assert summary.parse(again.stdout)["compiled"] == 0 and server.answers()[-1] == request_loop.NULL_ANSWER
    assert_equals_clean_build(checkout, "after an edit built by the reader")


def test_a_source_the_reading_looked_at_then_edited_is_rebuilt_by_the_reader(checkout: Checkout,
                                                                               server: Server) -> None:
    """The SConscripts stat the sources they list (the reader's nodes knew their old stat): forgotten, so the
    edit is seen."""
    source = checkout.tree / "llamafile" / "main.cpp"
    append_text(source, "\n#define OPENCOTI_A_RUN_THE_SERVER_FORKS_A_READER_AFTER_IT_4 1\n")
    readers = server.readers_ready()
    assert build(checkout).returncode == 0
    server.reader_ready(after=readers)
    append_text(source, "\nint opencoti_reader_probe = 1;\n")
    would = checkout.run("-n")
    edited = build(checkout)
    assert edited.returncode == 0, edited.stdout + edited.stderr
    assert server.answers()[-1] == request_loop.READ_AHEAD, server.build_lines()[-1]
    assert compiled(edited) == compiled(would) == ["out/o/llamafile/main.cpp.o"]
    assert_equals_clean_build(checkout, "after a source edit built by the reader")


def test_a_reader_whose_reading_changed_declines_and_a_forked_run_builds(checkout: Checkout, server: Server) -> None:
    append_text(checkout.tree.joinpath(*GGML_H), "\n#define OPENCOTI_A_RUN_BEFORE_THE_VERSION_HEADER_CHANGES_5 1\n")
    readers = server.readers_ready()
    assert build(checkout).returncode == 0
    server.reader_ready(after=readers)  # it has read the version header as it was
    version = checkout.tree / "llamafile" / "version.h"  # the SConscripts read it (the artifacts' version)
    append_text(version, "\n#define OPENCOTI_READ_BY_THE_SCONSCRIPTS_6 1\n")
    would = checkout.run("-n")
    rebuilt = build(checkout)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert server.answers()[-1] == request_loop.FORKED_RUN and _declined(server) == f"{version} changed"
    assert compiled(rebuilt) == compiled(would) != []
    assert_equals_clean_build(checkout, "after the reader declined a changed reading")


def test_a_build_by_another_run_makes_the_server_read_ahead_again(checkout: Checkout, server: Server) -> None:
    """A one-shot scons run rewrites the sconsign the reader loaded: the watcher sees it, the server forks a new
    reader (the old one would decline), and the next edit is built by it."""
    append_text(checkout.tree.joinpath(*GGML_H), "\n#define OPENCOTI_A_RUN_A_READER_READS_AFTER_IT_7 1\n")
    readers = server.readers_ready()
    assert build(checkout).returncode == 0
    server.reader_ready(after=readers)
    append_text(checkout.tree.joinpath(*GGML_H), "\n#define OPENCOTI_BUILT_BY_A_ONE_SHOT_SCONS_RUN_8 1\n")
    assert checkout.run().returncode == 0  # writes the sconsign and the record the reader loaded
    append_text(checkout.tree.joinpath(*GGML_H), "\n#define OPENCOTI_THEN_THROUGH_THE_SERVER_9 1\n")
    would = checkout.run("-n")
    rebuilt = build(checkout)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert server.answers()[-1] == request_loop.READ_AHEAD, server.build_lines()[-1]
    assert compiled(rebuilt) == compiled(would) != []
    assert_equals_clean_build(checkout, "after another run, an edit built by a new reader")


def test_the_c_client_builds_and_answers_as_the_python_client_does(checkout: Checkout, server: Server) -> None:
    append_text(checkout.tree / "llama.cpp" / "ggml" / "include" / "ggml.h", "\n#define OPENCOTI_EDITED_BUILT_BY_THE_C_CLIENT_10 1\n")
    would = checkout.run("-n")
    edited = native_build(checkout, server)
    assert edited.returncode == 0, edited.stdout + edited.stderr
    assert server.answers()[-1] == request_loop.FORKED_RUN and compiled(edited) == compiled(would) != []
    native_null, python_null = native_build(checkout, server), build(checkout)
    assert server.answers()[-2:] == [request_loop.NULL_ANSWER] * 2
    assert (native_null.returncode, _unclocked(native_null.stdout), native_null.stderr) == \
        (python_null.returncode, _unclocked(python_null.stdout), python_null.stderr)
    assert_equals_clean_build(checkout, "after a header edit built by the C client")


def test_other_variables_or_no_server_run_scons_itself(checkout: Checkout, server: Server) -> None:
    answered = len(server.answers())
    other = build(checkout, "CPU_ONLY=1")  # another configuration: no server for it, so a plain scons run
    assert other.returncode == 0, other.stdout + other.stderr
    assert summary.parse(other.stdout) is not None
    for through in (build, lambda co, *extra: native_build(co, server, *extra)):
        moved = through(checkout, "-C", str(checkout.root))  # an option that moves the project: the server answers
        assert moved.returncode == 0, moved.stdout + moved.stderr  # "fallback", and scons runs in the client
        assert summary.parse(moved.stdout) is not None
    assert len(server.answers()) == answered


def test_a_request_may_pick_its_targets_and_output_with_per_request_variables(checkout: Checkout,
                                                                               server: Server) -> None:
    source = checkout.tree / "llamafile" / "main.cpp"
    append_text(source, "\n#define OPENCOTI_COMPILED_ALONE_11 1\n")
    args, env = request_args(checkout, f"FILE={source}", "VERBOSE=1")
    one = client(checkout.root, "build", *[a for a in args if a not in ("host", "vulkan")], "compile", env=env)
    assert one.returncode == 0, one.stdout + one.stderr
    assert server.answers()[-1] == request_loop.FORKED_RUN  # the same server: FILE and VERBOSE are the request's
    assert "[x86_64] " in one.stdout and summary.parse(one.stdout)["compiled"] == 1  # main.cpp's fat pair alone


def test_a_change_to_the_servers_code_restarts_it_before_the_request(checkout: Checkout, server: Server) -> None:
    pid = server.pid
    append_text(checkout.root / "site_scons" / "opencoti_build" / "tree" / "sources.py", "\n# a change the server must see\n")
    changed = build(checkout)
    assert changed.returncode == 0, changed.stdout + changed.stderr
    log = server.log.read_text()
    assert "the server's code changed: restarting" in log
    assert server.answers()[-1] == request_loop.FORKED_RUN  # the SConscripts read the new sources.py: a full run
    assert server.pid == pid  # re-executed in place: the same process, socket and lock
    assert build(checkout).returncode == 0 and server.answers()[-1] == request_loop.NULL_ANSWER


def test_a_change_to_the_c_client_restarts_the_server_which_compiles_it_again(checkout: Checkout,
                                                                           server: Server) -> None:
    stamp = protocol.server_dir(checkout.root, server.variables) / (native_client.NAME + native_client.STAMP_SUFFIX)
    before, restarts = stamp.read_text(), server.log.read_text().count("the server's code changed: restarting")
    append_text(checkout.root / "site_scons" / "opencoti_build" / "server" / "client.c", "\n#define OPENCOTI_A_CHANGE_12 1\n")
    changed = native_build(checkout, server)  # answered "retry" while the server restarts, then built
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert server.log.read_text().count("the server's code changed: restarting") == restarts + 1
    assert stamp.read_text() != before  # compiled from the new source


def test_a_second_server_for_the_same_configuration_is_refused_in_one_line(checkout: Checkout,
                                                                           server: Server) -> None:
    again = client(checkout.root, "serve", *server.variables, env=server.env)
    assert again.returncode == 1
    assert again.stderr.startswith("opencoti-build: a build server for this checkout and configuration runs "
                                   f"already (pid {server.pid}); stop it with `python3 -m opencoti_build stop ")
    assert again.stderr.count("\n") == 1


def test_a_request_waits_for_a_run_that_holds_the_build_lock(checkout: Checkout, server: Server) -> None:
    fd = os.open(checkout.root / "out" / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another run holds BUILD_DIR: no null answer may be given meanwhile
        waiting = popen_build(checkout)
        time.sleep(2)
        assert waiting.poll() is None, "the request was answered while another run held the build lock"
    finally:
        os.close(fd)
    out, err = waiting.communicate(timeout=900)
    assert waiting.returncode == 0, out + err
    assert "waiting for the build running in" in out + err
    assert server.answers()[-1] == request_loop.FORKED_RUN


def test_ctrl_c_in_the_client_interrupts_the_build_and_the_server_serves_on(checkout: Checkout,
                                                                            server: Server) -> None:
    append_text(checkout.tree / "llama.cpp" / "ggml" / "include" / "ggml.h", "\n#define OPENCOTI_INTERRUPTED_13 1\n")
    running = popen_build(checkout, "--cache-disable")
    assert running.stdout is not None
    for line in running.stdout:  # the first compile has started
        if "FATCC" in line:
            break
    running.send_signal(signal.SIGINT)
    out, err = running.communicate(timeout=900)
    # SCons's status for an interrupted build (-Q: no words for it); a build the signal missed exits 0. How much of
    # the build still runs is SCons's own: on a loaded machine it may notice the signal only once its last step
    # is done (seen under CPU hogs, the signal at the run's group 0.04 s after the Ctrl-C), as a `scons` run would
    assert running.returncode == 2, out + err
    finished = build(checkout)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert checkout.run("-q").returncode == 0


def test_a_killed_server_leaves_builds_to_scons_and_a_new_server_takes_its_place(checkout: Checkout,
                                                                                  server: Server) -> None:
    killed = server.pid
    os.kill(killed, signal.SIGKILL)  # no stop, no cleanup: its socket stays, nobody listens on it
    socket_path = protocol.server_file(checkout.root, server.variables, ".sock")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{killed}").exists() and \
            "Z" not in Path(f"/proc/{killed}/stat").read_text().split(")")[-1][:3]:
        time.sleep(0.05)
    assert socket_path.exists()
    orphaned = build(checkout)  # the stale socket refuses the connection: the client runs scons itself
    assert orphaned.returncode == 0, orphaned.stdout + orphaned.stderr
    assert summary.parse(orphaned.stdout)["compiled"] == 0
    restarted = start(checkout)  # the lock died with the server: a new one replaces the stale socket
    assert restarted.pid != killed
    assert build(checkout).returncode == 0 and build(checkout).returncode == 0
    assert restarted.answers()[-1] == request_loop.NULL_ANSWER


def test_stop_stops_the_server_and_removes_its_socket(checkout: Checkout, server: Server) -> None:
    pid = server.pid
    stopped = client(checkout.root, "stop", *server.variables, env=server.env)
    assert stopped.stdout == f"stopped the build server (pid {pid})\n"
    socket_path = protocol.server_file(checkout.root, server.variables, ".sock")
    assert not socket_path.exists()
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
    again = client(checkout.root, "stop", *server.variables, env=server.env)
    assert again.stdout == "no build server runs for this checkout and configuration\n"
    plain = build(checkout)  # no server: the client runs scons itself
    assert plain.returncode == 0 and summary.parse(plain.stdout)["compiled"] == 0


def test_the_watcher_sees_writes_creations_removals_and_loses_track_loudly(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.c").write_text("a")
    (tmp_path / "src" / "b.c").write_text("b")
    missing = tmp_path / "later" / "deep" / "b.h"  # watched through its nearest existing ancestor
    watcher = Watcher()
    try:
        files = [str(tmp_path / "src" / "a.c"), str(tmp_path / "src" / "b.c")]
        assert watcher.watch([*files, str(missing)])
        assert watcher.drain() == Changes()
        (tmp_path / "src" / "a.c").write_text("b")
        written = watcher.drain()
        assert written.affected(files) == files[:1]  # its sibling is not suspected
        assert written.listings == {str(tmp_path / "src")}
        os.utime(tmp_path / "src" / "a.c", (1, 1))
        assert str(tmp_path / "src" / "a.c") in watcher.drain().paths
        (tmp_path / "later").mkdir()
        seen = watcher.drain()
        assert Changes(seen.paths).affected([str(missing)]) == [str(missing)]
        shutil.rmtree(tmp_path / "src")  # a watched directory removed: nothing under it is watched any more
        gone = watcher.drain()
        assert gone.lost == {str(tmp_path / "src")} and gone.everything
    finally:
        watcher.close()
