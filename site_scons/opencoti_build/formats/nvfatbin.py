"""CUDA fat binaries: which architectures a DSO's (or object's) ``.nv_fatbin`` section holds.

The section is a run of fatbin containers (one per translation unit, plus nvcc's device-link one),
each 16 bytes ``u32 magic 0xBA55ED50, u16 version, u16 header size, u64 payload size``, the payload a
run of entries. An entry header holds: kind (1 PTX, 2 cubin) at 0x00, its own size at 0x04, the padded
payload size at 0x08, the compressed size at 0x10, the SM number at 0x1C, flags at 0x28, the
uncompressed size at 0x38. Entries compressed with ``--compress-mode`` are zstd (or LZ4) frames;
zstd ones are decoded to check that the cubin inside really is for the SM its header claims.
``cuobjdump --list-elf`` is NVIDIA's reference listing (it names an sm_120f cubin ``sm_120``).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import lief
import zstandard

from opencoti_build.errors import UserError
from opencoti_build.formats.executables import ELF_MAGIC

SECTION = ".nv_fatbin"
CONTAINER_MAGIC = 0xBA55ED50
CONTAINER_HEADER = struct.Struct("<IHHQ")
KINDS: dict[int, str] = {1: "ptx", 2: "cubin"}

# entry flag bits
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
VARIANT_FLAGS: tuple[tuple[int, str], ...] = ((0x100000, "a"), (0x200000, "f"))

EM_CUDA = 190


class FatbinError(UserError):
    """A ``.nv_fatbin`` section that does not parse."""


@dataclass(frozen=True)
class FatbinEntry:
    kind: str  # "ptx" or "cubin"
    sm: int
    variant: str  # "", "a" or "f"
    compression: str | None  # None, "zstd" or "lz4"

    @property
    def name(self) -> str:
        """``sm_120f`` for a cubin, ``compute_90`` for PTX (the spelling of -gencode's code=)."""
        prefix = "sm" if self.kind == "cubin" else "compute"
        return f"{prefix}_{self.sm}{self.variant}"


def _cubin_sm(cubin: bytes) -> int | None:
    """The SM number a decoded cubin's ELF header names (e_flags bits 8-15), None if not a CUDA ELF."""
    if not cubin.startswith(ELF_MAGIC) or len(cubin) < 52 or struct.unpack_from("<H", cubin, 18)[0] != EM_CUDA:
        return None
    return (struct.unpack_from("<I", cubin, 48)[0] >> 8) & 0xFF


def _entry(data: bytes, pos: int, end: int) -> tuple[FatbinEntry, int]:
    try:
        kind_id, header_size, padded = struct.unpack_from("<HxxII", data, pos)
        (compressed_size,) = struct.unpack_from("<I", data, pos + 0x10)
        (sm,) = struct.unpack_from("<I", data, pos + 0x1C)
        (flags,) = struct.unpack_from("<Q", data, pos + 0x28)
        (uncompressed_size,) = struct.unpack_from("<Q", data, pos + 0x38)
    except struct.error:
        raise FatbinError(f"fatbin entry at {pos:#x} is truncated") from None
    if kind_id not in KINDS or header_size < 0x40 or pos + header_size + padded > end:
        raise FatbinError(f"fatbin entry at {pos:#x} is malformed (kind {kind_id}, header {header_size})")
    variant = "".join(v for bit, v in VARIANT_FLAGS if flags & bit)
    compression = "zstd" if flags & FLAG_ZSTD else "lz4" if flags & FLAG_LZ4 else None
    payload = data[pos + header_size:pos + header_size + (compressed_size if compression else padded)]
    if kind_id == 2 and compression in (None, "zstd"):
        _check_cubin(payload, compression, uncompressed_size, sm, pos)
    return FatbinEntry(KINDS[kind_id], sm, variant, compression), pos + header_size + padded


def _check_cubin(payload: bytes, compression: str | None, uncompressed_size: int, sm: int, pos: int) -> None:
    """A cubin entry holds a cubin for the SM its header claims (an lz4 one is not decoded: no codec here)."""
    if compression == "zstd":
        try:
            payload = zstandard.ZstdDecompressor().decompress(payload, max_output_size=uncompressed_size)
        except zstandard.ZstdError as exc:
            raise FatbinError(f"fatbin entry at {pos:#x}: zstd payload does not decode ({exc})") from None
    cubin_sm = _cubin_sm(payload)
    if cubin_sm is not None and cubin_sm != sm:
        raise FatbinError(f"fatbin entry at {pos:#x} claims sm_{sm} but holds an sm_{cubin_sm} cubin")


def parse_fatbin(data: bytes) -> list[FatbinEntry]:
    """Every entry of every container in ``data`` (a ``.nv_fatbin`` section), in order."""
    entries: list[FatbinEntry] = []
    pos = 0
    while pos + CONTAINER_HEADER.size <= len(data):
        magic, _version, header_size, payload_size = CONTAINER_HEADER.unpack_from(data, pos)
        if magic != CONTAINER_MAGIC:
            pos += 8  # containers are 8-byte aligned; the gap between them is padding
            continue
        end = pos + header_size + payload_size
        if end > len(data):
            raise FatbinError(f"fatbin container at {pos:#x} runs past the end of the section")
        cursor = pos + header_size
        while cursor < end:
            entry, cursor = _entry(data, cursor, end)
            entries.append(entry)
        pos = end
    return entries


def section_data(path: str | Path) -> bytes:
    """The ``.nv_fatbin`` section of an ELF file; empty when it has none."""
    binary = lief.ELF.parse(str(path))
    if binary is None:
        raise FatbinError(f"{path}: not an ELF file")
    section = binary.get_section(SECTION)
    return bytes(section.content) if section is not None else b""


def list_entries(path: str | Path) -> list[FatbinEntry]:
    return parse_fatbin(section_data(path))


def arch_names(path: str | Path) -> list[str]:
    """Distinct ``sm_*``/``compute_*`` names in ``path``, sorted: the ggml_dso arch probe for CUDA."""
    return sorted({e.name for e in list_entries(path)})
