"""The build server's boundary end to end (opencoti_build/server/boundary.py; in-process checks:
tests/unit/test_server_boundary.py): a real ``serve`` makes what it makes the user's alone whatever the umask,
refuses a socket directory or a BUILD_DIR another user owns or may write in one line, and refuses a request
from another uid (here ``nobody``: a process that setuid()s, then connects) before it reads it: one log line,
one line back, nothing run, and the server still serves its owner.

No build runs: the checkout is a SConstruct and the project's site_scons, which is all ``serve`` needs to start.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opencoti_build.server import native_client, protocol

from scons_runs import PROJECT
from server_runs import Server, client

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="another uid's request takes root (setuid to nobody)")


def _checkout(root: Path) -> Path:
    root.mkdir()
    (root / "SConstruct").write_text("raise SystemExit('no build runs in this test')\n")
    (root / "site_scons").symlink_to(PROJECT / "site_scons")  # serve runs the checkout's own site_scons
    return root


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A detached server, started under umask 000 (what it makes must not take the umask's modes)."""
    root = _checkout(tmp_path_factory.mktemp("boundary") / "co")
    env = dict(os.environ)
    started = subprocess.run([sys.executable, "-m", "opencoti_build", "serve", "--detach", "--idle-timeout", "300"],
                             cwd=root, env=env, capture_output=True, text=True, timeout=120, umask=0)
    assert started.returncode == 0, started.stdout + started.stderr
    server = Server(root, [], env)
    yield server
    server.stop()


def test_what_serve_makes_is_the_users_alone_whatever_the_umask(served: Server) -> None:
    directory = protocol.server_dir(served.root, [])
    assert _mode(served.root / "build") == _mode(directory) == 0o700
    assert {name: _mode(protocol.server_file(served.root, [], name)) for name in (".lock", ".log", ".sock")} == \
        dict.fromkeys((".lock", ".log", ".sock"), 0o600)
    assert _mode(directory / native_client.NAME) == 0o700
    assert _mode(directory / (native_client.NAME + native_client.STAMP_SUFFIX)) == 0o600


@as_root
def test_another_users_request_is_refused_before_anything_is_read_or_run(served: Server, tmp_path: Path) -> None:
    # what an attacker would send: a compiler of theirs first on PATH, and a site dir of theirs for SCons
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "ran"
    for tool in ("gcc", "cc", "g++", "python3", "scons"):
        (evil / tool).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (evil / tool).chmod(0o755)
    (evil / "site_init.py").write_text(f"open({str(marker)!r}, 'w').close()\n")  # what SCons runs from a site dir
    request = {"op": "build", "argv": [f"--site-dir={evil}", "-Q"], "cwd": str(served.root),
               "env": {"PATH": str(evil), "SCONSFLAGS": f"--site-dir={evil}"}}
    directory = protocol.server_dir(served.root, [])
    name = protocol.socket_name([])
    # made reachable (the owner's mistake, or a directory the server checked when it started): only the peer check
    # is left between nobody and the server; the directory is passed open (its parents are root's alone)
    directory.chmod(0o711)
    (directory / name).chmod(0o777)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        stranger = subprocess.run([sys.executable, "-c", f"""
import json, os, socket, struct
os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})  # then connect: the peer is nobody
s = socket.socket(socket.AF_UNIX)
s.connect("/proc/self/fd/{dir_fd}/{name}")
body = json.dumps({request!r}).encode()
try:
    socket.send_fds(s, [struct.pack(">I", len(body)) + body], [0, 1, 2])
except OSError as exc:
    print("send:", exc.__class__.__name__)
head = s.recv(4)
print(s.recv(struct.unpack(">I", head)[0]).decode() if len(head) == 4 else "closed")
"""], pass_fds=(dir_fd,), cwd="/", capture_output=True, text=True, timeout=60)
    finally:
        os.close(dir_fd)
        directory.chmod(0o700)
        (directory / name).chmod(0o600)
    assert stranger.returncode == 0, stranger.stderr
    answer = json.loads(stranger.stdout.splitlines()[-1])
    assert answer == {"refused": f"the build server (pid {served.pid}) serves its own user (uid 0) only: nothing was "
                                 "read or run; build with scons"}
    log = served.log.read_text()
    refusals = [line for line in log.splitlines() if "refused a connection" in line]
    assert len(refusals) == 1 and refusals[0].endswith(
        f"refused a connection from uid {NOBODY} (pid {refusals[0].split('(pid ')[1].split(')')[0]}): this server "
        "serves uid 0 only; nothing was read or run")
    assert served.build_lines() == []  # no request was taken, so none ran
    time.sleep(0.2)  # anything started would have had time to touch it
    assert not marker.exists()
    stopped = client(served.root, "stop", env=served.env)  # and its owner is served as before
    assert stopped.stdout == f"stopped the build server (pid {served.pid})\n", stopped.stdout + stopped.stderr


def test_a_bare_stop_stops_every_server_of_the_checkout_and_names_each(tmp_path: Path) -> None:
    """`python3 -m opencoti_build stop` as the README shows it, with no variables: every server of this checkout
    stops (in its BUILD_DIR's server directory), and the output says which: its variables, none for the bare one."""
    root = _checkout(tmp_path / "co")
    env = dict(os.environ)
    servers = [Server(root, variables, env) for variables in ([], ["CPU_ONLY=1", "SRC=elsewhere"])]
    try:
        for server in servers:
            started = client(root, "serve", "--detach", "--idle-timeout", "120", *server.variables, env=env, timeout=120)
            assert started.returncode == 0, started.stdout + started.stderr
        bare, other = (server.pid for server in servers)
        stopped = client(root, "stop", env=env, timeout=120)
        assert stopped.returncode == 0 and sorted(stopped.stdout.splitlines()) == sorted([
            f"stopped the build server (pid {bare})",
            f"stopped the build server for CPU_ONLY=1 SRC=elsewhere (pid {other})"]), stopped.stdout + stopped.stderr
        assert not any(protocol.server_file(root, s.variables, ".sock").exists() for s in servers)
        again = client(root, "stop", env=env, timeout=120)
        assert (again.returncode, again.stdout) == (0, "no build server runs for this checkout (none listens in "
                                                       "build/server)\n")
    finally:
        for server in servers:
            server.stop()


@pytest.mark.parametrize("what", ["server dir open", "server dir another user's", "build dir writable"])
def test_serve_refuses_what_another_user_owns_or_may_write_in_one_line(tmp_path: Path, what: str) -> None:
    root = _checkout(tmp_path / "co")
    directory = root / "out" / "server"
    directory.mkdir(parents=True, mode=0o700)
    if what == "server dir open":
        directory.chmod(0o777)
        line = "out/server is open to group or others (mode 0777): remove it (rm -rf out/server) and serve again"
    elif what == "server dir another user's":
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user takes root")
        os.chown(directory, NOBODY, NOBODY)
        line = f"out/server is owned by uid {NOBODY} (not you, uid 0): remove it (rm -rf out/server) and serve again"
    else:
        (root / "out").chmod(0o777)
        line = "out is writable by others (mode 0777): chmod go-w out and serve again"
    refused = client(root, "serve", "BUILD_DIR=out", env=dict(os.environ), timeout=120)
    assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", f"opencoti-build: {line}\n")
    assert list(directory.iterdir()) == []  # nothing locked, bound or compiled there
