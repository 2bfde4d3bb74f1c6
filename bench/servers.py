"""Servers the benchmark and the tests start: on 127.0.0.1, on a free port, in the foreground (the Popen is
the PID they are stopped by)."""
from __future__ import annotations

import shutil
import socket
import subprocess
import time


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """redis-server in memory only (no RDB, no AOF); RuntimeError when it is missing or does not answer."""

    def __init__(self) -> None:
        import redis  # the client is a dependency of the build; imported here so `bench` imports without it

        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/install-deps)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--daemonize", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = redis.Redis(port=self.port, socket_timeout=5)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"redis-server on port {self.port} did not answer") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
