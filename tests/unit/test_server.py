"""The build server's pieces that need no build: where a configuration's socket is, the messages on it (with the
descriptors they carry), and which watched paths a change may concern (inotify itself, which loads libc through
ctypes, is tried in tests/integration/test_server.py)."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from opencoti_build.config import buildvars
from opencoti_build.server import client, protocol
from opencoti_build.server.watcher import Changes


def test_the_default_build_dir_is_buildvars_default() -> None:
    assert protocol.DEFAULT_BUILD_DIR == buildvars.DEFAULTS["BUILD_DIR"]


def test_a_configuration_is_its_variables_in_any_order_and_under_its_build_dir(tmp_path: Path) -> None:
    args = ["-Q", "host", "SRC=a", "-j", "2", "VERBOSE=1", "--debug=explain"]
    assert protocol.variables(args) == ["SRC=a", "VERBOSE=1"]
    assert protocol.socket_name(["SRC=a", "VERBOSE=1"]) == protocol.socket_name(["VERBOSE=1", "SRC=a"])
    assert protocol.socket_name(["SRC=a"]) != protocol.socket_name(["SRC=b"])
    assert protocol.server_dir(tmp_path, ["SRC=a"]) == tmp_path / "build" / "server"
    assert protocol.server_dir(tmp_path, ["BUILD_DIR=out"]) == tmp_path / "out" / "server"
    assert protocol.server_dir(tmp_path, ["BUILD_DIR=/abs/out"]) == Path("/abs/out/server")


def test_what_picks_one_requests_targets_or_output_is_no_configuration() -> None:
    assert protocol.configuration(["compile", "FILE=a.c", "VERBOSE=1", "SRC=t", "TRACE=x.json", "CPU_ONLY=1"]) == \
        ["CPU_ONLY=1", "SRC=t"]
    assert protocol.PER_REQUEST <= buildvars.NOT_SHAPING  # none of them changes what is built
    assert "BUILD_DIR" not in protocol.PER_REQUEST  # the server's record lives there


def test_messages_carry_descriptors_and_a_closed_connection_is_no_message(tmp_path: Path) -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    (tmp_path / "f").write_text("passed along")
    with open(tmp_path / "f") as handle, left, right:
        protocol.send(left, {"op": "build", "argv": ["ü"]}, fds=[handle.fileno()])
        message, fds = protocol.receive(right, max_fds=3) or ({}, [])
        assert message == {"op": "build", "argv": ["ü"]} and len(fds) == 1
        assert os.pread(fds[0], 100, 0) == b"passed along"
        os.close(fds[0])
        left.sendall(b"\0\0\0\x05{\"a\"")  # cut short
        left.shutdown(socket.SHUT_WR)
        with pytest.raises(protocol.ProtocolError):
            protocol.receive(right)
    a, b = socket.socketpair()
    with a, b:
        a.close()
        assert protocol.receive(b) is None


def test_a_socket_path_fits_wherever_the_checkout_is(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:
        server = socket.socket(socket.AF_UNIX)
        server.bind(protocol.short_path(fd, "x.sock"))  # the full path is far over sun_path's 108 bytes
        server.listen(1)
        client = socket.socket(socket.AF_UNIX)
        client.connect(protocol.short_path(fd, "x.sock"))
        client.close()
        server.close()
    finally:
        os.close(fd)
    assert (deep / "x.sock").exists()


def test_changes_name_the_watched_paths_they_may_concern() -> None:
    watched = sorted(["/p/a.c", "/p/inc/a.h", "/p/inc/sub/b.h", "/q/c.h"])
    assert Changes({"/p/a.c", "/p/zz"}).affected(watched) == ["/p/a.c"]
    assert Changes({"/p/inc"}).affected(watched) == ["/p/inc/a.h", "/p/inc/sub/b.h"]  # a directory made or moved
    assert Changes({"/p/in"}).affected(watched) == []  # a prefix of a name is no parent
    # an entry event in /p/inc concerns /p/inc's listing, not its other entries: a closed lock file is no edit
    assert Changes({"/p/inc/lock"}, listings={"/p/inc"}).affected(sorted([*watched, "/p/inc"])) == ["/p/inc"]
    assert Changes(overflow=True).affected(watched) == watched
    assert Changes(lost={"/p"}).affected(watched) == watched  # a watch lost: everything is suspect


def test_options_that_move_the_project_are_told_apart_from_their_look_alikes() -> None:
    for moving in (["-C", "dir"], ["--directory=dir"], ["-f", "x"], ["--file=x"], ["-u"], ["--interactive"]):
        assert protocol.moves_project(["-Q", *moving, "SRC=x"]), moving
    for staying in (["-Q", "-j2", "SRC=x"], ["FILE=-C"], ["--directoryx"], ["compile", "FILE=a.c"]):
        assert not protocol.moves_project(staying), staying


def test_the_python_client_sends_the_environment_execve_gave_it(tmp_path: Path) -> None:
    block = tmp_path / "environ"
    block.write_bytes(b"PATH=/bin\0EMPTY=\0PATH=/second\0NOEQUALS\0ODD=\xff\0A=b=c\0")
    assert client.started_environment(str(block)) == {"PATH": "/bin", "EMPTY": "", "ODD": "\udcff", "A": "b=c"}
    assert client.started_environment(str(tmp_path / "none")) == dict(os.environ)  # no /proc: os.environ
