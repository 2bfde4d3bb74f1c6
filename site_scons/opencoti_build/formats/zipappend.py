"""The zip-append format (llamafile's zipalign's): a base executable, aligned STORED entries, one central directory.

The output is a new file: the base's bytes unchanged (its zip store's local headers stay where they are), then each
new entry with its DATA aligned (llamafile mmaps weights and DSOs from the executable, so they must be stored and
aligned: an entry's local header is preceded by the zeros that put its data on the next multiple of the alignment),
then one central directory listing the base's entries and the new ones, and the end records. Offsets are absolute,
as cosmopolitan's zip store expects. Zip64 structures appear only where a value does not fit, so ordinary artifacts
stay readable by readers without zip64 support.

This module is the format alone: the entries, their names, the records' bytes, where an entry's data lands. It
writes no file and starts nothing; the writer that puts these bytes in a file, with the inputs' bulk copy, is
``opencoti_build.bulkcopy.zipwriter``.
"""
from __future__ import annotations

import hashlib
import os
import stat
import struct
import time
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from io import FileIO
from pathlib import Path, PurePosixPath

from opencoti_build.errors import UserError
from opencoti_build.formats.zipstore import (
    CENTRAL,
    CENTRAL_SIGNATURE,
    EOCD,
    EOCD64,
    EOCD64_SIGNATURE,
    EOCD_SIGNATURE,
    FLAG_UTF8,
    LOCAL_HEADER,
    LOCAL_HEADER_SIGNATURE,
    LOCATOR,
    LOCATOR_SIGNATURE,
    U16_MAX,
    U32_MAX,
    ZIP64_EXTRA_ID,
    CentralRecord,
    ZipStoreError,
    data_offset,
    method_name,
)

DEFAULT_ALIGN = 65536
MAX_ALIGN = 1 << 30
_READ = 4 << 20  # how much of a base entry is read at a time for its digest
_UNIX = 3  # "made by" host system: Unix, so readers honour the mode bits in the external attributes
_VERSION = 20  # 2.0: what a stored entry needs
_VERSION_ZIP64 = 45  # 4.5: zip64 extensions
_DOS_EPOCH_MIN = 315532800  # 1980-01-01T00:00:00Z, the earliest DOS timestamp
_DOS_EPOCH_MAX = 4354819198  # 2107-12-31T23:59:58Z, the latest


class ZipAppendError(UserError):
    """Packaging input or output is unusable. The message is one line naming the thing and the fix."""


@dataclass(frozen=True)
class Entry:
    """A new entry: the contents of ``path`` or the bytes ``data``, stored as ``name`` with ``mode``."""

    name: str
    path: Path | None = None
    data: bytes | None = None
    mode: int = 0o644

    @classmethod
    def file(cls, path: Path | str, name: str | None = None, mode: int | None = None) -> Entry:
        """A file entry, named by its bare file name unless told otherwise (zipalign ``-j``).

        The mode is normalised (0755 if any execute bit is set, else 0644) so the archive does
        not depend on the umask of the checkout it was built from.
        """
        path = Path(path)
        if mode is None:
            try:
                mode = 0o755 if os.stat(path).st_mode & 0o111 else 0o644
            except OSError as exc:
                raise ZipAppendError(f"cannot read {path}: {exc.strerror}") from exc
        return cls(name=path.name if name is None else name, path=path, mode=mode)

    @classmethod
    def blob(cls, name: str, data: bytes, mode: int = 0o644) -> Entry:
        return cls(name=name, data=bytes(data), mode=mode)


@dataclass(frozen=True)
class EntryInfo:
    """An entry of the written archive: where its data lies and what it holds."""

    name: str
    data_offset: int
    size: int
    compressed_size: int
    method: str
    crc32: int
    sha256: str
    appended: bool


@dataclass(frozen=True)
class AppendResult:
    """What an append wrote: the output's digest and size, the base's digest, every entry in order."""

    path: Path
    size: int
    sha256: str
    base_sha256: str
    align: int
    entries: tuple[EntryInfo, ...]

    def entry(self, name: str) -> EntryInfo:
        for info in self.entries:
            if info.name == name:
                return info
        raise KeyError(name)


@dataclass
class Pending:
    """An entry about to be written: its size and CRC-32, which its records hold."""

    entry: Entry
    size: int
    crc32: int


def dos_datetime(epoch: int) -> tuple[int, int]:
    """(DOS date, DOS time) of a UNIX time, clamped to the range DOS timestamps can hold."""
    t = time.gmtime(min(max(int(epoch), _DOS_EPOCH_MIN), _DOS_EPOCH_MAX))
    return (t.tm_year - 1980) << 9 | t.tm_mon << 5 | t.tm_mday, t.tm_hour << 11 | t.tm_min << 5 | t.tm_sec // 2


def check_name(name: str) -> None:
    """Refuse names a reader could resolve outside its extraction dir or that cannot be stored."""
    if not name or "\\" in name or "\0" in name or "\n" in name:
        raise ZipAppendError(f"entry name {name!r} is empty or holds a backslash, NUL or newline; use a plain relative name")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ZipAppendError(f"entry name {name!r} is absolute; use a relative name such as {PurePosixPath(name).name!r}")
    parts = name.split("/")
    if ".." in parts:
        raise ZipAppendError(f"entry name {name!r} contains '..'; use a name inside the archive")
    if any(part in ("", ".") for part in parts):
        raise ZipAppendError(f"entry name {name!r} has an empty or '.' component (or is a directory); name a file")
    if len(name.encode("utf-8")) > U16_MAX:
        raise ZipAppendError(f"entry name {name[:40]!r}… is longer than a zip name can be (65535 bytes)")


def check_align(align: int) -> None:
    """Refuse an alignment that is no power of two from 1 to 2**30."""
    if align < 1 or align & (align - 1) or align > MAX_ALIGN:
        raise ZipAppendError(f"ALIGN={align} is not a power of two between 1 and 2**30; use e.g. 65536")


def check_entries(entries: Sequence[Entry], base_names: set[str], base: Path) -> None:
    """Refuse a bad name, an entry with both or neither of a path and data, a name given twice or already in the
    base's zip store."""
    seen: set[str] = set()
    for entry in entries:
        check_name(entry.name)
        if (entry.path is None) == (entry.data is None):
            raise ZipAppendError(f"entry {entry.name!r} needs exactly one of a path or data")
        if entry.name in base_names:
            raise ZipAppendError(f"entry {entry.name!r} is already in {base}'s zip store; rename it")
        if entry.name in seen:
            raise ZipAppendError(f"entry {entry.name!r} is given twice; embed each name once")
        seen.add(entry.name)


def data_start(pos: int, header_size: int, align: int) -> int:
    """Where the data of an entry whose local header (``header_size`` bytes) follows the gap from ``pos`` lands: the
    first multiple of ``align`` at or past ``pos + header_size`` (the gap is ``data_start - header_size - pos``
    zeros)."""
    return -(-(pos + header_size) // align) * align


def _flags(name: str) -> int:
    return 0 if name.isascii() else FLAG_UTF8


def local_header(p: Pending, date: int, dtime: int) -> bytes:
    """The local header of a stored entry, its name and its zip64 extra (when its size needs one)."""
    name = p.entry.name.encode("utf-8")
    wide = p.size >= U32_MAX
    # a local header's zip64 extra must carry both sizes whenever either is saturated
    extra = struct.pack("<HHQQ", ZIP64_EXTRA_ID, 16, p.size, p.size) if wide else b""
    size32 = U32_MAX if wide else p.size
    return LOCAL_HEADER.pack(
        LOCAL_HEADER_SIGNATURE, _VERSION_ZIP64 if wide else _VERSION, 0, _flags(p.entry.name),
        zipfile.ZIP_STORED, dtime, date, p.crc32, size32, size32, len(name), len(extra),
    ) + name + extra


def central_record(p: Pending, offset: int, date: int, dtime: int) -> bytes:
    """The central directory record of a stored entry whose local header is at ``offset``."""
    name = p.entry.name.encode("utf-8")
    wide = [v for v in (p.size, p.size, offset) if v >= U32_MAX]
    extra = struct.pack(f"<HH{len(wide)}Q", ZIP64_EXTRA_ID, 8 * len(wide), *wide) if wide else b""
    version = _VERSION_ZIP64 if wide else _VERSION
    size32 = min(p.size, U32_MAX)
    return CENTRAL.pack(
        CENTRAL_SIGNATURE, version, _UNIX, version, 0, _flags(p.entry.name), zipfile.ZIP_STORED,
        dtime, date, p.crc32, size32, size32, len(name), len(extra), 0, 0, 0,
        (stat.S_IFREG | (p.entry.mode & 0o7777)) << 16, min(offset, U32_MAX),
    ) + name + extra


def end_records(count: int, cd_offset: int, cd_size: int) -> bytes:
    """The end of central directory record, after the zip64 one and its locator when a value needs them."""
    out = b""
    if count >= U16_MAX or cd_offset >= U32_MAX or cd_size >= U32_MAX:
        eocd64_offset = cd_offset + cd_size
        out += EOCD64.pack(
            EOCD64_SIGNATURE, EOCD64.size - 12, _UNIX << 8 | _VERSION_ZIP64, _VERSION_ZIP64,
            0, 0, count, count, cd_size, cd_offset,
        )
        out += LOCATOR.pack(LOCATOR_SIGNATURE, 0, eocd64_offset, 1)
    return out + EOCD.pack(
        EOCD_SIGNATURE, 0, 0, min(count, U16_MAX), min(count, U16_MAX),
        min(cd_size, U32_MAX), min(cd_offset, U32_MAX), 0,
    )


def appended_info(entry: Entry, start: int, size: int, crc32: int, sha256: str) -> EntryInfo:
    """The EntryInfo of an entry written by the append (stored: its size is its compressed size)."""
    return EntryInfo(entry.name, start, size, size, "stored", crc32, sha256, appended=True)


def base_entries(base: Path, records: Sequence[CentralRecord], limit: int) -> list[EntryInfo]:
    """The base's entries as EntryInfo: data offsets from their local headers, digests of the contents."""
    infos = []
    view = memoryview(bytearray(_READ))
    with open(base, "rb", buffering=0) as f:
        for record in records:
            start = data_offset(f, base, record, limit)
            if record.method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                # cosmopolitan's zip store reads only these two; such an entry is unreadable at run time
                raise ZipStoreError(f"{base}: entry {record.name!r} uses compression method {record.method}; "
                                    "only stored and deflate entries can be read from /zip")
            f.seek(start)
            infos.append(EntryInfo(
                record.name, start, record.size, record.compressed_size, method_name(record.method),
                record.crc32, _content_sha256(f, base, record, view), appended=False,
            ))
    return infos


def _content_sha256(f: FileIO, base: Path, record: CentralRecord, view: memoryview) -> str:
    """The SHA-256 of ``record``'s contents (inflated where deflated), read from ``f`` at its data."""
    inflate = zlib.decompressobj(-zlib.MAX_WBITS) if record.method == zipfile.ZIP_DEFLATED else None
    digest = hashlib.sha256()
    left = record.compressed_size
    try:
        while left:
            got = f.readinto(view[:min(left, len(view))])
            if not got:
                raise ZipStoreError(f"{base}: corrupt zip store: entry {record.name!r} is cut short")
            digest.update(inflate.decompress(view[:got]) if inflate else view[:got])
            left -= got
        if inflate:
            digest.update(inflate.flush())
    except zlib.error as exc:
        raise ZipStoreError(f"{base}: corrupt zip store: entry {record.name!r} does not inflate ({exc})") from exc
    return digest.hexdigest()


__all__ = [
    "DEFAULT_ALIGN", "AppendResult", "Entry", "EntryInfo", "Pending", "ZipAppendError", "ZipStoreError",
    "appended_info", "base_entries", "central_record", "check_align", "check_entries", "check_name", "data_start",
    "dos_datetime", "end_records", "local_header",
]
