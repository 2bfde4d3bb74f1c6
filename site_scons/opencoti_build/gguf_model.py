"""Check that MODEL names a GGUF file before it is embedded (a header read, no parsing of tensors)."""
from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = range(1, 4)  # 1..3: what llama.cpp's gguf reader accepts


class ModelError(ValueError):
    """MODEL is unusable. The message is one line naming the file and what is wrong."""


def gguf_version(path: Path | str) -> int:
    """The GGUF version of ``path``; ModelError if it is missing, unreadable, a directory or not GGUF."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ModelError(f"MODEL={path}: no such file; point MODEL= at a .gguf file") from None
    except OSError as exc:
        raise ModelError(f"MODEL={path}: cannot read: {exc.strerror}") from exc
    if stat.S_ISDIR(st.st_mode):
        raise ModelError(f"MODEL={path} is a directory; point MODEL= at the .gguf file inside it")
    if not stat.S_ISREG(st.st_mode):
        raise ModelError(f"MODEL={path} is not a regular file; point MODEL= at a .gguf file")
    try:
        with open(path, "rb") as f:
            header = f.read(8)
    except OSError as exc:
        raise ModelError(f"MODEL={path}: cannot read: {exc.strerror}") from exc
    if len(header) < 8 or header[:4] != GGUF_MAGIC:
        raise ModelError(f"MODEL={path} is not a GGUF file (no 'GGUF' magic); convert it with llama.cpp's convert_hf_to_gguf.py")
    (version,) = struct.unpack("<I", header[4:])
    if version not in GGUF_VERSIONS:
        if struct.unpack(">I", header[4:])[0] in GGUF_VERSIONS:
            raise ModelError(f"MODEL={path} is a big-endian GGUF; llamafile needs a little-endian one")
        raise ModelError(f"MODEL={path} has GGUF version {version}; llamafile reads versions 1 to 3")
    return version
