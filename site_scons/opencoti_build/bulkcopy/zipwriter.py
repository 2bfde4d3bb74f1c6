"""The zip-append writer (replaces llamafile's zipalign): a new file of the base executable, its entries stored and
aligned, one central directory (the format: opencoti_build.formats.zipappend), written beside the output and
renamed into place; each input's bytes copied once (copier).

The output's own SHA-256 is taken in file order from the bytes as they are written (copier.OutputDigest), so each
local header, CRC-32 included, must be final before its data. A blob's is. A file's is when ``known`` still vouches
for its SHA-256 and CRC-32 (the packager records them with the file's stat identity, so a repackage with the same
model knows them): a record that was settled (taken at least a timestamp tick after the file's last change,
opencoti_build.incremental.timestamps: no later write can then keep its stat) is trusted, so a settled model is read
once, for the output's digest alone; the bytes copied under any other are hashed again (CRC-32 and SHA-256, each on
its own thread) and held against the record: git's racily-clean rule. A file without such a record is read first
for its CRC-32 (its halves on two threads, combined: formats.crc32), then copied as a recorded one is, its own
SHA-256 taken beside the output's: the file is read twice, the output never. A record that was not settled and
proves wrong (a write within one timestamp tick kept the stat) has its entry written again from its header, the
output's digest taken again from there.

An input that changes while it is read is caught by its stat: size, mtime and ctime (ns), inode,
taken before and after the read on the open file, must agree. Any write, truncation or chmod moves
them; what is not caught is a write within the same kernel timestamp tick as the first stat (a few
ms, as for make and Ninja) or a change through a shared mapping whose mtime the kernel has not yet
updated. A file renamed over the input is not a change: the open file is read to its end, whole.
``on_digest`` hears each file read or written whole with its stat, SHA-256 and (an entry's) CRC-32 (the build
records them so that no one hashes a multi-GiB file again, see site_scons/opencoti_build/cache/file_digests.py).
"""
from __future__ import annotations

import hashlib
import os
import stat
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from io import FileIO
from pathlib import Path

from opencoti_build import tempfiles
from opencoti_build.bulkcopy import copier, replaced
from opencoti_build.files import identity
from opencoti_build.formats import zipappend
from opencoti_build.formats.zipappend import DEFAULT_ALIGN, AppendResult, Entry, EntryInfo, Pending, ZipAppendError
from opencoti_build.formats.zipstore import ZipStore, read_zip_store
from opencoti_build.incremental.timestamps import settled

Digest = Callable[..., None]  # (path, stat, sha256, crc32=None, settled=False): a file read or written whole
# a lookup of the (sha256, crc32, settled) recorded for a file as it is now (None: none is); settled: its stat alone
# vouches for its bytes
DigestLookup = Callable[[Path, os.stat_result], "tuple[str, int, bool] | None"]


@dataclass(frozen=True)
class _Layout:
    """How every new entry is laid out: its data's alignment, its DOS date and time."""

    align: int
    date: int
    dtime: int


def append(base: Path | str, entries: Sequence[Entry], output: Path | str, *, align: int = DEFAULT_ALIGN,
           epoch: int = 0, mode: int = 0o755, before_replace: Callable[[], None] | None = None,
           on_digest: Digest | None = None, known: DigestLookup | None = None) -> AppendResult:
    """Write ``output`` = ``base`` + ``entries`` (stored, data aligned to ``align``) + one central directory.

    ``epoch`` (SOURCE_DATE_EPOCH) timestamps every new entry. The output is written beside
    itself under a temporary name (opencoti_build.tempfiles), fsynced, and renamed into place, so a
    failure while writing leaves any previous ``output`` untouched; ``before_replace`` runs just before
    the rename (the packager removes the old manifest there, so no manifest ever describes other bytes).
    The output's SHA-256 may finish after the rename: if it fails then, or the output is written to
    meanwhile, the new output stays in place, whole and on the disk, and the error means its digest
    is unknown (the packager writes no manifest for it). ``on_digest(path, stat, sha256, crc32=None)`` is
    called for the base and each file entry (with its CRC-32, and whether its stat was settled when read) as read,
    then for the output as written. ``known(path, stat)`` gives a file entry's (sha256, crc32, settled) when they
    are recorded for it as it is now.
    Raises ZipAppendError (or ZipStoreError for a bad base).
    """
    base, output = Path(base), Path(output)
    store, base_infos = _checked(base, entries, align)
    layout = _Layout(align, *zipappend.dos_datetime(epoch))
    report_digest = on_digest or _report_nothing
    fd, tmp = _create(output)
    sink = copier.Sink(fd, tmp)
    try:
        with copier.Workers() as workers:
            workers.writeback.submit(replaced.drop_cached, output)  # beside the copy: it frees frames faster than that uses them
            base_sha, digest = _write_base(base, store, sink, workers, report_digest)
            written_entries = _write_zip(sink, store, entries, workers, layout, known)
            os.fchmod(fd, mode)
            workers.durable(sink)  # every byte on the disk before the name points at it
            written = os.fstat(fd)
            if before_replace is not None:
                before_replace()
            workers.replace(tmp, output)
            sha256 = digest.hexdigest()  # the central directory's update may outlast the fsync
            infos = base_infos + [e.info(report_digest) for e in written_entries]
            renamed = os.fstat(fd)  # the rename moves the ctime; anything else means another writer
        os.close(fd)
        fd = -1
        if (renamed.st_size, renamed.st_mtime_ns) != (written.st_size, written.st_mtime_ns):
            # the digest is of the bytes written here, not of the other writer's: it vouches for nothing
            raise ZipAppendError(f"{output} was written to while being packaged; package again")
    except BaseException as exc:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ZipAppendError(f"cannot write {output}: {exc.strerror or exc}") from exc
        raise
    report_digest(output, renamed, sha256)
    return AppendResult(output, sink.pos, sha256, base_sha.hexdigest(), align, tuple(infos))


def _report_nothing(path: Path, st: os.stat_result, sha256: str, crc32: int | None = None,
                  settled: bool = False) -> None:
    return None


def _checked(base: Path, entries: Sequence[Entry], align: int) -> tuple[ZipStore, list[EntryInfo]]:
    """The base's zip store and its entries, every input checked before anything is written."""
    zipappend.check_align(align)
    store = read_zip_store(base)
    zipappend.check_entries(entries, {r.name for r in store.records}, base)
    for entry in entries:
        _check_input(entry)
    return store, zipappend.base_entries(base, store.records, store.cd_offset)


def _check_input(entry: Entry) -> None:
    """Refuse an entry whose file cannot be read or is not a regular file, before anything is written."""
    if entry.path is None:
        return
    try:
        st = os.stat(entry.path)
    except OSError as exc:
        raise ZipAppendError(f"cannot read {entry.path}: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise ZipAppendError(f"{entry.path} is not a regular file; name a file to embed")


def _create(output: Path) -> tuple[int, Path]:
    """The output's temporary file beside it (its directories made)."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        return tempfiles.create(output)
    except OSError as exc:
        raise ZipAppendError(f"cannot write {output}: {exc.strerror or exc}") from exc


def _write_base(base: Path, store: ZipStore, sink: copier.Sink, workers: copier.Workers,
                report_digest: Digest) -> tuple[hashlib._Hash, copier.OutputDigest]:
    """Copy the base up to the end of its zip store (its digest reported when that is all of it): its SHA-256, and the output's
    digest, which begins with it."""
    base_sha = hashlib.sha256()
    base_read = _read_whole(base, store.file_size, sink, workers, base_sha.update)
    if store.file_size == base_read.st_size:  # read whole
        report_digest(base, base_read, base_sha.hexdigest())
    digest = sink.digest = copier.OutputDigest(base_sha.copy(), workers.output)  # the output begins with the base
    return base_sha, digest


def _write_zip(sink: copier.Sink, store: ZipStore, entries: Sequence[Entry], workers: copier.Workers,
               layout: _Layout, known: DigestLookup | None) -> list[_WrittenEntry]:
    """The new entries, then the central directory (the base's records, then theirs) and the end records."""
    records = [r.raw for r in store.records]
    written_entries = []
    for entry in entries:
        written_entry, record = _write_entry(sink, entry, workers, layout, known)
        written_entries.append(written_entry)
        records.append(record)
    cd_offset = sink.pos
    for record in records:
        sink.write(record)
    sink.write(zipappend.end_records(len(records), cd_offset, sink.pos - cd_offset))
    return written_entries


def _open_input(path: Path) -> tuple[FileIO, os.stat_result]:
    try:
        f = open(path, "rb", buffering=0)
    except OSError as exc:
        raise ZipAppendError(f"cannot read {path}: {exc.strerror}") from exc
    return f, os.fstat(f.fileno())


def _unchanged(path: Path, f: FileIO, before: os.stat_result) -> None:
    if identity(os.fstat(f.fileno())) != identity(before):
        raise ZipAppendError(f"{path} changed while being packaged; package again")


def _read_whole(path: Path, size: int, sink: copier.Sink, workers: copier.Workers,
                update: Callable[[bytes | memoryview], object]) -> os.stat_result:
    """Copy ``path`` (``size`` bytes, or all of it when negative) once; its stat. A change while it is read is refused."""
    f, before = _open_input(path)
    with f:
        copier.copy(path, f, before.st_size if size < 0 else size, sink, workers, [(workers.digest, update)])
        _unchanged(path, f, before)
    return before


@dataclass
class _WrittenEntry:
    """An entry in the output."""

    entry: Entry
    start: int
    size: int
    crc32: int
    sha256: str
    read: os.stat_result | None = None  # a file entry's stat as it was read
    settled: bool = False  # ... taken a tick or more after the file's last change (timestamps.settled)

    def info(self, report_digest: Digest) -> EntryInfo:
        """The entry's info; a file entry's digests go to ``report_digest``."""
        if self.entry.path is not None and self.read is not None:
            report_digest(self.entry.path, self.read, self.sha256, crc32=self.crc32, settled=self.settled)
        return zipappend.appended_info(self.entry, self.start, self.size, self.crc32, self.sha256)


def _write_entry(sink: copier.Sink, entry: Entry, workers: copier.Workers, layout: _Layout,
                 known: DigestLookup | None) -> tuple[_WrittenEntry, bytes]:
    """Padding, local header, data: the entry written and its central record."""
    if entry.data is not None:
        size, crc32 = len(entry.data), zlib.crc32(entry.data)
        offset, start, _ = _header(sink, Pending(entry, size, crc32), layout)
        sink.write(entry.data)
        written = _WrittenEntry(entry, start, size, crc32, hashlib.sha256(entry.data).hexdigest())
        return written, zipappend.central_record(Pending(entry, size, crc32), offset, layout.date, layout.dtime)
    assert entry.path is not None
    looked_at = time.time_ns()
    f, before = _open_input(entry.path)
    with f:
        size = before.st_size  # what the header's size fields (and zip64 extra) need
        # (sha256, crc32, settled): a settled record is trusted, the bytes copied under another are hashed again
        recorded = known(entry.path, before) if known is not None else None
        while True:
            crc, sha = copier.Crc(), hashlib.sha256()
            updates: list[copier.Update]
            if recorded is None:
                # the header's CRC-32 must be final before the data: the file is read for it first (ISA-L's, on
                # both cores: a fraction of a SHA-256's time); its SHA-256 is taken as it is copied, beside the output's
                crc32, updates = copier.crc32(entry.path, f, size, workers), [(workers.entry, sha.update)]
            else:
                sha256, crc32, trusted = recorded
                updates = [] if trusted else [(workers.digest, crc.update), (workers.entry, sha.update)]
            offset, start, checkpoint = _header(sink, Pending(entry, size, crc32), layout)
            copier.copy(entry.path, f, size, sink, workers, updates)
            if recorded is None:
                sha256 = sha.hexdigest()
                break
            if trusted or (crc.value, sha.hexdigest()) == (crc32, sha256):
                break
            # recorded for other bytes (a write within one timestamp tick kept the stat): written again, the
            # CRC-32 read from the file
            sink.rewind(offset, checkpoint, workers)
            recorded = None
        _unchanged(entry.path, f, before)
    written = _WrittenEntry(entry, start, size, crc32, sha256, before, settled(before, looked_at))
    return written, zipappend.central_record(Pending(entry, size, crc32), offset, layout.date, layout.dtime)


def _header(sink: copier.Sink, pending: Pending, layout: _Layout) -> tuple[int, int, Future]:
    """Pad so the data lands on the alignment, write the local header: (header offset, data offset, the output's
    digest up to the header)."""
    header = zipappend.local_header(pending, layout.date, layout.dtime)
    start = zipappend.data_start(sink.pos, len(header), layout.align)
    sink.write(bytes(start - len(header) - sink.pos))
    offset = sink.pos
    assert sink.digest is not None
    checkpoint = sink.digest.checkpoint()
    sink.write(header)
    return offset, start, checkpoint
