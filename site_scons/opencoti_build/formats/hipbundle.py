"""Clang offload bundles: the gfx targets inside a HIP object's or DSO's ``.hip_fatbin`` section.

Uncompressed bundle: the 24-byte magic ``__CLANG_OFFLOAD_BUNDLE__``, ``u64`` entry count, then per
entry ``u64 offset`` (from the bundle start), ``u64 size``, ``u64 id_len`` and the id, e.g.
``hipv4-amdgcn-amd-amdhsa--gfx1030`` (``<kind>-<arch>-<vendor>-<os>-<env>-<target id>``; the host
entry ``host-x86_64-unknown-linux`` is empty). A linked DSO holds one bundle per translation unit.

Compressed bundle (``--offload-compress``, clang 18+; clang 15 refuses the flag): ``CCOB``, ``u16``
version, ``u16`` method (0 zlib, 1 zstd), then per version the sizes below and a ``u64`` hash, then the
compressed bytes of one uncompressed bundle.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import lief
import zstandard

from opencoti_build.errors import UserError
from opencoti_build.formats.executables import ELF_MAGIC

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_MAGIC = b"CCOB"
SECTION = ".hip_fatbin"

# CCOB version -> (struct format of the fields after magic/version/method, has a total-size field).
# v1: uncompressed u32, hash u64; v2: total u32, uncompressed u32, hash u64; v3: all u64.
COMPRESSED_HEADERS: dict[int, tuple[str, bool]] = {
    1: ("<IQ", False),
    2: ("<IIQ", True),
    3: ("<QQQ", True),
}
COMPRESSION_METHODS: dict[int, str] = {0: "zlib", 1: "zstd"}


class HipBundleError(UserError):
    """A file or section that does not hold readable offload bundles."""


@dataclass(frozen=True)
class BundleEntry:
    """One code object of a bundle, by its offload id."""

    id: str
    offset: int
    size: int

    @property
    def kind(self) -> str:
        return self.id.split("-", 1)[0]

    @property
    def target(self) -> str | None:
        """The target id (``gfx1030``, ``gfx90a:xnack+``), None for the host entry."""
        parts = self.id.split("-", 5)
        return parts[5] if len(parts) == 6 and parts[5] else None


@dataclass(frozen=True)
class Bundle:
    """A bundle at ``offset`` of the data it was read from; ``compression`` is None if stored plain."""

    offset: int
    length: int
    entries: tuple[BundleEntry, ...]
    compression: str | None = None

    @property
    def targets(self) -> list[str]:
        return [e.target for e in self.entries if e.target]


def _parse_plain(data: bytes, offset: int) -> tuple[tuple[BundleEntry, ...], int]:
    """Entries of the uncompressed bundle at ``offset`` and its length."""
    try:
        pos = offset + len(BUNDLE_MAGIC)
        (count,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        entries = []
        for _ in range(count):
            entry_offset, size, id_len = struct.unpack_from("<QQQ", data, pos)
            pos += 24
            entry_id = data[pos:pos + id_len].decode("ascii")
            if len(entry_id) != id_len:
                raise HipBundleError(f"offload bundle at {offset:#x}: truncated id")
            pos += id_len
            entries.append(BundleEntry(id=entry_id, offset=entry_offset, size=size))
    except (struct.error, UnicodeDecodeError) as exc:
        raise HipBundleError(f"offload bundle at {offset:#x}: malformed header ({exc})") from exc
    length = max([pos - offset] + [e.offset + e.size for e in entries])
    if offset + length > len(data):
        raise HipBundleError(f"offload bundle at {offset:#x}: entries run past the end of the data")
    return tuple(entries), length


def _decompress(method: str, payload: bytes) -> tuple[bytes, int]:
    """(decompressed bytes, compressed bytes consumed) of one zlib stream or zstd frame."""
    if method == "zlib":
        inflater = zlib.decompressobj()
        out = inflater.decompress(payload)
        return out, len(payload) - len(inflater.unused_data)
    decoder = zstandard.ZstdDecompressor().decompressobj()
    out = decoder.decompress(payload)
    return out, len(payload) - len(decoder.unused_data)


def _parse_compressed(data: bytes, offset: int) -> Bundle:
    try:
        version, method_id = struct.unpack_from("<HH", data, offset + 4)
    except struct.error as exc:
        raise HipBundleError(f"compressed offload bundle at {offset:#x}: truncated header") from exc
    if version not in COMPRESSED_HEADERS:
        raise HipBundleError(f"compressed offload bundle at {offset:#x}: unknown CCOB version {version}")
    if method_id not in COMPRESSION_METHODS:
        raise HipBundleError(f"compressed offload bundle at {offset:#x}: unknown compression method {method_id}")
    fmt, has_total = COMPRESSED_HEADERS[version]
    header_len = 8 + struct.calcsize(fmt)
    fields = struct.unpack_from(fmt, data, offset + 8)
    total = fields[0] if has_total else None
    payload_end = offset + total if total else len(data)
    method = COMPRESSION_METHODS[method_id]
    try:
        plain, consumed = _decompress(method, data[offset + header_len:payload_end])
    except (zlib.error, zstandard.ZstdError) as exc:
        raise HipBundleError(f"compressed offload bundle at {offset:#x}: {method} data does not decode ({exc})") from exc
    if not plain.startswith(BUNDLE_MAGIC):
        raise HipBundleError(f"compressed offload bundle at {offset:#x}: decodes to something other than a bundle")
    entries, _ = _parse_plain(plain, 0)
    return Bundle(offset=offset, length=total or header_len + consumed, entries=entries, compression=method)


def _next_bundle(data: bytes, start: int) -> int:
    hits = [p for p in (data.find(BUNDLE_MAGIC, start), data.find(COMPRESSED_MAGIC, start)) if p >= 0]
    return min(hits) if hits else -1


def parse_bundles(data: bytes) -> list[Bundle]:
    """Every offload bundle in ``data`` (a ``.hip_fatbin`` section or a bundler output file)."""
    bundles: list[Bundle] = []
    pos = _next_bundle(data, 0)
    while pos >= 0:
        if data.startswith(COMPRESSED_MAGIC, pos):
            bundle = _parse_compressed(data, pos)
        else:
            entries, length = _parse_plain(data, pos)
            bundle = Bundle(offset=pos, length=length, entries=entries)
        bundles.append(bundle)
        pos = _next_bundle(data, pos + bundle.length)
    return bundles


def fatbin_data(path: str | Path) -> bytes:
    """The ``.hip_fatbin`` section of an ELF file, or the whole file if it is not ELF (a raw bundle)."""
    raw = Path(path).read_bytes()
    if not raw.startswith(ELF_MAGIC):
        return raw
    binary = lief.ELF.parse(str(path))
    section = binary.get_section(SECTION) if binary else None
    if section is None:
        raise HipBundleError(f"{path}: no {SECTION} section (not built by hipcc for AMD GPUs)")
    return bytes(section.content)


def read_bundles(path: str | Path) -> list[Bundle]:
    bundles = parse_bundles(fatbin_data(path))
    if not bundles:
        raise HipBundleError(f"{path}: {SECTION} holds no clang offload bundle")
    return bundles


def bundle_targets(path: str | Path) -> list[str]:
    """The distinct gfx target ids the HIP code objects in ``path`` were built for, sorted."""
    return sorted({t for b in read_bundles(path) for t in b.targets})
