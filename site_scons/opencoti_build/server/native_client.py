"""The build server's C client, ``BUILD_DIR/server/opencoti-client``: ``build`` without a Python interpreter's start
(client.c says what it does). ``serve`` compiles it when it starts, so the one beside the socket is always made from
the server's own client.c, for the server's interpreter (what it runs ``-m SCons`` with when no server answers).

It is compiled again only when that source, the interpreter or the compiler's command line differs from what its
stamp records, or when the file is no longer the one the stamp names (changed by hand): the stamp holds the
digests of both. Written to a temporary and renamed, so a client is whole or absent; the client is 0700 and its
stamp 0600, whatever the umask.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from opencoti_build import files, tempfiles
from opencoti_build.server import boundary

SOURCE = Path(__file__).with_name("client.c")
NAME = "opencoti-client"
STAMP_SUFFIX = ".stamp"


def command(compiler: str, python: str, output: str) -> list[str]:
    """The compile and link of the client (``python``: the interpreter it falls back to, as a C string)."""
    return [compiler, "-std=c11", "-O2", "-Wall", "-Wextra", f"-DOPENCOTI_PYTHON={json.dumps(python)}",
            "-o", output, str(SOURCE)]


def install(server_dir: Path, python: str = sys.executable) -> tuple[Path | None, str]:
    """(the client, what was done) or (None, why there is none: one line). Never raises for a missing compiler
    or a failed compile: the Python client serves then."""
    compiler = shutil.which(os.environ.get("CC") or "cc")
    if compiler is None:
        return None, f"no C compiler ({os.environ.get('CC') or 'cc'}) on PATH; python3 -m opencoti_build build serves"
    client = server_dir / NAME
    stamp = server_dir / (NAME + STAMP_SUFFIX)
    inputs = hashlib.sha256(SOURCE.read_bytes() + "\0".join(command(compiler, python, NAME)).encode()).hexdigest()
    if _stamped(client, stamp) == inputs:
        _private(client, stamp)  # as an older server may have left them
        return client, "current"
    with tempfile.TemporaryDirectory(dir=server_dir, prefix=f".{NAME}.") as scratch:  # the linker's to write in
        made = subprocess.run(command(compiler, python, os.path.join(scratch, NAME)), capture_output=True, text=True)
        if made.returncode != 0:
            first = (made.stderr.strip().splitlines() or [f"status {made.returncode}"])[0]
            return None, f"{compiler} could not compile {SOURCE.name}: {first}"
        output = files.sha256(Path(scratch, NAME))
        os.chmod(os.path.join(scratch, NAME), boundary.CLIENT_MODE)  # the user's alone, whatever the umask
        os.replace(os.path.join(scratch, NAME), client)
    fd, tmp = tempfiles.create(stamp)
    try:
        os.fchmod(fd, boundary.PRIVATE_FILE)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{inputs} {output}\n")
        os.replace(tmp, stamp)
    finally:
        tmp.unlink(missing_ok=True)
    return client, "compiled"


def _private(client: Path, stamp: Path) -> None:
    for path, mode in ((client, boundary.CLIENT_MODE), (stamp, boundary.PRIVATE_FILE)):
        if stat.S_IMODE(path.stat().st_mode) != mode:
            os.chmod(path, mode)


def _stamped(client: Path, stamp: Path) -> str | None:
    """The inputs digest the stamp records, when the client is still the file it was compiled to."""
    try:
        inputs, output = stamp.read_text().split()
        return inputs if files.sha256(client) == output else None
    except (OSError, ValueError):
        return None
