"""Servers the benchmark and the tests start: on 127.0.0.1, on a free port, in the foreground (the Popen is
the PID they are stopped by)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """redis-server in memory only (no RDB, no AOF); RuntimeError when it is missing or does not answer."""

    PORT_TRIES = 5

    def __init__(self) -> None:
        import redis  # the client is a dependency of the build; imported here so `bench` imports without it

        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/install-deps)")
        for _ in range(self.PORT_TRIES):
            self.port = free_port()
            self.url = f"redis://127.0.0.1:{self.port}"
            self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                          "--appendonly", "no", "--daemonize", "no"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.client = redis.Redis(port=self.port, socket_timeout=5)
            if self._answers_as_itself(redis.ConnectionError):
                return
            self.stop()  # another test's server took the port between free_port() and the bind: another port
        raise RuntimeError(f"redis-server did not start on a port of its own ({self.PORT_TRIES} tries)")

    def _answers_as_itself(self, refused: type[Exception]) -> bool:
        """Whether the server answers on the port and is this process: a server another test started there first
        would answer too, and two tests would share a store; False when it exits or does not answer in time."""
        deadline = time.monotonic() + 10
        while True:
            try:
                return self.client.info("server")["process_id"] == self.proc.pid
            except refused:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    return False
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# BuildGrid's all-in-one server runs from a venv of its own (buildgrid 0.9.1 needs Python 3.13; the build's is 3.11):
# scripts/install-deps makes it here.
BUILDGRID_VENV = Path(os.environ.get("OPENCOTI_BUILDGRID_VENV") or Path.home() / ".cache/opencoti/buildgrid-venv")
BUILDGRID_CONFIG = """\
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: {insecure}
{credentials}authorization:
{authorization}
storages:
  - !disk-storage &cas
    path: {storage}
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 1000000
    allow-updates: true
    cache-failed-actions: true
instances:
  - name: "{instance}"
    services:
      - !action-cache
        cache: *ac
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
"""


def buildgrid_missing() -> str | None:
    """Why BuildGrid cannot be started here (one line), or None."""
    if not (BUILDGRID_VENV / "bin" / "bgd").is_file():
        return f"needs BuildGrid's server in {BUILDGRID_VENV} (scripts/install-deps installs it)"
    return None


def buildgrid_version() -> str:
    """The installed buildgrid's version (its venv's metadata)."""
    proc = subprocess.run([str(BUILDGRID_VENV / "bin" / "python"), "-c",
                           "import importlib.metadata as m; print(m.version('buildgrid'))"],
                          capture_output=True, text=True, check=True)
    return proc.stdout.strip()


class BuildGridServer:
    """BuildGrid's cache services (ActionCache, CAS, ByteStream) on one instance, blobs on disk under ``root``, the
    ActionCache in memory; TLS when ``tls`` gives (server key, server certificate) PEM files, client certificates
    required when ``client_ca`` names the PEM certificates they must chain to, and bearer tokens required when
    ``jwt_secret`` names the file of the HS256 secret they are signed with (JWTs with an ``exp``). RuntimeError when
    it is not installed or does not listen."""

    def __init__(self, root: Path, instance: str = "", tls: tuple[Path, Path] | None = None,
                 client_ca: Path | None = None, jwt_secret: Path | None = None) -> None:
        missing = buildgrid_missing()
        if missing is not None:
            raise RuntimeError(missing)
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.storage = root / "cas"
        self.instance = instance
        scheme = "grpcs" if tls else "grpc"
        self.url = f"{scheme}://127.0.0.1:{self.port}" + (f"/{instance}" if instance else "")
        credentials = (f"    credentials:\n      tls-server-key: {tls[0]}\n      tls-server-cert: {tls[1]}\n"
                       if tls else "") + (f"      tls-client-certs: {client_ca}\n" if tls and client_ca else "")
        config = root / "buildgrid.yml"
        authorization = (f"  method: jwt\n  secret: {jwt_secret}\n  algorithm: hs256" if jwt_secret
                         else "  method: none")
        config.write_text(BUILDGRID_CONFIG.format(port=self.port, insecure="false" if tls else "true",
                                                  credentials=credentials, authorization=authorization,
                                                  storage=self.storage, instance=instance))
        self.log = root / "buildgrid.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([str(BUILDGRID_VENV / "bin" / "bgd"), "server", "start", str(config)],
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not self._listening():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"BuildGrid on port {self.port} did not listen: {self.log.read_text()[-400:]}")
            time.sleep(0.1)

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def blob(self, digest_hash: str) -> Path:
        """Where the disk storage keeps the CAS blob of this SHA-256."""
        return self.storage / "cas" / "objects" / digest_hash[:2] / digest_hash[2:]

    def blobs(self) -> list[Path]:
        return sorted(p for p in (self.storage / "cas" / "objects").rglob("*") if p.is_file())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
