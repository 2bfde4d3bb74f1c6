"""The build server's boundary (opencoti_build/server/boundary.py), in-process: ``serve`` refuses a socket directory
or a BUILD_DIR another user owns or may write, in one line naming it and the fix, and makes what it makes the
user's alone whatever the umask; the clients send nothing to a socket in such a directory, or to one another user
listens on; the server refuses a connection from another uid before reading it. Another owner is made with
os.chown where the tests run as root, and faked (the uid the check compares with) everywhere. The real server
refusing another user's request end to end: tests/integration/test_server_boundary.py."""
from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencoti_build.incremental import build_lock
from opencoti_build.server import boundary, client, protocol
from opencoti_build.server.listener import Bound, Refused, bind, bookkeeping
from opencoti_scons import server_hooks

BOOKKEEPING = bookkeeping(server_hooks.SConsHooks().sconsign)

ME = os.geteuid()
OTHER = 65534 if ME != 65534 else 65533  # nobody
as_root = pytest.mark.skipif(ME != 0, reason="giving a file to another user takes root")


@pytest.fixture
def umask_0() -> Iterator[None]:
    old = os.umask(0)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _refusal(call, *args, **kwargs) -> str:
    with pytest.raises(boundary.Unsafe) as refused:
        call(*args, **kwargs)
    return str(refused.value)


# serve: the socket's directory

def test_serve_makes_the_build_dir_and_its_server_dir_0700_whatever_the_umask(tmp_path: Path, umask_0) -> None:
    directory = tmp_path / "a" / "build" / "server"
    fd = boundary.open_server_dir(directory, "a/build/server")
    os.close(fd)
    assert [_mode(p) for p in (tmp_path / "a", tmp_path / "a" / "build", directory)] == [0o700] * 3


def test_servers_lock_and_socket_are_0600_whatever_the_umask(tmp_path: Path, umask_0, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    variables = ["BUILD_DIR=out"]
    bound: Bound = bind(tmp_path, variables, BOOKKEEPING)
    try:
        assert _mode(tmp_path / "out") == _mode(tmp_path / "out" / "server") == 0o700
        assert _mode(protocol.server_file(tmp_path, variables, ".lock")) == 0o600
        assert _mode(protocol.server_file(tmp_path, variables, ".sock")) == 0o600
    finally:
        bound.listener.close()
        os.close(bound.lock_fd)


@pytest.mark.parametrize("mode", [0o777, 0o755, 0o750, 0o701])
def test_a_server_dir_open_to_group_or_others_is_refused_in_one_line(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "build" / "server"
    directory.mkdir(parents=True)
    directory.chmod(mode)
    assert _refusal(boundary.open_server_dir, directory, "build/server") == (
        f"build/server is open to group or others (mode {mode:04o}): remove it (rm -rf build/server) and serve again")


def test_a_server_dir_of_another_uid_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "server"
    directory.mkdir(mode=0o700)
    assert _refusal(boundary.open_server_dir, directory, "build/server", uid=ME + 1) == (
        f"build/server is owned by uid {ME} (not you, uid {ME + 1}): remove it (rm -rf build/server) and serve again")


@as_root
def test_a_server_dir_chowned_to_another_user_or_holding_their_file_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "server"
    directory.mkdir(mode=0o700)
    os.chown(directory, OTHER, OTHER)
    assert _refusal(boundary.open_server_dir, directory, "build/server").startswith(
        f"build/server is owned by uid {OTHER} (not you, uid {ME}): ")
    os.chown(directory, ME, ME)
    (directory / "opencoti-client").write_text("#!/bin/sh\n")
    os.chown(directory / "opencoti-client", OTHER, OTHER)  # swapped in while the directory was open
    assert _refusal(boundary.open_server_dir, directory, "build/server") == (
        f"build/server/opencoti-client is owned by uid {OTHER} (not you): remove build/server (rm -rf build/server) "
        "and serve again")


def test_serve_refuses_before_it_locks_or_binds_anything(tmp_path: Path) -> None:
    directory = tmp_path / "out" / "server"
    directory.mkdir(parents=True, mode=0o700)
    directory.chmod(0o777)
    with pytest.raises(Refused) as refused:
        bind(tmp_path, ["BUILD_DIR=out"], BOOKKEEPING)
    assert str(refused.value) == ("out/server is open to group or others (mode 0777): remove it (rm -rf out/server) "
                                  "and serve again")
    assert list(directory.iterdir()) == []


# serve: BUILD_DIR and its bookkeeping

def test_a_build_dir_others_may_write_is_refused_with_its_fix(tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    build.chmod(0o757)
    assert _refusal(boundary.check_build_dir, build, "build", BOOKKEEPING) == (
        "build is writable by others (mode 0757): chmod go-w build and serve again")
    build.chmod(0o755)  # readable by others is fine: objects and artifacts are no secret
    boundary.check_build_dir(build, "build", BOOKKEEPING)


@pytest.mark.parametrize("name", BOOKKEEPING)
def test_bookkeeping_others_may_write_or_own_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("")
    (tmp_path / name).chmod(0o646)
    assert _refusal(boundary.check_build_dir, tmp_path, "build", BOOKKEEPING) == (
        f"build/{name} is writable by others (mode 0646): chmod go-w build/{name} and serve again")
    (tmp_path / name).chmod(0o644)
    boundary.check_build_dir(tmp_path, "build", BOOKKEEPING)
    assert _refusal(boundary.check_build_dir, tmp_path, "build", BOOKKEEPING, uid=ME + 1).startswith(
        f"build is owned by uid {ME} (not you, uid {ME + 1}): remove it (rm -rf build)")


def test_the_bookkeeping_serve_checks_is_what_the_server_relies_on() -> None:
    from opencoti_build.incremental import null_build
    from opencoti_scons import engine

    assert set(BOOKKEEPING) == {build_lock.LOCK_NAME, null_build.RECORD_NAME, engine.SCONSIGN_DB}


def test_a_group_write_bit_is_refused_unless_the_group_is_the_users_alone(tmp_path: Path) -> None:
    path = tmp_path / "build"
    path.mkdir()
    path.chmod(0o775)  # umask 002
    st = path.stat()
    boundary.check_unshared(st, "build", alone=lambda gid, uid: (gid, uid) == (st.st_gid, ME))
    assert _refusal(boundary.check_unshared, st, "build", alone=lambda gid, uid: False) == (
        f"build is writable by group {st.st_gid} (mode 0775): chmod go-w build and serve again")


@as_root
def test_a_group_of_one_is_read_from_the_users_and_groups() -> None:
    import grp
    import pwd

    nogroup = pwd.getpwuid(OTHER).pw_gid
    assert not boundary.group_of_one(nogroup, ME)  # nobody's group is not root's
    members = {p.pw_uid for p in pwd.getpwall() if p.pw_gid == 0} | {
        pwd.getpwnam(n).pw_uid for n in grp.getgrgid(0).gr_mem}
    assert boundary.group_of_one(0, 0) == (members == {0})


# the clients

def _socket_dir(root: Path, mode: int) -> tuple[Path, socket.socket]:
    """A listening socket where the client for ``SRC=x`` looks, in a directory of this mode."""
    directory = protocol.server_dir(root, ["SRC=x"])
    directory.mkdir(parents=True, mode=0o700)
    directory.chmod(mode)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(protocol.short_path(fd, protocol.socket_name(["SRC=x"])))
    os.close(fd)
    listener.listen(1)
    listener.setblocking(False)
    return directory, listener


@pytest.mark.parametrize("op", ["build", "stop"])
def test_a_client_sends_nothing_to_a_socket_in_a_directory_open_to_others(tmp_path: Path, monkeypatch, capsys,
                                                                          op: str) -> None:
    monkeypatch.chdir(tmp_path)
    _, listener = _socket_dir(tmp_path, 0o777)
    with listener:
        status = client.build_main(["SRC=x"]) if op == "build" else client.stop_main(["SRC=x"])
        assert status == 2
        with pytest.raises(BlockingIOError):  # it did not even connect
            listener.accept()
    assert capsys.readouterr().err == (
        "opencoti-build: build/server is open to group or others (mode 0777): the request (it carries your "
        "environment) was not sent; remove it (rm -rf build/server) and serve again\n")


def test_a_client_refuses_a_directory_or_a_socket_of_another_uid(tmp_path: Path) -> None:
    directory, listener = _socket_dir(tmp_path, 0o700)
    with listener:
        refusal = _refusal(boundary.open_socket_dir, directory, "build/server", uid=ME + 1)
        assert refusal.startswith(f"build/server is owned by uid {ME} (not you, uid {ME + 1}): ")
        fd = boundary.open_socket_dir(directory, "build/server")
        assert fd is not None
        try:
            name = protocol.socket_name(["SRC=x"])
            assert boundary.socket_there(fd, name, "build/server")
            assert not boundary.socket_there(fd, "absent.sock", "build/server")
            assert _refusal(boundary.socket_there, fd, name, "build/server", uid=ME + 1).startswith(
                f"build/server/{name} is owned by uid {ME} (not you, uid {ME + 1}): ")
        finally:
            os.close(fd)


def test_no_server_directory_is_no_server(tmp_path: Path) -> None:
    assert boundary.open_socket_dir(tmp_path / "build" / "server", "build/server") is None


def test_a_client_refuses_a_server_of_another_uid(tmp_path: Path) -> None:
    left, right = socket.socketpair()
    with left, right:
        boundary.check_server_peer(left, "build/server/k.sock")
        assert _refusal(boundary.check_server_peer, left, "build/server/k.sock", uid=ME + 1) == (
            f"build/server/k.sock is served by uid {ME} (pid {os.getpid()}; not you, uid {ME + 1}): remove it "
            "(rm -rf build/server) and serve again")


def test_the_shown_server_dir_is_the_variables_build_dir() -> None:
    assert protocol.shown_server_dir([]) == "build/server"
    assert protocol.shown_server_dir(["BUILD_DIR=out/"]) == "out/server"
    assert protocol.shown_server_dir(["BUILD_DIR=/abs/out"]) == "/abs/out/server"
    assert protocol.shown_server_dir(["BUILD_DIR="]) == "server"


# the server: every connection's peer

def test_the_server_admits_its_own_user_and_reads_nothing_else() -> None:
    server_end, client_end = socket.socketpair()
    with server_end, client_end:
        assert boundary.stranger(server_end) is None
        assert boundary.admit(server_end, log=pytest.fail)
        client_end.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing said to its own user
            client_end.recv(1)


def test_a_stranger_is_refused_unread_in_one_log_line_and_one_line_to_it() -> None:
    server_end, client_end = socket.socketpair()
    logged: list[str] = []
    with server_end, client_end:
        request = {"op": "build", "argv": ["--site-dir=/evil"], "cwd": "/", "env": {"PATH": "/evil"}}
        protocol.send(client_end, request)
        assert not boundary.admit(server_end, uid=ME + 1, log=logged.append)  # the server's uid, faked
        assert logged == [f"refused a connection from uid {ME} (pid {os.getpid()}): this server serves uid {ME + 1} "
                          "only; nothing was read or run"]
        server_end.setblocking(False)
        assert server_end.recv(1 << 16) == protocol.frame(request)  # all of it still unread
        got = protocol.receive(client_end)
    assert got is not None and got[0] == {"refused": f"the build server (pid {os.getpid()}) serves its own user "
                                                     f"(uid {ME + 1}) only: nothing was read or run; build with scons"}


@pytest.mark.parametrize("closed_first", [False, True])
def test_a_client_told_it_is_refused_says_so_in_one_line(monkeypatch, capsys, closed_first: bool) -> None:
    server_end, client_end = socket.socketpair()
    protocol.send(server_end, {"refused": "the build server (pid 1) serves its own user (uid 1) only: nothing was "
                                          "read or run; build with scons"})
    if closed_first:  # closed before the request was sent: the client's send fails, the refusal is still there
        server_end.close()
    monkeypatch.setattr(client, "_connect", lambda variables: client_end)
    try:
        assert client.build_main(["SRC=x"]) == 2
    finally:
        server_end.close()
    assert capsys.readouterr().err == ("opencoti-build: the build server (pid 1) serves its own user (uid 1) only: "
                                       "nothing was read or run; build with scons\n")
