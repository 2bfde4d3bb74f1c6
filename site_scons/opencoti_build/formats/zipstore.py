"""Read the zip store at the end of an executable: its central directory records, verbatim.

The packager keeps a base executable's existing entries where they are and re-lists them in the
one central directory it writes, so it needs the raw records and absolute offsets, which
``zipfile`` does not expose. ``verify`` uses the same reader to find each entry's data offset.
"""
from __future__ import annotations

import os
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from opencoti_build.errors import UserError

U16_MAX = 0xFFFF
U32_MAX = 0xFFFFFFFF
ZIP64_EXTRA_ID = 0x0001
FLAG_UTF8 = 0x800
# The zip records, as zipfile lays them out (the writer, zipappend, packs the same ones), and their signatures:
# zipfile's undocumented module constants, which typeshed leaves out
LOCAL_HEADER = struct.Struct(zipfile.structFileHeader)  # type: ignore[attr-defined]  # not in typeshed
CENTRAL = struct.Struct(zipfile.structCentralDir)  # type: ignore[attr-defined]  # not in typeshed
EOCD = struct.Struct(zipfile.structEndArchive)  # type: ignore[attr-defined]  # not in typeshed
EOCD64 = struct.Struct(zipfile.structEndArchive64)  # type: ignore[attr-defined]  # not in typeshed
LOCATOR = struct.Struct(zipfile.structEndArchive64Locator)  # type: ignore[attr-defined]  # not in typeshed
LOCAL_HEADER_SIGNATURE: bytes = zipfile.stringFileHeader  # type: ignore[attr-defined]  # not in typeshed
CENTRAL_SIGNATURE: bytes = zipfile.stringCentralDir  # type: ignore[attr-defined]  # not in typeshed
EOCD_SIGNATURE: bytes = zipfile.stringEndArchive  # type: ignore[attr-defined]  # not in typeshed
EOCD64_SIGNATURE: bytes = zipfile.stringEndArchive64  # type: ignore[attr-defined]  # not in typeshed
LOCATOR_SIGNATURE: bytes = zipfile.stringEndArchive64Locator  # type: ignore[attr-defined]  # not in typeshed
_MAX_COMMENT = 0xFFFF


class ZipStoreError(UserError):
    """The file has no zip store, or a corrupt one. The message is one line naming the file."""


@dataclass(frozen=True)
class CentralRecord:
    """One central directory record: ``raw`` is its exact bytes (header, name, extra, comment)."""

    raw: bytes
    name: str
    method: int
    crc32: int
    compressed_size: int
    size: int
    header_offset: int


@dataclass(frozen=True)
class ZipStore:
    """A file's zip store: where its central directory starts and what it lists, in order."""

    path: Path
    file_size: int
    cd_offset: int
    records: tuple[CentralRecord, ...]


def method_name(method: int) -> str:
    """The manifest's word for a compression method."""
    return {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}.get(method, f"method-{method}")


def decode_name(raw: bytes, flags: int) -> str:
    # zip names are cp437 unless the UTF-8 flag is set (what zipfile and unzip assume too)
    return raw.decode("utf-8" if flags & FLAG_UTF8 else "cp437")


def _zip64_fields(extra: bytes, wanted: int) -> list[int]:
    """The first ``wanted`` u64 values of the zip64 extra field in ``extra`` (empty if none)."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == ZIP64_EXTRA_ID:
            count = min(wanted, length // 8)
            return list(struct.unpack_from(f"<{count}Q", extra, pos + 4))
        pos += 4 + length
    return []


def _find_eocd(f: BinaryIO, path: Path, size: int) -> tuple[int, tuple]:
    tail_len = min(size, EOCD.size + _MAX_COMMENT)
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    pos = tail.rfind(EOCD_SIGNATURE)
    while pos >= 0:
        if pos + EOCD.size <= len(tail):
            fields = EOCD.unpack_from(tail, pos)
            # a real EOCD's comment runs exactly to the end of the file
            if pos + EOCD.size + fields[7] == len(tail):
                return size - tail_len + pos, fields
        pos = tail.rfind(EOCD_SIGNATURE, 0, pos)
    raise ZipStoreError(f"{path}: no zip store (no end-of-central-directory record at the end of the file)")


def read_zip_store(path: Path) -> ZipStore:
    """Parse ``path``'s zip store; raise ZipStoreError on anything missing or inconsistent."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            return _read(f, path, size)
    except OSError as exc:
        raise ZipStoreError(f"{path}: cannot read: {exc.strerror}") from exc


def _read(f: BinaryIO, path: Path, size: int) -> ZipStore:
    eocd_pos, (_, disk, cd_disk, _, count, cd_size, cd_offset, _) = _find_eocd(f, path, size)
    if disk or cd_disk:
        raise ZipStoreError(f"{path}: corrupt zip store: multi-disk archives are not supported")
    cd_end, count, cd_size, cd_offset = _zip64_end(f, path, eocd_pos, (eocd_pos, count, cd_size, cd_offset))
    if cd_offset + cd_size != cd_end:
        # offsets relative to the zip's own start (a .zip cat'ed onto an executable) would need a
        # fix-up pass; upstream's zip tools and this packager always write absolute offsets
        raise ZipStoreError(
            f"{path}: zip store offsets are not absolute (central directory ends at {cd_offset + cd_size}, "
            f"end record at {cd_end}); rewrite it with `zip -A`"
        )
    f.seek(cd_offset)
    cd = f.read(cd_size)
    if len(cd) != cd_size:
        raise ZipStoreError(f"{path}: corrupt zip store: central directory runs past the end of the file")
    records = []
    pos = 0
    for index in range(count):
        record, pos = _central_record(cd, pos, path, index, count)
        records.append(record)
    return ZipStore(path, size, cd_offset, tuple(records))


def _zip64_end(f: BinaryIO, path: Path, eocd_pos: int,
               found: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """Where the central directory ends, its record count, size and offset: ``found`` (from the end record at
    ``eocd_pos``) unless a zip64 locator precedes it, whose zip64 end record then says."""
    if eocd_pos < LOCATOR.size:
        return found
    f.seek(eocd_pos - LOCATOR.size)
    locator = LOCATOR.unpack(f.read(LOCATOR.size))
    if locator[0] != LOCATOR_SIGNATURE:
        return found
    eocd64_pos = locator[2]
    f.seek(eocd64_pos)
    raw64 = f.read(EOCD64.size)
    if len(raw64) != EOCD64.size or raw64[:4] != EOCD64_SIGNATURE:
        raise ZipStoreError(f"{path}: corrupt zip store: zip64 locator points at no zip64 end record")
    _, _, _, _, _, _, _, count, cd_size, cd_offset = EOCD64.unpack(raw64)
    return eocd64_pos, count, cd_size, cd_offset


def _central_record(cd: bytes, pos: int, path: Path, index: int, count: int) -> tuple[CentralRecord, int]:
    """The central directory record at ``pos`` of ``cd`` (the ``index``-th of ``count``), and where the next starts."""
    if pos + CENTRAL.size > len(cd) or cd[pos:pos + 4] != CENTRAL_SIGNATURE:
        raise ZipStoreError(f"{path}: corrupt zip store: central directory record {index} of {count} is damaged")
    fields = CENTRAL.unpack_from(cd, pos)
    flags, method, crc = fields[5], fields[6], fields[9]
    csize, usize, name_len, extra_len, comment_len = fields[10], fields[11], fields[12], fields[13], fields[14]
    offset = fields[18]
    end = pos + CENTRAL.size + name_len + extra_len + comment_len
    if end > len(cd):
        raise ZipStoreError(f"{path}: corrupt zip store: central directory record {index} runs past its end")
    name_start = pos + CENTRAL.size
    extra = cd[name_start + name_len:name_start + name_len + extra_len]
    # zip64 extra holds, in this order, only the fields whose 32-bit slot is saturated
    wide = iter(_zip64_fields(extra, 3))
    try:
        usize = next(wide) if usize == U32_MAX else usize
        csize = next(wide) if csize == U32_MAX else csize
        offset = next(wide) if offset == U32_MAX else offset
    except StopIteration:
        raise ZipStoreError(f"{path}: corrupt zip store: record {index} lacks its zip64 extra field") from None
    name = decode_name(cd[name_start:name_start + name_len], flags)
    return CentralRecord(cd[pos:end], name, method, crc, csize, usize, offset), end


def data_offset(f: BinaryIO, path: Path, record: CentralRecord, limit: int) -> int:
    """Where ``record``'s data starts: after its local header's name and extra field."""
    f.seek(record.header_offset)
    header = f.read(LOCAL_HEADER.size)
    if len(header) != LOCAL_HEADER.size or header[:4] != LOCAL_HEADER_SIGNATURE:
        raise ZipStoreError(f"{path}: corrupt zip store: entry {record.name!r} has no local header at {record.header_offset}")
    name_len, extra_len = LOCAL_HEADER.unpack(header)[10:12]
    start = record.header_offset + LOCAL_HEADER.size + name_len + extra_len
    if start + record.compressed_size > limit:
        raise ZipStoreError(f"{path}: corrupt zip store: entry {record.name!r} runs past the central directory")
    return start
