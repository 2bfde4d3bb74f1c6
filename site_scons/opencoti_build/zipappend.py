"""Zip-append writer (replaces llamafile's zipalign): base executable + aligned STORED entries.

The output is a new file: the base's bytes unchanged (its zip store's local headers stay where
they are), then each new entry with its DATA page-aligned (llamafile mmaps weights and DSOs from
the executable, so they must be stored and aligned), then one central directory listing the base's
entries and the new ones. Offsets are absolute, as cosmopolitan's zip store expects. Zip64
structures appear only where a value does not fit, so ordinary artifacts stay readable by
readers without zip64 support.

Memory use is constant: entries stream through a fixed buffer, holes in sparse inputs are
skipped with SEEK_DATA/SEEK_HOLE (and stay holes in the output). Each input is read twice:
once for its CRC-32 (the local header, which precedes the data, needs it) and once while it
is copied, when its CRC is checked again, so an input that changes mid-write is caught.
"""
from __future__ import annotations

import errno
import hashlib
import os
import stat
import struct
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from opencoti_build import tempfiles
from opencoti_build.errors import UserError
from opencoti_build.zipstore import (
    FLAG_UTF8, U16_MAX, U32_MAX, ZIP64_EXTRA_ID, CentralRecord, ZipStoreError, data_offset, method_name,
    read_zip_store,
)

DEFAULT_ALIGN = 65536
_CHUNK = 4 << 20
_ZEROS = bytes(_CHUNK)
_LOCAL_HEADER = struct.Struct(zipfile.structFileHeader)
_CENTRAL = struct.Struct(zipfile.structCentralDir)
_EOCD = struct.Struct(zipfile.structEndArchive)
_EOCD64 = struct.Struct(zipfile.structEndArchive64)
_LOCATOR = struct.Struct(zipfile.structEndArchive64Locator)
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
    """What ``append`` wrote: the output's digest and size, the base's digest, every entry in order."""

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


def _extents(fd: int, size: int) -> Iterator[tuple[int, int, bool]]:
    """(offset, length, is_data) runs covering [0, size); holes come back with is_data False."""
    pos = 0
    while pos < size:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # no SEEK_DATA on this filesystem: all of it is data
                yield pos, size - pos, True
                return
            data = size  # ENXIO: nothing but hole up to the end
        data = min(data, size)
        if data > pos:
            yield pos, data - pos, False
        if data >= size:
            return
        end = min(os.lseek(fd, data, os.SEEK_HOLE), size)
        yield data, end - data, True
        pos = end


def _stream(path: Path, size: int, buf: bytearray, on_data: Callable[[memoryview], None],
            on_hole: Callable[[int], None]) -> None:
    """Feed ``path``'s first ``size`` bytes to ``on_data`` in chunks, holes to ``on_hole`` as lengths."""
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        for offset, length, is_data in _extents(f.fileno(), size):
            if not is_data:
                on_hole(length)
                continue
            f.seek(offset)
            while length:
                got = f.readinto(view[:min(length, len(view))])
                if not got:
                    raise ZipAppendError(f"{path} shrank while being packaged; package again")
                on_data(view[:got])
                length -= got


def _hash_zeros(length: int, *update: Callable[[bytes], object]) -> None:
    while length:
        n = min(length, _CHUNK)
        for fn in update:
            fn(_ZEROS[:n])
        length -= n


class _Crc:
    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes | memoryview) -> None:
        self.value = zlib.crc32(data, self.value)


class _Sink:
    """The output file: counts and hashes every byte, turns zero runs into holes by seeking."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pos = 0
        self.sha = hashlib.sha256()

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        self.sha.update(view)
        while view:
            view = view[os.write(self.fd, view):]
        self.pos += len(data)

    def hole(self, length: int) -> None:
        _hash_zeros(length, self.sha.update)
        self.pos = os.lseek(self.fd, length, os.SEEK_CUR)


@dataclass
class _Pending:
    entry: Entry
    size: int
    crc32: int


def _measure(entry: Entry, buf: bytearray) -> _Pending:
    """Size and CRC-32 of an entry (first pass: the local header needs them before the data)."""
    if entry.data is not None:
        return _Pending(entry, len(entry.data), zlib.crc32(entry.data))
    assert entry.path is not None
    try:
        st = os.stat(entry.path)
    except OSError as exc:
        raise ZipAppendError(f"cannot read {entry.path}: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ZipAppendError(f"{entry.path} is not a regular file; name a file to embed")
    crc = _Crc()
    _stream(entry.path, st.st_size, buf, crc.update, lambda n: _hash_zeros(n, crc.update))
    return _Pending(entry, st.st_size, crc.value)


def _flags(name: str) -> int:
    return 0 if name.isascii() else FLAG_UTF8


def _local_header(p: _Pending, date: int, dtime: int) -> bytes:
    name = p.entry.name.encode("utf-8")
    wide = p.size >= U32_MAX
    # a local header's zip64 extra must carry both sizes whenever either is saturated
    extra = struct.pack("<HHQQ", ZIP64_EXTRA_ID, 16, p.size, p.size) if wide else b""
    size32 = U32_MAX if wide else p.size
    return _LOCAL_HEADER.pack(
        zipfile.stringFileHeader, _VERSION_ZIP64 if wide else _VERSION, 0, _flags(p.entry.name),
        zipfile.ZIP_STORED, dtime, date, p.crc32, size32, size32, len(name), len(extra),
    ) + name + extra


def _central_record(p: _Pending, offset: int, date: int, dtime: int) -> bytes:
    name = p.entry.name.encode("utf-8")
    wide = [v for v in (p.size, p.size, offset) if v >= U32_MAX]
    extra = struct.pack(f"<HH{len(wide)}Q", ZIP64_EXTRA_ID, 8 * len(wide), *wide) if wide else b""
    version = _VERSION_ZIP64 if wide else _VERSION
    size32 = min(p.size, U32_MAX)
    return _CENTRAL.pack(
        zipfile.stringCentralDir, version, _UNIX, version, 0, _flags(p.entry.name), zipfile.ZIP_STORED,
        dtime, date, p.crc32, size32, size32, len(name), len(extra), 0, 0, 0,
        (stat.S_IFREG | (p.entry.mode & 0o7777)) << 16, min(offset, U32_MAX),
    ) + name + extra


def _end_records(count: int, cd_offset: int, cd_size: int) -> bytes:
    out = b""
    if count >= U16_MAX or cd_offset >= U32_MAX or cd_size >= U32_MAX:
        eocd64_offset = cd_offset + cd_size
        out += _EOCD64.pack(
            zipfile.stringEndArchive64, _EOCD64.size - 12, _UNIX << 8 | _VERSION_ZIP64, _VERSION_ZIP64,
            0, 0, count, count, cd_size, cd_offset,
        )
        out += _LOCATOR.pack(zipfile.stringEndArchive64Locator, 0, eocd64_offset, 1)
    return out + _EOCD.pack(
        zipfile.stringEndArchive, 0, 0, min(count, U16_MAX), min(count, U16_MAX),
        min(cd_size, U32_MAX), min(cd_offset, U32_MAX), 0,
    )


def _check_entries(entries: Sequence[Entry], base_names: set[str], base: Path) -> None:
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


def _base_entries(base: Path, records: Sequence[CentralRecord], limit: int, buf: bytearray) -> list[EntryInfo]:
    """The base's entries as EntryInfo: data offsets from their local headers, digests of the contents."""
    infos = []
    view = memoryview(buf)
    with open(base, "rb", buffering=0) as f:
        for record in records:
            start = data_offset(f, base, record, limit)
            if record.method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                # cosmopolitan's zip store reads only these two; such an entry is unreadable at run time
                raise ZipStoreError(f"{base}: entry {record.name!r} uses compression method {record.method}; "
                                    "only stored and deflate entries can be read from /zip")
            inflate = zlib.decompressobj(-zlib.MAX_WBITS) if record.method == zipfile.ZIP_DEFLATED else None
            digest = hashlib.sha256()
            f.seek(start)
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
            infos.append(EntryInfo(
                record.name, start, record.size, record.compressed_size, method_name(record.method),
                record.crc32, digest.hexdigest(), appended=False,
            ))
    return infos


def append(base: Path | str, entries: Sequence[Entry], output: Path | str, *, align: int = DEFAULT_ALIGN,
           epoch: int = 0, mode: int = 0o755, before_replace: Callable[[], None] | None = None) -> AppendResult:
    """Write ``output`` = ``base`` + ``entries`` (stored, data aligned to ``align``) + one central directory.

    ``epoch`` (SOURCE_DATE_EPOCH) timestamps every new entry. The output is written beside
    itself under a temporary name (opencoti_build.tempfiles) and renamed into place, so a failure
    leaves any previous ``output`` untouched; ``before_replace`` runs just before the rename (the
    packager removes the old manifest there, so no manifest ever describes other bytes).
    Raises ZipAppendError (or ZipStoreError for a bad base).
    """
    base, output = Path(base), Path(output)
    if align < 1 or align & (align - 1) or align > 1 << 30:
        raise ZipAppendError(f"ALIGN={align} is not a power of two between 1 and 2**30; use e.g. 65536")
    store = read_zip_store(base)
    _check_entries(entries, {r.name for r in store.records}, base)
    buf = bytearray(_CHUNK)
    pending = [_measure(e, buf) for e in entries]
    base_infos = _base_entries(base, store.records, store.cd_offset, buf)
    date, dtime = dos_datetime(epoch)

    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfiles.create(output)
    except OSError as exc:
        raise ZipAppendError(f"cannot write {output}: {exc.strerror or exc}") from exc
    try:
        sink = _Sink(fd)
        base_sha = hashlib.sha256()

        def base_data(view: memoryview) -> None:
            base_sha.update(view)
            sink.write(view)

        def base_hole(length: int) -> None:
            _hash_zeros(length, base_sha.update)
            sink.hole(length)

        _stream(base, store.file_size, buf, base_data, base_hole)
        records = [r.raw for r in store.records]
        infos = list(base_infos)
        for p in pending:
            header = _local_header(p, date, dtime)
            start = -(-(sink.pos + len(header)) // align) * align  # data offset: next multiple of align
            sink.write(bytes(start - len(header) - sink.pos))
            offset = sink.pos
            sink.write(header)
            infos.append(_write_data(sink, p, buf, offset=start))
            records.append(_central_record(p, offset, date, dtime))
        cd_offset = sink.pos
        for record in records:
            sink.write(record)
        sink.write(_end_records(len(records), cd_offset, sink.pos - cd_offset))
        os.fchmod(fd, mode)
        os.fsync(fd)
        if before_replace is not None:
            before_replace()
        os.replace(tmp, output)
        os.close(fd)
        fd = -1
    except BaseException as exc:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ZipAppendError(f"cannot write {output}: {exc.strerror or exc}") from exc
        raise
    return AppendResult(output, sink.pos, sink.sha.hexdigest(), base_sha.hexdigest(), align, tuple(infos))


def _write_data(sink: _Sink, p: _Pending, buf: bytearray, *, offset: int) -> EntryInfo:
    """Copy one entry's data (second pass), hashing it and re-checking its CRC."""
    digest = hashlib.sha256()
    crc = _Crc()
    if p.entry.data is not None:
        digest.update(p.entry.data)
        crc.update(p.entry.data)
        sink.write(p.entry.data)
    else:
        assert p.entry.path is not None

        def data(view: memoryview) -> None:
            digest.update(view)
            crc.update(view)
            sink.write(view)

        def hole(length: int) -> None:
            _hash_zeros(length, digest.update, crc.update)
            sink.hole(length)

        _stream(p.entry.path, p.size, buf, data, hole)
    if crc.value != p.crc32:
        raise ZipAppendError(f"{p.entry.path} changed while being packaged; package again")
    return EntryInfo(p.entry.name, offset, p.size, p.size, "stored", p.crc32, digest.hexdigest(), appended=True)


__all__ = [
    "DEFAULT_ALIGN", "AppendResult", "Entry", "EntryInfo", "ZipAppendError", "ZipStoreError", "append",
    "check_name", "dos_datetime",
]
