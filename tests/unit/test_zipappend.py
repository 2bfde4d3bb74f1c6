"""The zip-append writer, checked with Python's zipfile and byte by byte.

In-process checks of the core here; the real builds and tools: tests/integration/test_zipappend.py.
"""
from __future__ import annotations

import errno
import hashlib
import os
import random
import threading
import time
import zipfile
import zlib
from pathlib import Path

import pytest

from opencoti_build.bulkcopy import copier, zipwriter
from opencoti_build.bulkcopy.zipwriter import append
from opencoti_build.formats import zipappend
from opencoti_build.formats.zipappend import Entry, ZipAppendError, ZipStoreError, dos_datetime
from opencoti_build.incremental import timestamps

from packaging_support import PLEDGE, write_gguf
from samples import EPOCH, appended_entries, assert_aligned


@pytest.mark.parametrize("align", [1, 4096, 65536, 1 << 20])
def test_data_offsets_are_aligned(tmp_path: Path, align: int) -> None:
    out = tmp_path / "out"
    result = append(PLEDGE, appended_entries(tmp_path), out, align=align)
    assert_aligned(result, align)
    with open(out, "rb") as f, zipfile.ZipFile(out) as archive:
        for info in result.entries:  # the offsets reported are where each entry's bytes really are
            f.seek(info.data_offset)
            if info.method == "stored":
                assert f.read(info.size) == archive.read(info.name)
            assert hashlib.sha256(archive.read(info.name)).hexdigest() == info.sha256


def test_repackaging_is_byte_identical(tmp_path: Path) -> None:
    entries = appended_entries(tmp_path)
    first = append(PLEDGE, entries, tmp_path / "a", epoch=EPOCH)
    os.utime(tmp_path / "tiny.gguf", (0, 0))  # mtimes and umask-dependent modes must not leak in
    os.chmod(tmp_path / "gguf.magic", 0o600)
    second = append(PLEDGE, appended_entries(tmp_path), tmp_path / "b", epoch=EPOCH)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    assert first.sha256 == second.sha256


def test_dos_timestamps_are_clamped() -> None:
    assert dos_datetime(0) == (1 << 5 | 1, 0)  # 1980-01-01 00:00:00
    assert dos_datetime(EPOCH) == ((2023 - 1980) << 9 | 11 << 5 | 14, 22 << 11 | 13 << 5 | 10)
    assert dos_datetime(2**40)[0] >> 9 == 2107 - 1980


@pytest.mark.parametrize("name, complaint", [
    ("/etc/passwd", "absolute"), ("C:/x", "absolute"), ("../x", "'..'"), ("a/../b", "'..'"),
    ("a//b", "empty"), ("dir/", "empty"), ("", "empty"), ("a\\b", "backslash"), ("a\0b", "NUL"), ("a\nb", "newline"),
    ("./a", "'.' component"), ("C:", "absolute"), pytest.param("x" * 65536, "longer than a zip name can be", id="65536-bytes"),
])
def test_bad_names_are_refused(tmp_path: Path, name: str, complaint: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(ZipAppendError, match=complaint):
        append(PLEDGE, [Entry.blob(name, b"x")], out)
    assert not out.exists()


def test_duplicates_are_refused_including_base_entries(tmp_path: Path) -> None:
    with pytest.raises(ZipAppendError, match="given twice"):
        append(PLEDGE, [Entry.blob("a", b"1"), Entry.blob("a", b"2")], tmp_path / "out")
    with pytest.raises(ZipAppendError, match=r"'sandbox-x86_64.so' is already in .*pledge"):
        append(PLEDGE, [Entry.blob("sandbox-x86_64.so", b"x")], tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_dsos_get_bare_names(tmp_path: Path) -> None:
    dso = tmp_path / "vendors" / "dist" / "llamafile" / "cuda" / "0.10.3" / "ggml-cuda.so"
    dso.parent.mkdir(parents=True)
    dso.write_bytes(b"\x7fELF" + bytes(100))
    dso.chmod(0o755)
    entry = Entry.file(dso)
    assert (entry.name, entry.mode) == ("ggml-cuda.so", 0o755)


def test_the_longest_name_and_a_non_ascii_name_are_stored_as_given(tmp_path: Path) -> None:
    longest, accented = "x" * 65535, "modèle-ü.gguf"
    out = tmp_path / "out"
    append(PLEDGE, [Entry.blob(longest, b"1"), Entry.blob(accented, b"2")], out)
    with zipfile.ZipFile(out) as archive:  # the UTF-8 flag set: readers decode the name as UTF-8, not cp437
        assert archive.read(accented) == b"2" and archive.getinfo(accented).flag_bits & 0x800
        assert archive.read(longest) == b"1" and not archive.getinfo(longest).flag_bits & 0x800


def test_file_modes_are_normalised_from_the_execute_bits(tmp_path: Path) -> None:
    plain, tool = tmp_path / "plain", tmp_path / "tool"
    plain.write_bytes(b"x")
    tool.write_bytes(b"x")
    plain.chmod(0o600)
    tool.chmod(0o700)
    assert (Entry.file(plain).mode, Entry.file(tool).mode, Entry.blob("b", b"", mode=0o755).mode) == (0o644, 0o755, 0o755)


def test_base_without_zip_store_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "plain"
    base.write_bytes(b"\x7fELF" + bytes(5000))
    out = tmp_path / "out"
    with pytest.raises(ZipStoreError, match=r"plain: no zip store"):
        append(base, [Entry.blob(".args", b"x")], out)
    assert not out.exists()


@pytest.mark.parametrize("damage, complaint", [
    (lambda b, cd: b[:cd] + b"XXXX" + b[cd + 4:], "record 0 of 5 is damaged"),
    (lambda b, cd: b[:-22] + b"PK\x05\x06" + bytes(12) + (len(b) * 2).to_bytes(4, "little") + bytes(2), "not absolute"),
    (lambda b, cd: b[:-22 - 4] + b[-22:], "not absolute"),
])
def test_corrupt_zip_store_is_refused(tmp_path: Path, damage, complaint: str) -> None:
    raw = PLEDGE.read_bytes()
    cd = int.from_bytes(raw[-6:-2], "little")
    base = tmp_path / "corrupt"
    base.write_bytes(damage(raw, cd))
    out = tmp_path / "out"
    out.write_bytes(b"previous artifact")
    with pytest.raises(ZipStoreError, match=complaint) as caught:
        append(base, [Entry.blob(".args", b"x")], out)
    assert str(caught.value).startswith(str(base)) and "\n" not in str(caught.value)
    assert out.read_bytes() == b"previous artifact"


def test_failure_mid_write_leaves_previous_artifact_and_no_temp(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "dist" / "out.llamafile"
    entries = appended_entries(tmp_path)
    append(PLEDGE, entries, out)
    previous = out.read_bytes()
    calls = 0
    real_write = os.write

    def disk_fills_up(fd: int, data) -> int:
        nonlocal calls
        calls += 1
        if calls > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(copier.os, "write", disk_fills_up)
    with pytest.raises(ZipAppendError, match=r"cannot write .*out.llamafile: No space left on device"):
        append(PLEDGE, entries + [Entry.blob("more", b"x")], out)
    assert out.read_bytes() == previous
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.llamafile"]


def test_input_changing_while_it_is_read_is_caught(tmp_path: Path, monkeypatch) -> None:
    model = write_gguf(tmp_path / "m.gguf")
    real_copy = copier.copy

    def then_edit(path: Path, *args, **kwargs) -> None:
        real_copy(path, *args, **kwargs)
        if path == model:  # same size, other bytes: only the stat taken after the read can tell
            model.write_bytes(model.read_bytes()[:-1] + b"!")

    monkeypatch.setattr(copier, "copy", then_edit)
    with pytest.raises(ZipAppendError, match=f"^{model} changed while being packaged; package again$"):
        append(PLEDGE, [Entry.file(model)], tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]


def test_a_write_to_the_output_after_the_rename_is_caught(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out"
    real_replace = os.replace

    def then_write(src, dst) -> None:  # another writer, while the output's digest is still being read back
        real_replace(src, dst)
        with open(dst, "ab") as f:
            f.write(b"!")

    monkeypatch.setattr(copier.os, "replace", then_write)
    heard: list[Path] = []
    with pytest.raises(ZipAppendError, match=f"^{out} was written to while being packaged; package again$"):
        append(PLEDGE, appended_entries(tmp_path), out, on_digest=lambda path, st, sha256, **_: heard.append(path))
    assert out not in heard  # no digest is vouched for


def _open_under(root: Path) -> list[str]:
    """What this process's descriptors hold open under ``root`` (other threads' sockets are not counted)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith(f"{root}/"):
            held.append(target)
    return held


@pytest.mark.parametrize("writeback", ["prompt", "slow"])
def test_replacing_an_output_leaves_no_descriptor_open(tmp_path: Path, monkeypatch, writeback: str) -> None:
    if writeback == "slow":  # the writeback thread has not taken the replaced output's close when packaging ends
        replace = copier.Workers.replace

        def busy_replace(workers, tmp: Path, output: Path) -> None:
            workers.writeback.submit(time.sleep, 0.3)
            replace(workers, tmp, output)

        monkeypatch.setattr(copier.Workers, "replace", busy_replace)
    out = tmp_path / "out"
    entries = appended_entries(tmp_path)
    append(PLEDGE, entries, out)
    first = os.stat(out).st_ino
    append(PLEDGE, entries + [Entry.blob("more", b"x")], out)  # the old output is held open across the rename
    assert _open_under(tmp_path) == []  # the old output (now "(deleted)") closed, the new one too
    with zipfile.ZipFile(out) as archive:
        assert os.stat(out).st_ino != first and "more" in archive.namelist()


def _golden_inputs(tmp_path: Path) -> tuple[Path, list[Entry]]:
    """A fixed base (a plain zip) and entries of every kind: sparse, executable, empty, non-ASCII name, blob."""
    rng = random.Random(13)
    base = tmp_path / "base.zip"
    with zipfile.ZipFile(base, "w") as store:
        for name in ("usr/share/a", "b"):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 2, 3, 4, 6))
            info.create_system, info.external_attr = 3, 0o100644 << 16
            store.writestr(info, rng.randbytes(5000))
    model = tmp_path / "model.gguf"
    with open(model, "wb") as f:  # data, a hole, data, a hole to the end (holes where the filesystem has them)
        f.write(b"GGUF" + rng.randbytes(1 << 20))
        f.seek(4 << 20)
        f.write(rng.randbytes(100_000))
        f.truncate(6 << 20)
    tool = tmp_path / "tool"
    tool.write_bytes(rng.randbytes(70_000))
    tool.chmod(0o755)
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "notes").write_text("ünï\n", encoding="utf-8")
    return base, [Entry.file(model), Entry.file(tool, name="bin/tool"), Entry.file(tmp_path / "empty"),
                  Entry.file(tmp_path / "notes", name="dir/ünï.txt"), Entry.blob(".args", b"-m /zip/model.gguf\n")]


# SHA-256 of the artifacts the two-pass writer (commit fff83b8) made of _golden_inputs: the one-pass
# writer must write the same bytes.
GOLDEN = {
    4096: "3a13e369966f3dbe6b89e3afec7522241e28a2d8cb5a782522c7b650031203c8",
    65536: "ae6b7aa918da563b747c191e3478b43d0553542af16f6b361062322e73acdf4b",
}


@pytest.mark.parametrize("align", sorted(GOLDEN))
def test_artifact_is_byte_identical_to_the_two_pass_writers(tmp_path: Path, align: int) -> None:
    base, entries = _golden_inputs(tmp_path)
    heard: list[tuple[str, str]] = []
    result = append(base, entries, tmp_path / "out", align=align, epoch=EPOCH,
                    on_digest=lambda path, st, sha256, **_: heard.append((path.name, sha256)))
    written = (tmp_path / "out").read_bytes()
    assert hashlib.sha256(written).hexdigest() == GOLDEN[align] == result.sha256
    # every file read whole, then the output, each with the digest of its bytes
    files = ["base.zip", "model.gguf", "tool", "empty", "notes"]
    assert heard == [(n, hashlib.sha256((tmp_path / n).read_bytes()).hexdigest()) for n in files] + [
        ("out", GOLDEN[align])]
    with zipfile.ZipFile(tmp_path / "out") as archive:
        assert archive.testzip() is None


def test_small_archives_carry_no_zip64_records(tmp_path: Path) -> None:
    out = tmp_path / "small"
    append(PLEDGE, appended_entries(tmp_path), out)
    data = out.read_bytes()
    assert b"PK\x06\x06" not in data[-200:] and b"PK\x06\x07" not in data[-200:]


@pytest.mark.parametrize("align", [0, 3, 1 << 31, 3 << 20])
def test_an_alignment_that_is_no_power_of_two_up_to_2_30_is_refused(tmp_path: Path, align: int) -> None:
    with pytest.raises(ZipAppendError, match=rf"^ALIGN={align} is not a power of two between 1 and 2\*\*30; "
                                             r"use e\.g\. 65536$"):
        append(PLEDGE, [Entry.blob(".args", b"x")], tmp_path / "out", align=align)
    assert not (tmp_path / "out").exists()


def test_the_largest_alignment_passes_the_check_and_the_defaults(tmp_path: Path) -> None:
    # 2**30 is allowed: the check lets it through to the next one (writing it would take a GiB of padding)
    with pytest.raises(ZipAppendError, match="^cannot read .*absent: No such file or directory$"):
        append(PLEDGE, [Entry("absent", path=tmp_path / "absent")], tmp_path / "never", align=1 << 30)
    out = tmp_path / "new" / "dir" / "out"  # its directories are made
    append(PLEDGE, [Entry.blob(".args", b"x")], out)
    assert out.stat().st_mode & 0o777 == 0o755  # an executable by default
    with zipfile.ZipFile(out) as archive:
        assert archive.getinfo(".args").date_time == (1980, 1, 1, 0, 0, 0)  # epoch 0, clamped to DOS's first day


def _stored_base(tmp_path: Path, method: int, data: bytes) -> Path:
    """A plain zip (PLEDGE's bytes would do as well) with one entry ``a`` under ``method``, data raw as given."""
    base = tmp_path / "base.zip"
    with zipfile.ZipFile(base, "w") as archive:
        archive.writestr(zipfile.ZipInfo("a", date_time=(2020, 1, 1, 0, 0, 0)), b"\0" * len(data))
    raw = bytearray(base.read_bytes())
    local = raw.index(b"PK\x03\x04")
    central = raw.index(b"PK\x01\x02")
    for at in (local + 8, central + 10):  # the compression method fields of both records
        raw[at:at + 2] = method.to_bytes(2, "little")
    start = local + 30 + 1
    raw[start:start + len(data)] = data
    base.write_bytes(bytes(raw))
    return base


def test_a_base_entry_neither_stored_nor_deflated_is_refused_by_name(tmp_path: Path) -> None:
    base = _stored_base(tmp_path, 12, b"BZh91AY&")  # bzip2
    with pytest.raises(ZipStoreError, match=rf"^{base}: entry 'a' uses compression method 12; only stored and "
                                            "deflate entries can be read from /zip$"):
        append(base, [Entry.blob(".args", b"x")], tmp_path / "out")


def test_a_base_entry_that_does_not_inflate_is_refused_by_name(tmp_path: Path) -> None:
    base = _stored_base(tmp_path, zipfile.ZIP_DEFLATED, b"\xff" * 8)  # no valid deflate stream
    with pytest.raises(ZipStoreError, match=rf"^{base}: corrupt zip store: entry 'a' does not inflate \(.+\)$"):
        append(base, [Entry.blob(".args", b"x")], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_base_entries_are_described_with_their_own_crc_and_as_not_appended(tmp_path: Path) -> None:
    result = append(PLEDGE, [Entry.blob(".args", b"x")], tmp_path / "out")
    with zipfile.ZipFile(PLEDGE) as archive:
        crcs = {info.filename: info.CRC for info in archive.infolist()}
    base_infos = [info for info in result.entries if info.name in crcs]
    assert base_infos and all(info.appended is False and info.crc32 == crcs[info.name] for info in base_infos)
    assert result.entry(".args").appended is True


def test_an_entry_mode_follows_any_execute_bit(tmp_path: Path) -> None:
    for mode, stored in ((0o601, 0o755), (0o610, 0o755), (0o700, 0o755), (0o664, 0o644)):
        path = tmp_path / f"f{mode:o}"
        path.write_bytes(b"")
        path.chmod(mode)
        assert Entry.file(path).mode == stored, oct(mode)
    with pytest.raises(ZipAppendError, match=f"^cannot read {tmp_path / 'absent'}: No such file or directory$"):
        Entry.file(tmp_path / "absent")


def test_entries_that_cannot_be_embedded_are_named(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (tmp_path / "dir").mkdir()
    cases = [
        (Entry("dir", path=tmp_path / "dir"), f"^{tmp_path / 'dir'} is not a regular file; name a file to embed$"),
        (Entry("gone", path=tmp_path / "gone"), f"^cannot read {tmp_path / 'gone'}: No such file or directory$"),
        (Entry("both", path=tmp_path / "dir", data=b"x"), "^entry 'both' needs exactly one of a path or data$"),
        (Entry("neither"), "^entry 'neither' needs exactly one of a path or data$"),
    ]
    for entry, message in cases:
        with pytest.raises(ZipAppendError, match=message):
            append(PLEDGE, [entry], out)
        assert not out.exists()


def test_a_name_too_long_is_shown_by_its_first_40_characters() -> None:
    name = "abcdefghij" * 4 + "X" * 65536
    with pytest.raises(ZipAppendError) as caught:
        zipappend.check_name(name)
    assert str(caught.value) == (f"entry name {'abcdefghij' * 4!r}… is longer than a zip name can be "
                                 "(65535 bytes)")


def test_appended_entries_carry_their_crc_and_file_entries_are_heard_with_their_stat(tmp_path: Path) -> None:
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF" + bytes(range(200)))
    heard: dict[str, os.stat_result] = {}
    result = append(PLEDGE, [Entry.file(model), Entry.blob(".args", b"-m x\n")], tmp_path / "out",
                    on_digest=lambda path, st, sha256, **_: heard.setdefault(Path(path).name, st))
    assert result.entry("tiny.gguf").crc32 == zlib.crc32(model.read_bytes())
    assert result.entry(".args").crc32 == zlib.crc32(b"-m x\n")
    assert heard["tiny.gguf"].st_size == model.stat().st_size and heard["tiny.gguf"].st_ino == model.stat().st_ino
    assert ".args" not in heard  # a blob has no file to vouch for
    with pytest.raises(KeyError, match="'absent'"):
        result.entry("absent")


def _recorded_as_read(tmp_path: Path) -> tuple[list[Entry], dict[Path, tuple[os.stat_result, str, int]]]:
    """The golden inputs, and what a first packaging heard of each file entry (its stat, SHA-256 and CRC-32)."""
    base, entries = _golden_inputs(tmp_path)
    heard: dict[Path, tuple[os.stat_result, str, int]] = {}

    def hear(path: Path, st: os.stat_result, sha256: str, crc32: int | None = None, settled: bool = False) -> None:
        if crc32 is not None:
            heard[path] = (st, sha256, crc32)

    append(base, entries, tmp_path / "first", align=4096, epoch=EPOCH, on_digest=hear)
    return entries, heard


def _dropped(monkeypatch) -> list[tuple[int, int | None]]:
    """The (offset, end) ranges of the page cache the writer drops (POSIX_FADV_DONTNEED), as it drops them; an end
    of None: to the end of the file."""
    ranges: list[tuple[int, int | None]] = []
    fadvise = os.posix_fadvise

    def recorded(fd: int, offset: int, length: int, advice: int) -> None:
        if advice == os.POSIX_FADV_DONTNEED:
            ranges.append((offset, offset + length if length else None))
        fadvise(fd, offset, length, advice)

    monkeypatch.setattr(copier.os, "posix_fadvise", recorded)
    return ranges


def _reads(monkeypatch) -> dict[str, int]:
    """Bytes the writer's preadv calls return, by the name of the file read (its temporary output included)."""
    read: dict[str, int] = {}
    preadv = os.preadv

    def counted(fd: int, buffers: list, offset: int) -> int:
        got = preadv(fd, buffers, offset)
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        read[name] = read.get(name, 0) + got
        return got

    monkeypatch.setattr(copier.os, "preadv", counted)
    return read


def _output_reads(read: dict[str, int], output: str) -> int:
    return sum(n for name, n in read.items() if name.startswith(f".{output}."))


@pytest.mark.parametrize("settled", [False, True])
def test_recorded_digests_make_the_output_digest_as_written_and_drop_the_page_cache_behind_it(
        tmp_path: Path, monkeypatch, settled: bool) -> None:
    """Read once each: for the output's digest, and for its CRC-32 only while the record was not settled. Every
    data byte goes in the kernel, nothing is read back, and the output's page cache is dropped behind the
    writeback, all of it: nothing will read it again."""
    base, _ = _golden_inputs(tmp_path)
    entries, heard = _recorded_as_read(tmp_path)
    assert {p.name for p in heard} == {"model.gguf", "tool", "empty", "notes"}

    def known(path: Path, st: os.stat_result) -> tuple[str, int, bool] | None:
        st0, sha256, crc32 = heard[path]
        return (sha256, crc32, settled) if (st0.st_ino, st0.st_mtime_ns) == (st.st_ino, st.st_mtime_ns) else None

    checked: list[int] = []
    crc_update = copier.Crc.update

    def counted_crc(crc: copier.Crc, data: bytes | memoryview) -> None:
        checked.append(len(data))
        crc_update(crc, data)

    copied: list[int] = []
    real_copy_range = os.copy_file_range

    def counted(src: int, dst: int, count: int, offset_src: int | None = None, *rest: int | None) -> int:
        n = real_copy_range(src, dst, count, offset_src, *rest)
        copied.append(n)
        return n

    monkeypatch.setattr(copier.os, "copy_file_range", counted)
    monkeypatch.setattr(copier.Crc, "update", counted_crc)
    dropped = _dropped(monkeypatch)
    read = _reads(monkeypatch)
    result = append(base, entries, tmp_path / "out", align=4096, epoch=EPOCH, known=known)
    assert (tmp_path / "out").read_bytes() == (tmp_path / "first").read_bytes()
    assert result.sha256 == GOLDEN[4096] == hashlib.sha256((tmp_path / "out").read_bytes()).hexdigest()

    def data_runs(path: Path) -> list[int]:  # holes are seeked over, never written
        with open(path, "rb") as f:
            return [length for _, length, is_data in copier.extents(f.fileno(), path.stat().st_size) if is_data]

    assert sum(copied) == sum(data_runs(base)) + sum(length for path in heard for length in data_runs(path)) > 0
    entries_size = sum(p.stat().st_size for p in heard)  # holes included: they are hashed as zeros
    assert sum(checked) == (0 if settled else entries_size)
    assert read["model.gguf"] == sum(data_runs(tmp_path / "model.gguf")) and _output_reads(read, "out") == 0
    # one range after another (each from the page the last one ended in: the kernel drops whole pages), from the
    # start to the end of the file: the whole output leaves the page cache
    assert dropped and dropped[0][0] == 0 and dropped[-1][1] is None
    assert all(later[0] == earlier[1] - earlier[1] % copier.PAGE for earlier, later in zip(dropped, dropped[1:]))
    with zipfile.ZipFile(tmp_path / "out") as archive:
        assert archive.testzip() is None


def test_a_new_file_is_read_for_its_crc_then_copied_and_hashed_and_the_output_never_read(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    """Its header's CRC-32 must be final before its data: the file is read for its CRC-32 first, half on each of two
    threads, then copied as a recorded one is, its SHA-256 taken beside the output's as written; the output's page
    cache is dropped whole."""
    base, entries = _golden_inputs(tmp_path)
    dropped = _dropped(monkeypatch)
    read = _reads(monkeypatch)
    crc_threads: dict[str, int] = {}
    crc_update = copier.Crc.update

    def counted_crc(crc: copier.Crc, data: bytes | memoryview) -> None:
        name = threading.current_thread().name.rsplit("_", 1)[0]
        crc_threads[name] = crc_threads.get(name, 0) + len(data)
        crc_update(crc, data)

    monkeypatch.setattr(copier.Crc, "update", counted_crc)
    result = append(base, entries, tmp_path / "out", align=4096, epoch=EPOCH)
    assert result.sha256 == GOLDEN[4096] == hashlib.sha256((tmp_path / "out").read_bytes()).hexdigest()
    model = tmp_path / "model.gguf"
    assert result.entry("model.gguf").sha256 == hashlib.sha256(model.read_bytes()).hexdigest()
    with open(model, "rb") as f:  # holes are seeked over, never read
        data = sum(length for _, length, is_data in copier.extents(f.fileno(), model.stat().st_size) if is_data)
    assert read["model.gguf"] == 2 * data and _output_reads(read, "out") == 0
    assert dropped and dropped[0][0] == 0 and dropped[-1][1] is None
    # every entry's bytes once (holes as zeros), the halves on two threads; the base's CRC-32s are in its records
    sizes = [e.path.stat().st_size for e in entries if e.path is not None]
    assert sum(crc_threads.values()) == sum(sizes) and set(crc_threads) == {"zipappend-digest", "zipappend-entry"}
    assert crc_threads["zipappend-digest"] == sum(size // 2 for size in sizes)


def test_a_recorded_crc_of_other_bytes_is_caught_and_the_digests_are_taken_again(tmp_path: Path) -> None:
    """A change within one timestamp tick keeps the stat; the CRC-32 of the bytes copied tells."""
    base, _ = _golden_inputs(tmp_path)
    entries, heard = _recorded_as_read(tmp_path)
    model = next(p for p in heard if p.name == "model.gguf")
    lied = {p: (sha256, crc32 ^ 1 if p == model else crc32, False) for p, (_, sha256, crc32) in heard.items()}
    result = append(base, entries, tmp_path / "out", align=4096, epoch=EPOCH, known=lambda path, st: lied[path])
    written = (tmp_path / "out").read_bytes()
    assert written == (tmp_path / "first").read_bytes()  # the header holds the CRC of the bytes, not the record's
    assert result.sha256 == GOLDEN[4096] == hashlib.sha256(written).hexdigest()
    assert result.entry("model.gguf").sha256 == hashlib.sha256(model.read_bytes()).hexdigest()


def test_an_unsettled_record_is_hashed_again_and_a_sha256_of_other_bytes_is_caught(tmp_path: Path) -> None:
    """Git's racily-clean rule: a record taken within its file's timestamp tick vouches for nothing, not even with
    the right CRC-32 (a same-size change can keep it); the model's SHA-256 is taken again as it is copied."""
    base, _ = _golden_inputs(tmp_path)
    entries, heard = _recorded_as_read(tmp_path)
    model = next(p for p in heard if p.name == "model.gguf")
    lied = {p: ("0" * 64 if p == model else sha256, crc32, False) for p, (_, sha256, crc32) in heard.items()}
    result = append(base, entries, tmp_path / "out", align=4096, epoch=EPOCH, known=lambda path, st: lied[path])
    assert (tmp_path / "out").read_bytes() == (tmp_path / "first").read_bytes()
    assert result.sha256 == GOLDEN[4096]
    assert result.entry("model.gguf").sha256 == hashlib.sha256(model.read_bytes()).hexdigest()
    trusted = {p: (sha256, crc32, True) for p, (sha256, crc32, _) in lied.items()}  # settled: taken as recorded
    result = append(base, entries, tmp_path / "again", align=4096, epoch=EPOCH, known=lambda path, st: trusted[path])
    assert result.entry("model.gguf").sha256 == "0" * 64


@pytest.mark.parametrize(("after_ns", "settled"), [(1_000_000, False), (2 * timestamps.SECOND_NS, True)])
def test_an_entry_is_heard_settled_once_read_a_tick_after_its_last_change(tmp_path: Path, monkeypatch,
                                                                          after_ns: int, settled: bool) -> None:
    model = write_gguf(tmp_path / "tiny.gguf")
    changed = model.stat().st_ctime_ns
    monkeypatch.setattr(zipwriter.time, "time_ns", lambda: changed + after_ns)  # the clock as the entry is opened
    heard: dict[str, bool] = {}

    def hear(path: Path, st: os.stat_result, sha256: str, crc32: int | None = None, settled: bool = False) -> None:
        if crc32 is not None:
            heard[path.name] = settled

    append(PLEDGE, [Entry.file(model)], tmp_path / "out", on_digest=hear)
    assert heard == {"tiny.gguf": settled}


def test_without_copy_file_range_the_bytes_are_copied_through_the_buffers(tmp_path: Path, monkeypatch) -> None:
    base, _ = _golden_inputs(tmp_path)
    entries, heard = _recorded_as_read(tmp_path)

    def unsupported(*args: object) -> int:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(copier.os, "copy_file_range", unsupported)
    result = append(base, entries, tmp_path / "out", align=4096, epoch=EPOCH,
                    known=lambda path, st: (*heard[path][1:], False) if path in heard else None)
    assert (tmp_path / "out").read_bytes() == (tmp_path / "first").read_bytes()
    assert result.sha256 == GOLDEN[4096]
