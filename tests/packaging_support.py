"""Inputs for the packaging tests: real cosmopolitan executables (cosmo-file wheel) and GGUF models."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import cosmo_file
import gguf
import numpy as np

COSMO_DATA = Path(cosmo_file.__file__).parent / "data"
FILE_ELF = COSMO_DATA / "file.elf"  # cosmopolitan `file`: reads /zip/<entry> from its own zip store
PLEDGE = COSMO_DATA / "pledge"  # a real APE (MZ + shell header), runs as `sh ./pledge -h`
# A `file` magic rule that names a GGUF and its version: proves the runtime read the entry's bytes.
GGUF_MAGIC = "0\tstring\tGGUF\tGGUF model\n>4\tulelong\tx\t\\b, version %d\n"


def copy_exe(source: Path, dest: Path) -> Path:
    shutil.copyfile(source, dest)
    os.chmod(dest, 0o755)
    return dest


def as_llamafile(exe: Path, dest: Path, version: str = "0.10.3", options: tuple[str, ...] = ("-m",),
                 extra: tuple[Path, ...] = ()) -> Path:
    """``exe`` made to pass for a thin llamafile binary: a stored zip entry holds NUL-terminated
    "llamafile v<version>" and ``options`` (what packaging reads from a host's strings); it still runs.
    The files ``extra`` are stored in it too."""
    from opencoti_build.bulkcopy import zipwriter
    from opencoti_build.formats import zipappend

    strings = b"".join(s.encode() + b"\0" for s in (f"llamafile v{version}", *options))
    entries = [zipappend.Entry.blob("llamafile-strings", b"\0" + strings), *map(zipappend.Entry.file, extra)]
    zipwriter.append(exe, entries, dest)
    os.chmod(dest, 0o755)
    return dest


def write_gguf(path: Path, values: int = 16) -> Path:
    """A small real GGUF (version 3) written by the gguf package."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("weights", np.arange(values, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def make_sparse(path: Path, hole: int, marker: bytes = b"THE-END!") -> Path:
    """``path`` (created empty if absent) followed by a ``hole`` of unwritten bytes, then ``marker``."""
    with open(path, "ab") as f:
        f.truncate(f.tell() + hole)
        f.seek(0, os.SEEK_END)
        f.write(marker)
    return path


def run(*argv: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=300)
