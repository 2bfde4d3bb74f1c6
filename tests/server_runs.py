"""The build server in tests: started in a private checkout (detached, stopped by PID at the end), requests
through its client, and what its log says of each request."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from opencoti_build.server import native_client, protocol, request_loop, supervisor

from null_build_checkout import Checkout


@dataclass
class Server:
    root: Path
    variables: list[str]
    env: dict[str, str]

    @property
    def log(self) -> Path:
        return protocol.server_file(self.root, self.variables, ".log")

    @property
    def pid(self) -> int:
        lock = protocol.server_file(self.root, self.variables, ".lock")
        return int(lock.read_text().strip())

    def build_lines(self) -> list[str]:
        """The log's line for each request, in order: what was asked, how it was answered, the status."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line for line in lines if " build " in line]

    def answers(self) -> list[str]:
        """How each request was answered, in order: from the record, by the reader, or by a forked run."""
        return [next((how for how in (request_loop.NULL_ANSWER, request_loop.READ_AHEAD)
                      if f": {how}, " in line or f": {how} (" in line), request_loop.FORKED_RUN)
                for line in self.build_lines()]

    def reader_ready(self, after: int, timeout: float = 300) -> None:
        """Wait until the server has logged its reader ready ``after`` times in all (reading ahead takes a moment)."""
        deadline = time.monotonic() + timeout
        while (self.log.read_text().count(supervisor.READER_READY) if self.log.exists() else 0) <= after:
            assert time.monotonic() < deadline, "the server's reader never got ready"
            time.sleep(0.05)

    def readers_ready(self) -> int:
        return self.log.read_text().count(supervisor.READER_READY) if self.log.exists() else 0

    def stop(self) -> None:
        """``stop``, then SIGKILL by PID if it is still there: a test never leaves a server behind."""
        try:
            pid = self.pid
        except (OSError, ValueError):
            return
        client(self.root, "stop", *self.variables, env=self.env)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by its parent) counts as gone
        return not open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False


def client(root: Path, *args: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``python3 -m opencoti_build ARGS`` in ``root`` (the checkout: the client finds its server from there)."""
    return subprocess.run([sys.executable, "-m", "opencoti_build", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)


def request_args(co: Checkout, *extra: str) -> tuple[list[str], dict[str, str]]:
    """The checkout's build as a client request: its scons arguments without ``-C`` (the client runs in it)."""
    argv, env = co.command(*extra)
    assert argv[3:5] == ["-C", str(co.root)]
    return argv[5:], env


def start(co: Checkout, *extra: str) -> Server:
    args, env = request_args(co, *extra)
    variables = protocol.configuration(args)
    proc = client(co.root, "serve", "--detach", "--idle-timeout", "900", *variables, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"build server for {co.root} "), proc.stdout
    return Server(co.root, variables, env)


def build(co: Checkout, *extra: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    args, env = request_args(co, *extra)
    return client(co.root, "build", *args, env={**env, **(env_extra or {})})


def native_build(co: Checkout, server: Server, *extra: str) -> subprocess.CompletedProcess[str]:
    """The same request through the C client ``serve`` compiled beside the socket."""
    args, env = request_args(co, *extra)
    binary = protocol.server_dir(co.root, server.variables) / native_client.NAME
    return subprocess.run([str(binary), *args], cwd=co.root, env=env, capture_output=True, text=True, timeout=900)


def popen_build(co: Checkout, *extra: str) -> subprocess.Popen[str]:
    args, env = request_args(co, *extra)
    env = dict(env, PYTHONUNBUFFERED="1")  # each step's line as it starts: the caller reacts to them
    return subprocess.Popen([sys.executable, "-m", "opencoti_build", "build", *args], cwd=co.root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

