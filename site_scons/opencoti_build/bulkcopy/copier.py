"""The bulk copy of the zip-append writer (zipwriter): each input's bytes copied to the output once, every digest
taken beside the copy, the output written back to the disk as it grows.

Each input is copied once. Its bytes go to the output with ``copy_file_range`` where the kernel offers it (a
reflink-capable filesystem then copies no data; elsewhere the kernel copies several times faster than read and
write through Python's buffers) and are read once from the page cache the copy filled, into a few fixed buffers,
for the digests, each on a thread of its own (ISA-L's CRC-32 and hashlib release the GIL). Memory use is constant;
holes in sparse inputs are skipped with SEEK_DATA/SEEK_HOLE and stay holes in the output.

The output is written back to the disk from the first chunk on (an fdatasync kept in flight), and the page cache
of what is on the disk is dropped behind it: nothing reads those pages again, and the frames the copy takes next
are the ones just freed, reused at once, where fresh ones cost the kernel (and a VM's host) several times more.
On the benchmark's VM a 3 GiB copy then cost 1.1-1.5 s; kept in the page cache 2.5-8 s, written with O_DIRECT (one
write in flight: ext4 serialises O_DIRECT writes that allocate blocks) 2.1-2.4 s (docs/packaging.md, bench/).

The output's own SHA-256 is taken on a thread of its own, in file order, from the bytes as they are written
(:class:`OutputDigest`); nothing is read back from the output (that would verify nothing about the disk:
``verify`` re-reads on demand).
"""
from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from io import FileIO
from pathlib import Path

from isal import isal_zlib

from opencoti_build.bulkcopy import replaced
from opencoti_build.formats.crc32 import combine as crc32_combine
from opencoti_build.formats.zipappend import ZipAppendError

CHUNK = 4 << 20
_ZEROS = bytes(CHUNK)
PAGE = os.sysconf("SC_PAGE_SIZE")
_BUFFERS = 3  # one filling, one or two being hashed: reading rarely waits for the hash thread


def extents(fd: int, size: int, start: int = 0) -> Iterator[tuple[int, int, bool]]:
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


def hash_zeros(length: int, *update: Callable[[bytes], object]) -> None:
    while length:
        n = min(length, CHUNK)
        for fn in update:
            fn(_ZEROS[:n])
        length -= n


class Crc:
    """Zip's CRC-32 (zlib's), by Intel's ISA-L (python-isal): carry-less multiplication, about 6 times zlib's speed
    here (docs/packaging.md), so the pass a new model needs for its header costs a fraction of a SHA-256."""

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes | memoryview) -> None:
        self.value = isal_zlib.crc32(data, self.value)


class Workers:
    """The helper threads: one for an input's CRC-32 (and the base's SHA-256), one for a new file's SHA-256 as it is
    copied (beside the output's: a core each; the two read a new file's halves for its CRC-32 before that), one
    that takes the output's SHA-256 in file order as it is written, and one that writes the output back to disk
    (fsync) while the copy and the digests go on, dropping the page cache behind it, then lets go of the output it
    replaced (:func:`replaced.close_replaced`).

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
        self.buffers = [memoryview(bytearray(CHUNK)) for _ in range(_BUFFERS)]
        self.kernel_copy = True  # until copy_file_range says it cannot copy between these files

    def write_back(self, sink: Sink) -> None:
        """Have the disk write what is in the page cache so far, then drop what it wrote (:meth:`Sink.drop_clean`),
        unless it is still at the last lot: it then works from the first chunk on, beside the copy and the hashing,
        instead of taking GiBs of dirty pages at the end (the kernel starts on its own only past its dirty
        threshold)."""
        if self.flush is None or self.flush.done():
            self.settle()
            self.flush = self.writeback.submit(_write_back, sink, sink.pos)

    def durable(self, sink: Sink) -> None:
        """fsync the output once the writeback in flight is done."""
        self.settle()
        os.fsync(sink.fd)
        sink.drop_clean(None)

    def replace(self, tmp: Path, output: Path) -> None:
        """Rename ``tmp`` over ``output``; the replaced file's blocks are freed off the critical path.

        Freeing GiBs is no instant: with the ``discard`` mount option the kernel trims them first (0.4 s for
        3 GiB on the benchmark's disk, waiting on the disk). An open descriptor of the old file keeps its inode alive
        through the rename, so the freeing happens at its close: on the writeback thread, and for a big file in a
        process of its own once this one has ended (:func:`replaced.close_replaced`)."""
        try:
            old = os.open(output, os.O_PATH)
        except OSError:  # no output yet (or none we may see): the rename frees nothing
            old = -1
        try:
            os.replace(tmp, output)
        finally:
            if old >= 0:
                self.freeing.append((self.writeback.submit(replaced.close_replaced, old), old))

    def settle(self) -> None:
        """Wait for the writeback in flight."""
        if self.flush is not None:
            self.flush.result()  # an I/O error is reported to one fdatasync/fsync only: raise it here

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for pool in (self.digest, self.output, self.entry, self.writeback):
            pool.shutdown(wait=True, cancel_futures=True)
        for closing, fd in self.freeing:
            if closing.cancelled():  # the writeback thread never got to it: close it here, or it leaks
                os.close(fd)


Update = tuple[ThreadPoolExecutor, Callable[[bytes | memoryview], object]]  # a digest and the thread it runs on


def _write_back(sink: Sink, upto: int) -> None:
    os.fdatasync(sink.fd)
    sink.drop_clean(upto)


def copy(path: Path, f: FileIO, size: int, sink: Sink, workers: Workers, updates: Sequence[Update]) -> None:
    """Copy ``f``'s first ``size`` bytes to ``sink`` once; each update sees them all, in order, on its own thread.

    They go with copy_file_range while the kernel can (a reflink-capable filesystem
    copies no data; on others it is several times faster than read and write through Python's buffers here), then
    read once, from the page cache the copy filled, for the digests (the output's among them)."""
    busy: list[list[Future]] = [[] for _ in workers.buffers]
    zeros: list[Future] = []
    turn = 0
    fd = f.fileno()
    for offset, length, is_data in extents(fd, size):
        if not is_data:
            zeros += [thread.submit(hash_zeros, length, update) for thread, update in updates]
            sink.hole(length)
            continue
        end = offset + length
        while offset < end:
            for last in busy[turn]:
                last.result()  # this buffer's last chunk is hashed: it may be filled again
            got, busy[turn] = _chunk(path, fd, offset, min(end - offset, CHUNK), turn, sink, workers, updates)
            offset += got
            turn = (turn + 1) % len(workers.buffers)
    for future in [*zeros, *(f for futures in busy for f in futures)]:
        future.result()  # every digest has seen every byte, and none reads the buffers any more


def _chunk(path: Path, fd: int, offset: int, wanted: int, turn: int, sink: Sink, workers: Workers,
           updates: Sequence[Update]) -> tuple[int, list[Future]]:
    """Copy up to ``wanted`` bytes of ``fd`` from ``offset`` to ``sink`` through buffer ``turn``: (how many, the
    digests' futures, which read that buffer until they are done)."""
    view = workers.buffers[turn]
    copied = sink.copy_range(fd, offset, wanted, workers) if workers.kernel_copy else 0
    got = os.preadv(fd, [view[:copied or wanted]], offset)
    if not got or got < copied:
        raise ZipAppendError(f"{path} shrank while being packaged; package again")
    chunk = view[:got]
    busy = [thread.submit(update, chunk) for thread, update in updates]
    busy += [f for f in (sink.hashed(chunk) if copied else sink.write(chunk),) if f is not None]
    workers.write_back(sink)
    return got, busy


class Sink:
    """The output file: where writing has got to, and its digest (fed in order); zero runs become holes."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path
        self.pos = 0
        self.digest: OutputDigest | None = None  # from the end of the base on (the base's own digest is its start)
        self.dropped = 0  # the page cache before this is dropped (on the writeback thread)

    def drop_clean(self, upto: int | None) -> None:
        """Drop the output's page cache before ``upto`` (None: to its end), on the disk by now: nothing reads it
        again. Advice: what it drops is read from the disk if ever needed, and a filesystem may take none. The
        kernel drops only the pages wholly inside a range, so each range starts at the page the last one ended in."""
        start = self.dropped - self.dropped % PAGE
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

    def copy_range(self, src: int, offset: int, length: int, workers: Workers) -> int:
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

    def rewind(self, offset: int, checkpoint: Future, workers: Workers) -> None:
        """Go back to ``offset`` (a header whose entry is written again): what follows is cut off (the copy seeks
        over holes, so bytes left there would stay), and the output's digest goes on from ``checkpoint``, its state
        there."""
        assert self.digest is not None
        workers.settle()  # no drop of the page cache runs on beside the cut
        self.digest.restore(checkpoint)
        os.ftruncate(self.fd, offset)
        self.pos = os.lseek(self.fd, offset, os.SEEK_SET)
        self.dropped = min(self.dropped, offset)


class OutputDigest:
    """The output's SHA-256, fed in file order on one thread from the bytes as they are written."""

    def __init__(self, sha: hashlib._Hash, thread: ThreadPoolExecutor) -> None:
        self.sha, self.thread = sha, thread

    def written(self, data: bytes | memoryview) -> Future:
        return self.thread.submit(self.sha.update, data)

    def zeros(self, length: int) -> None:
        self.thread.submit(hash_zeros, length, self.sha.update)

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


def crc32(path: Path, f: FileIO, size: int, workers: Workers) -> int:
    """The CRC-32 of ``f``'s first ``size`` bytes, read once: each half read and taken on a thread of its own (a
    core each: ISA-L releases the GIL), then combined."""
    half = size // 2
    low = workers.digest.submit(_part_crc32, path, f.fileno(), 0, half, workers.buffers[0])
    high = workers.entry.submit(_part_crc32, path, f.fileno(), half, size, workers.buffers[1])
    return crc32_combine(low.result(), high.result(), size - half)


def _part_crc32(path: Path, fd: int, start: int, end: int, buffer: memoryview) -> int:
    """The CRC-32 of ``fd``'s bytes from ``start`` to ``end``, read into ``buffer``."""
    crc = Crc()
    for offset, length, is_data in extents(fd, end, start):
        if not is_data:
            hash_zeros(length, crc.update)
            continue
        while length:
            got = os.preadv(fd, [buffer[:min(length, len(buffer))]], offset)
            if not got:
                raise ZipAppendError(f"{path} shrank while being packaged; package again")
            crc.update(buffer[:got])
            offset += got
            length -= got
    return crc.value
