"""Check that MODEL names a whole GGUF file before it is embedded.

The file is parsed as llama.cpp's gguf reader does, without reading any tensor data: header,
every metadata key/value, every tensor info, then each tensor's data range is checked to lie
within the file (a truncated download passes the magic and version but fails here). The file is
memory-mapped and only its head is touched: a multi-GiB model costs its metadata, not its size.
"""
from __future__ import annotations

import mmap
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from opencoti_build.errors import UserError

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = range(1, 4)  # 1..3: what llama.cpp's gguf reader accepts
DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT; general.alignment overrides it
MAX_DIMS = 4  # GGML_MAX_DIMS

# Metadata value types (gguf_type): fixed sizes; 8 is a string, 9 an array.
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_INTEGER = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}
_STRING, _ARRAY = 8, 9

# ggml_type -> (elements per block, bytes per block), as ggml's type_traits (gguf-py's GGML_QUANT_SIZES).
# A type not listed (newer than this table) gets its data start checked, not its end.
GGML_TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 40),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2),
    34: (256, 54), 35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18),
}


class ModelError(UserError):
    """MODEL is unusable. The message is one line naming the file and what is wrong."""


@dataclass(frozen=True)
class GgufInfo:
    version: int
    tensors: int
    metadata: int
    data_offset: int  # where the tensor data section starts
    file_size: int


class _Cut(Exception):
    """The parse ran past the end of the file: ``what`` was being read."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class _Reader:
    def __init__(self, data: mmap.mmap | bytes, version: int) -> None:
        self.data, self.pos, self.size = data, 8, len(data)
        self.count_format = "<I" if version == 1 else "<Q"  # GGUF v1 used 32-bit counts and lengths

    def take(self, n: int, what: str) -> int:
        start = self.pos
        if n < 0 or start + n > self.size:
            raise _Cut(what)
        self.pos = start + n
        return start

    def unpack(self, fmt: str, what: str):
        start = self.take(struct.calcsize(fmt), what)
        return struct.unpack_from(fmt, self.data, start)[0]

    def count(self, what: str) -> int:
        return self.unpack(self.count_format, what)

    def string(self, what: str) -> bytes:
        length = self.count(what)
        start = self.take(length, what)
        return bytes(self.data[start:start + length])

    def skip_string(self, what: str) -> None:
        self.take(self.count(what), what)

    def value(self, kind: int, what: str, key: str) -> int | None:
        """Read (skip) one value of type ``kind``; an integer's value is returned (general.alignment)."""
        if kind in _INTEGER:
            return self.unpack(_INTEGER[kind], what)
        if kind in _FIXED:
            self.take(_FIXED[kind], what)
        elif kind == _STRING:
            self.skip_string(what)
        elif kind == _ARRAY:
            element = self.unpack("<I", what)
            n = self.count(what)
            if element in _FIXED:
                self.take(n * _FIXED[element], what)  # no loop: a 150k-entry array is one bounds check
            elif element in (_STRING, _ARRAY):
                for _ in range(n):
                    self.value(element, what, key)
            else:
                raise _Bad(f"metadata key {key!r} is an array of unknown type {element}")
        else:
            raise _Bad(f"metadata key {key!r} has unknown type {kind}")
        return None


class _Bad(Exception):
    """A malformed field (not a truncation)."""


def _parse(data: mmap.mmap | bytes, version: int) -> GgufInfo:
    r = _Reader(data, version)
    n_tensors = r.count("the header")
    n_kv = r.count("the header")
    alignment = _metadata_alignment(r, n_kv)
    tensors = [_tensor_info(r, i, n_tensors) for i in range(n_tensors)]
    data_offset = -(-r.pos // alignment) * alignment
    for name, dims, kind, offset in tensors:
        _check_tensor_data(r, name, dims, kind, offset, data_offset, alignment)
    return GgufInfo(version, n_tensors, n_kv, data_offset, r.size)


def _metadata_alignment(r: _Reader, n_kv: int) -> int:
    """Read the ``n_kv`` metadata entries; the alignment ``general.alignment`` sets, else the default."""
    alignment = DEFAULT_ALIGNMENT
    for i in range(n_kv):
        key = r.string(f"metadata entry {i + 1} of {n_kv}").decode("utf-8", "replace")
        kind = r.unpack("<I", f"metadata {key!r}")
        value = r.value(kind, f"metadata {key!r}", key)
        if key == "general.alignment":
            if value is None or value <= 0 or value & (value - 1):
                raise _Bad(f"general.alignment is {value!r}, not a power of two")
            alignment = value
    return alignment


def _tensor_info(r: _Reader, i: int, n_tensors: int) -> tuple[str, list[int], int, int]:
    """The ``i``-th tensor's name, dimensions, type and data offset."""
    name = r.string(f"tensor info {i + 1} of {n_tensors}").decode("utf-8", "replace")
    what = f"tensor info {name!r}"
    n_dims = r.unpack("<I", what)
    if not 1 <= n_dims <= MAX_DIMS:
        raise _Bad(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
    dims = [r.count(what) for _ in range(n_dims)]
    kind = r.unpack("<I", what)
    offset = r.unpack("<Q", what)
    return name, dims, kind, offset


def _check_tensor_data(r: _Reader, name: str, dims: list[int], kind: int, offset: int, data_offset: int,
                       alignment: int) -> None:
    """A tensor's data is aligned, whole blocks of its type, and inside the file (a type of unknown size: its start)."""
    if offset % alignment:
        raise _Bad(f"tensor {name!r} data offset {offset} is not a multiple of the alignment {alignment}")
    start = data_offset + offset
    end = start
    if kind in GGML_TYPE_SIZES:
        block, size = GGML_TYPE_SIZES[kind]
        if dims[0] % block:
            raise _Bad(f"tensor {name!r} row of {dims[0]} is not a whole number of type-{kind} blocks ({block})")
        elements = 1
        for d in dims:
            elements *= d
        end = start + elements // block * size
    if start > r.size or end > r.size:
        raise _Cut(f"tensor {name!r} data (it ends at byte {max(start, end)})")


def check_gguf(path: Path | str) -> GgufInfo:
    """Parse ``path`` whole (no tensor data read); ModelError naming the file and the first problem."""
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
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if len(header) == 8 else None
    except OSError as exc:
        raise ModelError(f"MODEL={path}: cannot read: {exc.strerror}") from exc
    try:
        if mapped is None or header[:4] != GGUF_MAGIC:  # mapped only once all 8 header bytes were read
            raise ModelError(f"MODEL={path} is not a GGUF file (no 'GGUF' magic); "
                             "convert it with llama.cpp's convert_hf_to_gguf.py")
        (version,) = struct.unpack("<I", header[4:])
        if version not in GGUF_VERSIONS:
            if struct.unpack(">I", header[4:])[0] in GGUF_VERSIONS:
                raise ModelError(f"MODEL={path} is a big-endian GGUF; llamafile needs a little-endian one")
            raise ModelError(f"MODEL={path} has GGUF version {version}; llamafile reads versions 1 to 3")
        try:
            return _parse(mapped, version)
        except _Cut as cut:
            raise ModelError(f"MODEL={path} is truncated: {cut.what} runs past its end ({st.st_size} bytes); "
                             "download or convert the model again") from None
        except _Bad as bad:
            raise ModelError(f"MODEL={path} is not a valid GGUF file: {bad}; convert the model again") from None
    finally:
        if mapped is not None:
            mapped.close()


def gguf_version(path: Path | str) -> int:
    """The GGUF version of ``path``, after :func:`check_gguf` parsed it whole."""
    return check_gguf(path).version
