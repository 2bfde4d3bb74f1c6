"""Zip-append writer (replaces llamafile's zipalign): base executable + aligned STORED entries.

The output is a new file: the base's bytes unchanged (its zip store's local headers stay where
they are), then each new entry with its DATA page-aligned (llamafile mmaps weights and DSOs from
the executable, so they must be stored and aligned), then one central directory listing the base's
entries and the new ones. Offsets are absolute, as cosmopolitan's zip store expects. Zip64
structures appear only where a value does not fit, so ordinary artifacts stay readable by
readers without zip64 support.

Each input is copied once. Its bytes go to the output with ``copy_file_range`` where the kernel offers it (a
reflink-capable filesystem then copies no data; elsewhere the kernel copies several times faster than read and
write through Python's buffers) and are read once from the page cache the copy filled, into a few fixed buffers,
for the digests, each on a thread of its own (zlib and hashlib release the GIL). Memory use is constant; holes
in sparse inputs are skipped with SEEK_DATA/SEEK_HOLE and stay holes in the output.

The output is written back to the disk from the first chunk on (an fdatasync kept in flight), and the page cache
of what is on the disk is dropped behind it: nothing reads those pages again, and the frames the copy takes next
are the ones just freed, reused at once, where fresh ones cost the kernel (and a VM's host) several times more.
On this VM a 3 GiB copy then costs 1.1-1.5 s; kept in the page cache 2.5-8 s, written with O_DIRECT (one write in
flight: ext4 serialises O_DIRECT writes that allocate blocks) 2.1-2.4 s.

The output's own SHA-256 is taken on a thread of its own, in file order, from the bytes as they are written;
nothing is read back from the output (that would verify nothing about the disk: ``verify`` re-reads on demand).
So each local header, CRC-32 included, must be final before its data. A blob's is. A file's is when ``known``
still vouches for its SHA-256 and CRC-32 (the packager records them with the file's stat identity, so a
repackage with the same model knows them): a record that was settled (taken at least a timestamp tick after the
file's last change, opencoti_build.incremental.timestamps: no later write can then keep its stat) is trusted, so
a settled model is read once, for the output's digest alone; the bytes copied under any other are hashed again
(CRC-32 and SHA-256, each on its own thread) and held against the record: git's racily-clean rule. A file
without such a record is read first for its CRC-32 (its halves on two threads, combined: formats.crc32), then
copied as a recorded one is, its own SHA-256 taken beside the output's: the file is read twice, the output
never. A record that was not settled and proves wrong (a write within one timestamp tick kept the stat) has its
entry written again from its header, the output's digest taken again from there.

An input that changes while it is read is caught by its stat: size, mtime and ctime (ns), inode,
taken before and after the read on the open file, must agree. Any write, truncation or chmod moves
them; what is not caught is a write within the same kernel timestamp tick as the first stat (a few
ms, as for make and Ninja) or a change through a shared mapping whose mtime the kernel has not yet
updated. A file renamed over the input is not a change: the open file is read to its end, whole.
``on_digest`` hears each file read or written whole with its stat, SHA-256 and (an entry's) CRC-32 (the build
records them so that no one hashes a multi-GiB file again, see site_scons/opencoti_build/cache/file_digests.py).
"""
from __future__ import annotations

import errno
import hashlib
import os
import stat
import struct
import subprocess
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from io import FileIO
from pathlib import Path, PurePosixPath

from opencoti_build.errors import UserError
from opencoti_build.files import identity
from opencoti_build.formats.crc32 import combine as crc32_combine
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
    read_zip_store,
)
from opencoti_build.incremental import tempfiles
from opencoti_build.incremental.timestamps import settled

DEFAULT_ALIGN = 65536
_CHUNK = 4 << 20
_ZEROS = bytes(_CHUNK)
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


def _extents(fd: int, size: int, start: int = 0) -> Iterator[tuple[int, int, bool]]:
    """(offset, length, is_data) runs covering [start, size); holes come back with is_data False."""
    pos = start
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


_PAGE = os.sysconf("SC_PAGE_SIZE")
_BUFFERS = 3  # one filling, one or two being hashed: reading rarely waits for the hash thread


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


class _Workers:
    """The helper threads: one for an input's CRC-32 (and the base's SHA-256), one for a new file's SHA-256 as it is
    copied (beside the output's: a core each; the two read a new file's halves for its CRC-32 before that), one
    that takes the output's SHA-256 in file order as it is written, and one that writes the output back to disk
    (fsync) while the copy and the digests go on, dropping the page cache behind it, then lets go of the output it
    replaced (:func:`_close_replaced`).

    A thread of one worker per digest keeps its updates in order. On leaving (also on an error),
    queued work is cancelled and running work awaited, so no thread outlives the files it uses.
    """

    def __init__(self) -> None:
        self.digest = ThreadPoolExecutor(1, thread_name_prefix="zipappend-digest")
        self.output = ThreadPoolExecutor(1, thread_name_prefix="zipappend-output")
        self.entry = ThreadPoolExecutor(1, thread_name_prefix="zipappend-entry")
        self.writeback = ThreadPoolExecutor(1, thread_name_prefix="zipappend-writeback")
        self.flush: Future | None = None
        self.freeing: list[tuple[Future, int]] = []  # replaced outputs' descriptors, closed on the writeback thread
        self.buffers = [memoryview(bytearray(_CHUNK)) for _ in range(_BUFFERS)]
        self.kernel_copy = True  # until copy_file_range says it cannot copy between these files

    def write_back(self, sink: _Sink) -> None:
        """Have the disk write what is in the page cache so far, then drop what it wrote (:meth:`_Sink.drop_clean`),
        unless it is still at the last lot: it then works from the first chunk on, beside the copy and the hashing,
        instead of taking GiBs of dirty pages at the end (the kernel starts on its own only past its dirty
        threshold)."""
        if self.flush is None or self.flush.done():
            self.settle()
            self.flush = self.writeback.submit(_write_back, sink, sink.pos)

    def durable(self, sink: _Sink) -> None:
        """fsync the output once the writeback in flight is done."""
        self.settle()
        os.fsync(sink.fd)
        sink.drop_clean(None)

    def replace(self, tmp: Path, output: Path) -> None:
        """Rename ``tmp`` over ``output``; the replaced file's blocks are freed off the critical path.

        Freeing GiBs is no instant: with the ``discard`` mount option the kernel trims them first (0.4 s for
        3 GiB here, waiting on the disk). An open descriptor of the old file keeps its inode alive through the
        rename, so the freeing happens at its close: on the writeback thread, and for a big file in a process of
        its own (:func:`_close_replaced`)."""
        try:
            old = os.open(output, os.O_PATH)
        except OSError:  # no output yet (or none we may see): the rename frees nothing
            old = -1
        try:
            os.replace(tmp, output)
        finally:
            if old >= 0:
                self.freeing.append((self.writeback.submit(_close_replaced, old), old))

    def settle(self) -> None:
        """Wait for the writeback in flight."""
        if self.flush is not None:
            self.flush.result()  # an I/O error is reported to one fdatasync/fsync only: raise it here

    def __enter__(self) -> _Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for pool in (self.digest, self.output, self.entry, self.writeback):
            pool.shutdown(wait=True, cancel_futures=True)
        for closing, fd in self.freeing:
            if closing.cancelled():  # the writeback thread never got to it: close it here, or it leaks
                os.close(fd)


Update = tuple[ThreadPoolExecutor, Callable[[bytes | memoryview], object]]  # a digest and the thread it runs on


def _write_back(sink: _Sink, upto: int) -> None:
    os.fdatasync(sink.fd)
    sink.drop_clean(upto)


def _copy(path: Path, f: FileIO, size: int, sink: _Sink, workers: _Workers,
          updates: Sequence[Update]) -> None:
    """Copy ``f``'s first ``size`` bytes to ``sink`` once; each update sees them all, in order, on its own thread.

    They go with copy_file_range while the kernel can (a reflink-capable filesystem
    copies no data; on others it is several times faster than read and write through Python's buffers here), then
    read once, from the page cache the copy filled, for the digests (the output's among them)."""
    busy: list[list[Future]] = [[] for _ in workers.buffers]
    zeros: list[Future] = []
    turn = 0
    fd = f.fileno()
    for offset, length, is_data in _extents(fd, size):
        if not is_data:
            zeros += [thread.submit(_hash_zeros, length, update) for thread, update in updates]
            sink.hole(length)
            continue
        while length:
            view = workers.buffers[turn]
            for last in busy[turn]:
                last.result()  # this buffer's last chunk is hashed: it may be filled again
            wanted = min(length, _CHUNK)
            copied = sink.copy_range(fd, offset, wanted, workers) if workers.kernel_copy else 0
            got = os.preadv(fd, [view[:copied or wanted]], offset)
            if not got or got < copied:
                raise ZipAppendError(f"{path} shrank while being packaged; package again")
            chunk = view[:got]
            busy[turn] = [thread.submit(update, chunk) for thread, update in updates]
            busy[turn] += [f for f in (sink.hashed(chunk) if copied else sink.write(chunk),) if f is not None]
            workers.write_back(sink)
            offset += got
            length -= got
            turn = (turn + 1) % len(workers.buffers)
    for future in [*zeros, *(f for futures in busy for f in futures)]:
        future.result()  # every digest has seen every byte, and none reads the buffers any more


class _Sink:
    """The output file: where writing has got to, and its digest (fed in order); zero runs become holes."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path
        self.pos = 0
        self.digest: _OutputDigest | None = None  # from the end of the base on (the base's own digest is its start)
        self.dropped = 0  # the page cache before this is dropped (on the writeback thread)

    def drop_clean(self, upto: int | None) -> None:
        """Drop the output's page cache before ``upto`` (None: to its end), on the disk by now: nothing reads it
        again. Advice: what it drops is read from the disk if ever needed, and a filesystem may take none. The
        kernel drops only the pages wholly inside a range, so each range starts at the page the last one ended in."""
        start = self.dropped - self.dropped % _PAGE
        if upto is not None and upto <= start:
            return
        try:  # a length of 0: to the end of the file, its last partial page included
            os.posix_fadvise(self.fd, start, 0 if upto is None else upto - start, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
        self.dropped = self.pos if upto is None else max(self.dropped, upto)

    def write(self, data: bytes | memoryview) -> Future | None:
        """Write ``data``; the future of its digest update (``data`` must stay as it is until that is done)."""
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        self.pos += len(data)
        return self.hashed(data)

    def hashed(self, data: bytes | memoryview) -> Future | None:
        """Bytes just written (by :meth:`copy_range`) go into the output's digest."""
        return None if self.digest is None else self.digest.written(data)

    def copy_range(self, src: int, offset: int, length: int, workers: _Workers) -> int:
        """Copy ``length`` bytes of ``src`` from ``offset`` in the kernel; 0 (and none copied from now on) where
        it cannot, or when ``src`` has no bytes there (the caller's read then says it shrank)."""
        done = 0
        while done < length:
            try:
                n = os.copy_file_range(src, self.fd, length - done, offset + done)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF):
                    raise
                n = 0
                if done == 0:
                    workers.kernel_copy = False
            if not n:
                break
            done += n
        self.pos += done
        return done

    def hole(self, length: int) -> None:
        self.pos = os.lseek(self.fd, length, os.SEEK_CUR)
        if self.digest is not None:
            self.digest.zeros(length)

    def rewind(self, offset: int, checkpoint: Future, workers: _Workers) -> None:
        """Go back to ``offset`` (a header whose entry is written again): what follows is cut off (the copy seeks
        over holes, so bytes left there would stay), and the output's digest goes on from ``checkpoint``, its state
        there."""
        assert self.digest is not None
        workers.settle()  # no drop of the page cache runs on beside the cut
        self.digest.restore(checkpoint)
        os.ftruncate(self.fd, offset)
        self.pos = os.lseek(self.fd, offset, os.SEEK_SET)
        self.dropped = min(self.dropped, offset)


class _OutputDigest:
    """The output's SHA-256, fed in file order on one thread from the bytes as they are written."""

    def __init__(self, sha: hashlib._Hash, thread: ThreadPoolExecutor) -> None:
        self.sha, self.thread = sha, thread

    def written(self, data: bytes | memoryview) -> Future:
        return self.thread.submit(self.sha.update, data)

    def zeros(self, length: int) -> None:
        self.thread.submit(_hash_zeros, length, self.sha.update)

    def checkpoint(self) -> Future:
        """The digest so far (a copy, taken in order on the thread): where to go on from if an entry is written
        again."""
        return self.thread.submit(lambda: self.sha.copy())

    def restore(self, checkpoint: Future) -> None:
        """Go on from ``checkpoint``'s state, once the updates queued before it (of bytes now cut off) are done."""
        state = checkpoint.result()
        self.thread.submit(lambda: None).result()
        self.sha = state

    def hexdigest(self) -> str:
        self.thread.submit(lambda: None).result()
        return self.sha.hexdigest()


@dataclass
class _Pending:
    entry: Entry
    size: int
    crc32: int


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


def _flags(name: str) -> int:
    return 0 if name.isascii() else FLAG_UTF8


def _local_header(p: _Pending, date: int, dtime: int) -> bytes:
    name = p.entry.name.encode("utf-8")
    wide = p.size >= U32_MAX
    # a local header's zip64 extra must carry both sizes whenever either is saturated
    extra = struct.pack("<HHQQ", ZIP64_EXTRA_ID, 16, p.size, p.size) if wide else b""
    size32 = U32_MAX if wide else p.size
    return LOCAL_HEADER.pack(
        LOCAL_HEADER_SIGNATURE, _VERSION_ZIP64 if wide else _VERSION, 0, _flags(p.entry.name),
        zipfile.ZIP_STORED, dtime, date, p.crc32, size32, size32, len(name), len(extra),
    ) + name + extra


def _central_record(p: _Pending, offset: int, date: int, dtime: int) -> bytes:
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


def _end_records(count: int, cd_offset: int, cd_size: int) -> bytes:
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


Digest = Callable[..., None]  # (path, stat, sha256, crc32=None, settled=False): a file read or written whole
# (sha256, crc32, settled) recorded for a file as it is now; settled: its stat alone vouches for its bytes
Known = Callable[[Path, os.stat_result], "tuple[str, int, bool] | None"]


def append(base: Path | str, entries: Sequence[Entry], output: Path | str, *, align: int = DEFAULT_ALIGN,
           epoch: int = 0, mode: int = 0o755, before_replace: Callable[[], None] | None = None,
           on_digest: Digest | None = None, known: Known | None = None) -> AppendResult:
    """Write ``output`` = ``base`` + ``entries`` (stored, data aligned to ``align``) + one central directory.

    ``epoch`` (SOURCE_DATE_EPOCH) timestamps every new entry. The output is written beside
    itself under a temporary name (opencoti_build.incremental.tempfiles), fsynced, and renamed into place, so a
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
    if align < 1 or align & (align - 1) or align > 1 << 30:
        raise ZipAppendError(f"ALIGN={align} is not a power of two between 1 and 2**30; use e.g. 65536")
    store = read_zip_store(base)
    _check_entries(entries, {r.name for r in store.records}, base)
    for entry in entries:
        _check_input(entry)
    base_infos = _base_entries(base, store.records, store.cd_offset, bytearray(_CHUNK))
    date, dtime = dos_datetime(epoch)
    heard = on_digest or (lambda path, st, sha256, crc32=None, settled=False: None)

    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfiles.create(output)
    except OSError as exc:
        raise ZipAppendError(f"cannot write {output}: {exc.strerror or exc}") from exc
    sink = _Sink(fd, tmp)
    try:
        with _Workers() as workers:
            workers.writeback.submit(_drop_cached, output)  # beside the copy: it frees frames faster than that uses them
            base_sha = hashlib.sha256()
            base_read = _read_whole(base, store.file_size, sink, workers, base_sha.update)
            if store.file_size == base_read.st_size:  # read whole
                heard(base, base_read, base_sha.hexdigest())
            digest = sink.digest = _OutputDigest(base_sha.copy(), workers.output)  # the output begins with the base
            records = [r.raw for r in store.records]
            written_entries = []
            for entry in entries:
                written_entry, record = _write_entry(sink, entry, workers, align=align, date=date, dtime=dtime,
                                                     known=known)
                written_entries.append(written_entry)
                records.append(record)
            cd_offset = sink.pos
            for record in records:
                sink.write(record)
            sink.write(_end_records(len(records), cd_offset, sink.pos - cd_offset))
            os.fchmod(fd, mode)
            workers.durable(sink)  # every byte on the disk before the name points at it
            written = os.fstat(fd)
            if before_replace is not None:
                before_replace()
            workers.replace(tmp, output)
            sha256 = digest.hexdigest()  # the central directory's update may outlast the fsync
            infos = base_infos + [e.info(heard) for e in written_entries]
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
    heard(output, renamed, sha256)
    return AppendResult(output, sink.pos, sha256, base_sha.hexdigest(), align, tuple(infos))


def _drop_cached(output: Path) -> None:
    """Drop the page cache of the output about to be replaced (on the writeback thread, as the copy begins: it frees
    frames far faster than the copy takes them). Its pages are garbage once the new one is renamed
    over it, and the new output needs as many: frames just freed are reused at once, where fresh ones cost the
    kernel (and a VM's host) far more: on this VM a 3 GiB copy took 9-10 s of system time beside a cached old
    artifact, 2.5-3 s without it. Pages still mapped (a running llamafile) or dirty stay."""
    try:
        fd = os.open(output, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # no output yet, or one we may not read: nothing of ours to drop
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:  # advice: a filesystem that takes none loses nothing
        pass
    finally:
        os.close(fd)


# Below this a replaced output is freed sooner than a process to free it would start.
_FREE_APART_MIN = 64 << 20


def _close_replaced(fd: int) -> None:
    """Close the replaced output's descriptor. Where that would free a big file (no name or other descriptor left),
    the freeing is left to a process of its own that outlives this close: nothing waits for it (the last
    ``scons package`` step waited 0.4 s for 3 GiB, the kernel trimming the blocks). That process holds a copy of
    the descriptor and reads a pipe whose writing end is closed after ours, so its copy is the last; it exits at
    that EOF, also when this process is killed (the kernel closes its descriptors), so it cannot linger. Where it
    cannot be started (no ``setsid``), the close here frees the file."""
    holder = None
    try:
        st = os.fstat(fd)
        if st.st_nlink == 0 and st.st_size >= _FREE_APART_MIN:
            holder = _holder(fd)
    finally:
        os.close(fd)
        if holder is not None:
            os.close(holder)


def _holder(fd: int) -> int | None:
    """Start a process that holds ``fd`` until the returned pipe end is closed (in a session of its own: its
    parent, setsid, has exited, so no one here waits for it or reaps it); None where none could be started."""
    read_end, write_end = os.pipe()
    started = False
    try:
        subprocess.run(["setsid", "--fork", "cat"], stdin=read_end, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, pass_fds=(fd,), check=True)
        started = True
    except (OSError, subprocess.CalledProcessError):
        pass
    finally:
        os.close(read_end)
        if not started:
            os.close(write_end)
    return write_end if started else None


def _open_input(path: Path) -> tuple[FileIO, os.stat_result]:
    try:
        f = open(path, "rb", buffering=0)
    except OSError as exc:
        raise ZipAppendError(f"cannot read {path}: {exc.strerror}") from exc
    return f, os.fstat(f.fileno())


def _unchanged(path: Path, f: FileIO, before: os.stat_result) -> None:
    if identity(os.fstat(f.fileno())) != identity(before):
        raise ZipAppendError(f"{path} changed while being packaged; package again")


def _read_whole(path: Path, size: int, sink: _Sink, workers: _Workers,
                update: Callable[[bytes | memoryview], object]) -> os.stat_result:
    """Copy ``path`` (``size`` bytes, or all of it when negative) once; its stat. A change while it is read is refused."""
    f, before = _open_input(path)
    with f:
        _copy(path, f, before.st_size if size < 0 else size, sink, workers, [(workers.digest, update)])
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

    def info(self, heard: Digest) -> EntryInfo:
        """The entry's info; ``heard`` hears of a file entry's digests."""
        if self.entry.path is not None and self.read is not None:
            heard(self.entry.path, self.read, self.sha256, crc32=self.crc32, settled=self.settled)
        return EntryInfo(self.entry.name, self.start, self.size, self.size, "stored", self.crc32, self.sha256,
                         appended=True)


def _crc32(path: Path, f: FileIO, size: int, workers: _Workers) -> int:
    """The CRC-32 of ``f``'s first ``size`` bytes, read once: each half read and taken on a thread of its own (a
    core each: zlib releases the GIL), then combined."""
    half = size // 2
    low = workers.digest.submit(_part_crc32, path, f.fileno(), 0, half, workers.buffers[0])
    high = workers.entry.submit(_part_crc32, path, f.fileno(), half, size, workers.buffers[1])
    return crc32_combine(low.result(), high.result(), size - half)


def _part_crc32(path: Path, fd: int, start: int, end: int, buffer: memoryview) -> int:
    """The CRC-32 of ``fd``'s bytes from ``start`` to ``end``, read into ``buffer``."""
    crc = _Crc()
    for offset, length, is_data in _extents(fd, end, start):
        if not is_data:
            _hash_zeros(length, crc.update)
            continue
        while length:
            got = os.preadv(fd, [buffer[:min(length, len(buffer))]], offset)
            if not got:
                raise ZipAppendError(f"{path} shrank while being packaged; package again")
            crc.update(buffer[:got])
            offset += got
            length -= got
    return crc.value


def _write_entry(sink: _Sink, entry: Entry, workers: _Workers, *, align: int, date: int, dtime: int,
                 known: Known | None) -> tuple[_WrittenEntry, bytes]:
    """Padding, local header, data: the entry written and its central record."""
    if entry.data is not None:
        size, crc32 = len(entry.data), zlib.crc32(entry.data)
        offset, start, _ = _header(sink, _Pending(entry, size, crc32), align, date, dtime)
        sink.write(entry.data)
        written = _WrittenEntry(entry, start, size, crc32, hashlib.sha256(entry.data).hexdigest())
        return written, _central_record(_Pending(entry, size, crc32), offset, date, dtime)
    assert entry.path is not None
    looked_at = time.time_ns()
    f, before = _open_input(entry.path)
    with f:
        size = before.st_size  # what the header's size fields (and zip64 extra) need
        # (sha256, crc32, settled): a settled record is trusted, the bytes copied under another are hashed again
        recorded = known(entry.path, before) if known is not None else None
        while True:
            crc, sha = _Crc(), hashlib.sha256()
            updates: list[Update]
            if recorded is None:
                # the header's CRC-32 must be final before the data: the file is read for it first (at twice a
                # SHA-256's speed, on both cores); its SHA-256 is taken as it is copied, beside the output's
                crc32, updates = _crc32(entry.path, f, size, workers), [(workers.entry, sha.update)]
            else:
                sha256, crc32, trusted = recorded
                updates = [] if trusted else [(workers.digest, crc.update), (workers.entry, sha.update)]
            offset, start, checkpoint = _header(sink, _Pending(entry, size, crc32), align, date, dtime)
            _copy(entry.path, f, size, sink, workers, updates)
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
    return written, _central_record(_Pending(entry, size, crc32), offset, date, dtime)


def _header(sink: _Sink, pending: _Pending, align: int, date: int,
            dtime: int) -> tuple[int, int, Future]:
    """Pad so the data lands on ``align``, write the local header: (header offset, data offset, the output's
    digest up to the header)."""
    header = _local_header(pending, date, dtime)
    start = -(-(sink.pos + len(header)) // align) * align  # data offset: next multiple of align
    sink.write(bytes(start - len(header) - sink.pos))
    offset = sink.pos
    assert sink.digest is not None
    checkpoint = sink.digest.checkpoint()
    sink.write(header)
    return offset, start, checkpoint


__all__ = [
    "DEFAULT_ALIGN", "AppendResult", "Entry", "EntryInfo", "ZipAppendError", "ZipStoreError", "append",
    "check_name", "dos_datetime",
]
