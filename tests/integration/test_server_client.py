"""The build server's C client (BUILD_DIR/server/opencoti-client, compiled by ``serve``) against a scripted server:
it sends what the Python client sends, byte for byte the same request once decoded, with the same descriptors;
it exits with the answer's status, follows "retry", runs scons on "fallback" or with no server, passes Ctrl-C on,
and says so in one line when the server goes away; it sends nothing to a socket whose directory is open to others
or whose listener is another user, and says a server's refusal in one line (server/boundary.py, as the Python
client does). Its use with a real server is in tests/integration/test_server.py.
"""
from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from opencoti_build.server import native_client, protocol

# what a request carries that is hard to say in JSON or in C: quotes, backslashes, control characters, non-ASCII
ODD = 'tab\there "quoted" back\\slash new\nline é ✓ 𝄞 \x1b[0m'
VARIABLES = ["SRC=tree", f"ODD={ODD}", "BUILD_DIR=out", "FILE=a.c", "VERBOSE=1"]  # FILE, VERBOSE: per request


@pytest.fixture(scope="module")
def client_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    made, how = native_client.install(tmp_path_factory.mktemp("client"))
    assert made is not None, how
    return made


Answer = Callable[[socket.socket, dict, list[int]], None]


class ScriptedServer:
    """Listens where the server for ``variables`` in ``root`` would; answers the n-th request with ``answers[n]``."""

    def __init__(self, root: Path, variables: list[str], answers: list[Answer]) -> None:
        self.requests: list[dict] = []
        self.signals: list[dict] = []
        directory = protocol.server_dir(root, protocol.configuration(variables))
        directory.mkdir(parents=True, mode=0o700)  # the user's alone, as serve makes it: the clients check that
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.listener = socket.socket(socket.AF_UNIX)
            self.listener.bind(protocol.short_path(dir_fd, protocol.socket_name(protocol.configuration(variables))))
        finally:
            os.close(dir_fd)
        self.listener.listen(4)
        self.thread = threading.Thread(target=self._serve, args=(answers,), daemon=True)
        self.thread.start()

    def _serve(self, answers: list[Answer]) -> None:
        for answer in answers:
            conn, _ = self.listener.accept()
            with conn:
                got = protocol.receive(conn, max_fds=3)
                assert got is not None
                message, fds = got
                self.requests.append(message)
                try:
                    answer(conn, message, fds)
                finally:
                    for fd in fds:
                        os.close(fd)

    def close(self) -> None:
        self.thread.join(timeout=30)
        self.listener.close()


def status(code: int) -> Answer:
    def answer(conn: socket.socket, message: dict, fds: list[int]) -> None:
        os.write(fds[1], b"out from the server\n")  # the client's own stdout and stderr came with the request
        os.write(fds[2], b"err from the server\n")
        protocol.send(conn, {"status": code})
    return answer


def reply(message: dict) -> Answer:
    return lambda conn, _message, _fds: protocol.send(conn, message)


def hang_up(conn: socket.socket, message: dict, fds: list[int]) -> None:
    pass


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "checkout"
    root.mkdir()
    yield root


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "ODD_VALUE": ODD, "EMPTY": "", **extra}


def _run(argv: list[str], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_it_sends_what_the_python_client_sends_and_exits_with_the_answer(client_binary: Path, project: Path) -> None:
    args = ["-Q", "host", *VARIABLES, "--debug=explain"]
    server = ScriptedServer(project, args, [status(7), status(7)])
    native = _run([str(client_binary), *args], project, _env())
    python = _run([sys.executable, "-m", "opencoti_build", "build", *args], project, _env())
    server.close()
    for run in (native, python):
        assert (run.returncode, run.stdout, run.stderr) == (7, "out from the server\n", "err from the server\n")
    native_request, python_request = server.requests
    assert native_request["argv"] == args and native_request["env"]["ODD_VALUE"] == ODD
    assert native_request == python_request


def test_in_a_c_locale_both_clients_send_the_environment_the_shell_gave_them(client_binary: Path,
                                                                            project: Path) -> None:
    """Python coerces the C locale (PEP 538: LC_CTYPE=C.UTF-8 in its os.environ); the request carries the environment
    the client was started with, so the two clients' requests stay equal and switching costs no full run."""
    args = ["-Q", "host", *VARIABLES]
    server = ScriptedServer(project, args, [status(0), status(0)])
    shell = {k: v for k, v in _env().items() if not k.startswith("LC_") and k not in ("LANG", "LANGUAGE")}
    native = _run([str(client_binary), *args], project, shell)
    python = _run([sys.executable, "-m", "opencoti_build", "build", *args], project, shell)
    server.close()
    assert (native.returncode, python.returncode) == (0, 0), native.stderr + python.stderr
    native_request, python_request = server.requests
    assert "LC_CTYPE" not in python_request["env"] and native_request == python_request


def test_retry_is_followed_and_fallback_runs_scons(client_binary: Path, project: Path) -> None:
    server = ScriptedServer(project, VARIABLES, [reply({"retry": True}), status(3), reply({"fallback": "another"})])
    retried = _run([str(client_binary), *VARIABLES], project, _env())
    fallen_back = _run([str(client_binary), *VARIABLES], project, _env())
    server.close()
    assert retried.returncode == 3 and len(server.requests) == 3
    assert "No SConstruct file found" in fallen_back.stderr  # scons ran in the project (which has none)


@pytest.mark.parametrize("why", ["no server", "not UTF-8"])
def test_without_a_server_or_for_a_request_json_cannot_carry_it_runs_scons(client_binary: Path, project: Path,
                                                                          why: str) -> None:
    server = ScriptedServer(project, VARIABLES, []) if why == "not UTF-8" else None
    env = _env()
    if why == "not UTF-8":
        env = {**env, "BAD": os.fsdecode(b"\xff\xfe")}  # Python's surrogate escapes; a C client sends no such request
    run = _run([str(client_binary), *VARIABLES], project, env)
    if server is not None:
        server.close()
        assert server.requests == []
    assert run.returncode == 2 and "No SConstruct file found" in run.stderr


def test_a_server_that_goes_away_is_one_line_and_status_2(client_binary: Path, project: Path) -> None:
    server = ScriptedServer(project, VARIABLES, [hang_up])
    run = _run([str(client_binary), *VARIABLES], project, _env())
    server.close()
    assert run.returncode == 2
    assert run.stderr == "opencoti-build: the build server went away during the build; run the build again\n"


def test_ctrl_c_is_passed_on_to_the_run(client_binary: Path, project: Path) -> None:
    def interrupted(conn: socket.socket, message: dict, fds: list[int]) -> None:
        os.write(fds[1], b"running\n")
        got = protocol.receive(conn)
        assert got is not None
        protocol.send(conn, {"status": 130 if got[0] == {"signal": int(signal.SIGINT)} else 1})

    server = ScriptedServer(project, VARIABLES, [interrupted])
    proc = subprocess.Popen([str(client_binary), *VARIABLES], cwd=project, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "running\n"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    server.close()


def test_it_is_compiled_again_only_when_its_inputs_or_the_file_changed(tmp_path: Path) -> None:
    made, how = native_client.install(tmp_path)
    assert made is not None and how == "compiled"
    assert native_client.install(tmp_path) == (made, "current")
    assert native_client.install(tmp_path, python="/elsewhere/python3") == (made, "compiled")
    made.write_bytes(b"changed by hand")
    again, how = native_client.install(tmp_path, python="/elsewhere/python3")
    assert how == "compiled" and again.read_bytes().startswith(b"\x7fELF") and os.access(again, os.X_OK)
    assert sorted(p.name for p in tmp_path.iterdir()) == [native_client.NAME, native_client.NAME + ".stamp"]
    # the user's alone, whatever the umask (this one's 022 would give 0755 and 0644)
    assert [stat.S_IMODE(p.stat().st_mode) for p in sorted(tmp_path.iterdir())] == [0o700, 0o600]


PYTHON_CLIENT = [sys.executable, "-m", "opencoti_build", "build"]


def test_neither_client_sends_to_a_socket_whose_directory_others_may_use(client_binary: Path, project: Path) -> None:
    server = ScriptedServer(project, VARIABLES, [])
    directory = protocol.server_dir(project, protocol.configuration(VARIABLES))
    directory.chmod(0o777)  # made, or opened, by someone else: they could read the request, or swap the socket
    native = _run([str(client_binary), *VARIABLES], project, _env())
    python = _run([*PYTHON_CLIENT, *VARIABLES], project, _env())
    server.close()
    assert server.requests == []
    line = ("opencoti-build: out/server is open to group or others (mode 0777): the request (it carries your "
            "environment) was not sent; remove it (rm -rf out/server) and serve again\n")
    assert (native.returncode, native.stdout, native.stderr) == (python.returncode, python.stdout, python.stderr) == \
        (2, "", line)


@pytest.mark.skipif(os.geteuid() != 0, reason="a listener of another uid takes root (it binds, then setuid()s)")
def test_neither_client_sends_to_a_socket_another_user_listens_on(client_binary: Path, project: Path) -> None:
    variables = protocol.configuration(VARIABLES)
    directory = protocol.server_dir(project, variables)
    directory.mkdir(parents=True, mode=0o700)
    # bound by this user (so the directory and the socket pass), listening as nobody: the kernel's peer credentials
    # are the listener's at listen(); it accepts and counts what it is sent
    listener = subprocess.Popen([sys.executable, "-c", f"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
fd = os.open({str(directory)!r}, os.O_RDONLY | os.O_DIRECTORY)
s.bind(f"/proc/self/fd/{{fd}}/{protocol.socket_name(variables)}")  # a checkout's path may be over sun_path's size
os.setgid(65534); os.setuid(65534)
s.listen(4)
print("listening", flush=True)
got = 0
for _ in range(2):
    c, _ = s.accept()
    got += len(c.recv(1 << 16))
    c.close()
print(got, flush=True)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None and listener.stdout.readline() == "listening\n"
        native = _run([str(client_binary), *VARIABLES], project, _env())
        python = _run([*PYTHON_CLIENT, *VARIABLES], project, _env())
        assert listener.stdout.readline() == "0\n"  # both connected, neither sent a byte
    finally:
        listener.kill()
        listener.wait()
    assert native.returncode == python.returncode == 2
    assert native.stderr == python.stderr
    assert native.stderr.startswith(f"opencoti-build: out/server/{protocol.socket_name(variables)} is served by uid "
                                    "65534 (pid ")
    assert native.stderr.endswith("; not you, uid 0): the request (it carries your environment) was not sent; remove "
                                  "it (rm -rf out/server) and serve again\n")


def test_a_servers_refusal_is_one_line_from_either_client(client_binary: Path, project: Path) -> None:
    refused = "the build server (pid 1) serves its own user (uid 1) only: nothing was read or run; build with scons"
    server = ScriptedServer(project, VARIABLES, [reply({"refused": refused})] * 2)
    native = _run([str(client_binary), *VARIABLES], project, _env())
    python = _run([*PYTHON_CLIENT, *VARIABLES], project, _env())
    server.close()
    for run in (native, python):
        assert (run.returncode, run.stdout, run.stderr) == (2, "", f"opencoti-build: {refused}\n")
