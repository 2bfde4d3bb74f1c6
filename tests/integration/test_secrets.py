"""No secret on disk: a build run with a token in its environment and a Redis password in CACHE_URL (on the command
line and in OPENCOTI_CACHE_URL) writes neither into any file (the null build's record, the sconsign, the notes, the
tuning probe's answers, the trace, the compile database, the artifacts with their SBOM, Statement and manifest, the
build server's log), and BUILD_DIR's bookkeeping is the user's alone (docs/reliability.md, "No secret on disk").

The thin binary comes from the warm cache of the session's build of the miniature tree (nothing is compiled)."""
from __future__ import annotations

import os
import socket
import stat
import uuid
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from opencoti_build.incremental import null_build
from opencoti_build.server import protocol

from packaging_support import write_gguf
from scons_runs import MINI_TREE, PROJECT, scons, scons_command, summary
from server_runs import client

BOOKKEEPING = (".lock", null_build.RECORD_NAME, null_build.RECORD_NAME + null_build.record.KEY_SUFFIX,
               ".sconsign.dblite", "notes-said.json", "tuning-probe.json", "file-digests.json")


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_no_value_of_the_environment_and_no_cache_password_reaches_a_file_the_build_writes(
        built_mini: Path, tmp_path: Path) -> None:
    secret = f"opencoti-secret-{uuid.uuid4().hex}"
    port = unused_port()  # nothing listens: the shared tier is away, one WARN
    env = {"CI_JOB_TOKEN": f"{secret}-token", "OPENCOTI_CACHE_URL": f"redis://:{secret}-env@127.0.0.1:{port}"}
    url = f"CACHE_URL=redis://:{secret}-variable@127.0.0.1:{port}"
    build = tmp_path / "b"
    common = (f"SRC={MINI_TREE}", f"CACHE_DIR={built_mini / 'cache'}")
    key = tmp_path / "signing.pem"
    key.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    first = scons(*common, url, build=build, env_extra=env)  # the URL on the command line, a token in the environment
    assert summary.parse(first.stdout)["compiled"] == 0  # all from the session build's cache
    record = build / "out" / null_build.RECORD_NAME
    before = record.stat().st_mtime_ns
    null = scons(*common, url, build=build, env_extra=env)  # the record's digests hold: the fast path
    assert record.stat().st_mtime_ns == before and summary.parse(null.stdout)["current"] > 0, null.stdout
    scons("package", *common, "CPU_ONLY=1", f"MODEL={write_gguf(tmp_path / 'tiny.gguf')}", f"SIGNING_KEY={key}",
          f"TRACE={build / 'trace.json'}", build=build, env_extra=env)  # the URL from the environment
    argv, run_env = scons_command(*common, url, build=build, env_extra=env)
    variables = protocol.configuration(argv[5:])
    served = client(PROJECT, "serve", "--detach", "--idle-timeout", "600", *variables, env=run_env)
    assert served.returncode == 0, served.stdout + served.stderr
    try:
        answered = client(PROJECT, "build", *argv[5:], env=run_env)
        assert answered.returncode == 0, answered.stdout + answered.stderr
    finally:
        client(PROJECT, "stop", *variables, env=run_env)
    log = protocol.server_file(PROJECT, variables, ".log")
    assert " build " in log.read_text() and "redis://:***@" in log.read_text()  # the request logged, no password

    written = [p for p in build.rglob("*") if p.is_file() and not p.is_symlink()]
    assert {p.name for p in written} >= {"compile_commands.json", "trace.json", null_build.RECORD_NAME} and any(
        p.name.endswith(".intoto.jsonl") for p in written) and any(p.name.endswith(".MANIFEST.json") for p in written)
    assert [str(p) for p in written if secret.encode() in p.read_bytes()] == []

    out = build / "out"
    assert {name: oct(mode(out / name)) for name in BOOKKEEPING} == {name: oct(0o600) for name in BOOKKEEPING}
    assert mode(out / "tmp") == 0o700 and mode(log.parent) == 0o700 and mode(log) == 0o600
    assert os.access(out / "o" / "llamafile" / "llamafile", os.X_OK) and mode(out / "o") & 0o055  # outputs: umask's
