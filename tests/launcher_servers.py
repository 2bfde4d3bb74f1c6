"""Servers of the launcher tests, each on 127.0.0.1 at a free port and stopped by PID: a private sccache
client daemon's environment, distccd, and an sccache-dist scheduler with one build server."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex((LOOPBACK, port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"{what} is not listening on {port} after {timeout} s")


def stop(proc: subprocess.Popen) -> None:
    """Stop one server we started, by its PID: TERM, then KILL."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def sccache_env(root: Path, config: str = "") -> dict[str, str]:
    """A private sccache: its own cache dir, config file (``config``: TOML), port; never idles out."""
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "sccache.conf"
    conf.write_text(config)
    return {"SCCACHE_DIR": str(root / "cache"), "SCCACHE_CONF": str(conf), "SCCACHE_SERVER_PORT": str(free_port()),
            "SCCACHE_IDLE_TIMEOUT": "0", "SCCACHE_ERROR_LOG": str(root / "error.log")}


def sccache_stop(env: dict[str, str]) -> None:
    """Stop the sccache client daemon a build started on ``env``'s port (it is not ours to hold a PID of)."""
    subprocess.run(["sccache", "--stop-server"], env={**os.environ, **env}, capture_output=True, timeout=30)


def sccache_stats(env: dict[str, str]) -> dict:
    proc = subprocess.run(["sccache", "--show-stats", "--stats-format", "json"], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=30, check=True)
    return json.loads(proc.stdout)


@contextmanager
def distccd() -> Iterator[tuple[int, Path]]:
    """distccd on loopback: (port, its log). Run as root it drops to user distccd, which cannot reach pytest's
    private tmp_path: the log lives in a directory of its own under /tmp, writable by all, removed after."""
    logdir = Path(tempfile.mkdtemp(prefix="opencoti-distccd-"))
    logdir.chmod(0o777)
    log = logdir / "distccd.log"
    port = free_port()
    proc = subprocess.Popen(["distccd", "--daemon", "--no-detach", "--listen", LOOPBACK, "--allow", LOOPBACK,
                             "--port", str(port), "--jobs", "4", "--log-file", str(log)])
    try:
        wait_listening(port, proc, "distccd")
        yield port, log
    finally:
        stop(proc)
        shutil.rmtree(logdir, ignore_errors=True)


@contextmanager
def sccache_dist(root: Path, toolchains: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """An sccache-dist scheduler and one build server (overlay builder, bubblewrap), token auth: (the client's
    SCCACHE_CONF text, the scheduler's process). ``toolchains`` holds the packaged toolchains between tests."""
    sched_port, server_port = free_port(), free_port()
    root.mkdir(parents=True, exist_ok=True)
    (root / "scheduler.conf").write_text(f"""public_addr = "{LOOPBACK}:{sched_port}"
[client_auth]
type = "token"
token = "client-token"
[server_auth]
type = "token"
token = "server-token"
""")
    (root / "server.conf").write_text(f"""cache_dir = "{toolchains / 'server'}"
public_addr = "{LOOPBACK}:{server_port}"
bind_address = "{LOOPBACK}:{server_port}"
scheduler_url = "http://{LOOPBACK}:{sched_port}"
[builder]
type = "overlay"
build_dir = "{root / 'build'}"
bwrap_path = "/usr/bin/bwrap"
[scheduler_auth]
type = "token"
token = "server-token"
""")
    client = f"""[dist]
scheduler_url = "http://{LOOPBACK}:{sched_port}"
toolchains = []
cache_dir = "{toolchains / 'client'}"
[dist.auth]
type = "token"
token = "client-token"
"""
    env = {**os.environ, "SCCACHE_NO_DAEMON": "1"}
    procs: list[subprocess.Popen] = []
    try:
        for role, port in (("scheduler", sched_port), ("server", server_port)):
            log = open(root / f"{role}.log", "wb")
            procs.append(subprocess.Popen(["sccache-dist", role, "--config", str(root / f"{role}.conf")], env=env,
                                          stdout=log, stderr=subprocess.STDOUT))
            wait_listening(port, procs[-1], f"sccache-dist {role}")
        yield client, procs[0]
    finally:
        for proc in reversed(procs):
            stop(proc)


def wait_dist_ready(env: dict[str, str], timeout: float = 30) -> None:
    """Until the sccache client daemon on ``env`` sees one build server through its scheduler."""
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        status = subprocess.run(["sccache", "--dist-status"], env={**os.environ, **env}, capture_output=True,
                                text=True, timeout=30).stdout
        if '"num_servers":1' in status.replace(" ", ""):
            return
        time.sleep(0.2)
    raise AssertionError(f"sccache sees no build server: {status}")
