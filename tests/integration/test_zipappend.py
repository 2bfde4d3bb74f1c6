"""The zip-append writer against real cosmopolitan executables, unzip, and Python's zipfile."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from opencoti_build.bulkcopy import copier
from opencoti_build.bulkcopy.zipwriter import append
from opencoti_build.formats import zipappend
from opencoti_build.formats.zipappend import Entry

from packaging_support import FILE_ELF, GGUF_MAGIC, PLEDGE, copy_exe, run, write_gguf
from samples import EPOCH, appended_entries, assert_aligned
from scons_runs import PROJECT


def test_file_elf_reads_every_appended_entry(tmp_path: Path) -> None:
    out = tmp_path / "file.com"
    result = append(copy_exe(FILE_ELF, tmp_path / "base"), appended_entries(tmp_path), out, epoch=EPOCH)
    os.chmod(out, 0o755)
    proc = run(out, "-m", "/zip/gguf.magic", "/zip/tiny.gguf", "/zip/bin/hello.sh", "/zip/.args")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("GGUF model, version 3"), lines
    assert "/zip/bin/hello.sh" in lines[1] and "cannot open" not in lines[1] and "invalid mode" not in lines[1]
    assert lines[2].startswith("/zip/.args") and "text" in lines[2], lines
    # the base's own entries stay readable where they were
    zoneinfo = run(out, "/zip/usr/share/zoneinfo/CET")
    assert "timezone data" in zoneinfo.stdout
    assert_aligned(result, zipappend.DEFAULT_ALIGN)


def test_pledge_ape_still_runs_under_sh_and_readers_accept_it(tmp_path: Path) -> None:
    base = copy_exe(PLEDGE, tmp_path / "pledge")
    out = tmp_path / "pledge.com"
    result = append(base, appended_entries(tmp_path), out, epoch=EPOCH)
    proc = run("sh", f"./{out.name}", "-h", cwd=tmp_path)
    assert "usage: pledge" in proc.stdout + proc.stderr
    unzip = run("unzip", "-t", out)
    assert unzip.returncode == 0 and "No errors detected" in unzip.stdout, unzip.stdout + unzip.stderr
    with zipfile.ZipFile(out) as archive:
        assert archive.testzip() is None
        names = archive.namelist()
        assert names == [r for r in zipfile.ZipFile(base).namelist()] + ["tiny.gguf", "gguf.magic", "bin/hello.sh", ".args"]
        info = archive.getinfo("bin/hello.sh")
        assert info.create_system == 3
        assert info.external_attr >> 16 == stat.S_IFREG | 0o755
        assert archive.getinfo(".args").external_attr >> 16 == stat.S_IFREG | 0o644
        assert info.date_time == (2023, 11, 14, 22, 13, 20)
        assert archive.read(".args") == b"--strace\n"
    assert result.sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    assert result.size == out.stat().st_size
    assert result.base_sha256 == hashlib.sha256(base.read_bytes()).hexdigest()
    assert out.read_bytes().startswith(base.read_bytes())  # the base's bytes are untouched


def test_more_than_65535_entries_use_zip64_end_records(tmp_path: Path) -> None:
    out = tmp_path / "many"
    entries = [Entry.blob(f"e/{i:05d}", b"") for i in range(70000)]
    append(PLEDGE, entries, out, align=1)
    tail = out.read_bytes()[-22 - 20 - 56:]
    assert tail.startswith(b"PK\x06\x06") and tail[56:60] == b"PK\x06\x07"
    with zipfile.ZipFile(out) as archive:
        assert len(archive.infolist()) == 70000 + 5
        assert archive.getinfo("e/69999").file_size == 0
    assert "70005 files" in run("unzip", "-l", out).stdout


def test_sparse_model_over_4gib_gives_a_valid_zip64_artifact(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "huge.gguf")
    size = (4 << 30) + (512 << 20)
    with open(model, "r+b") as f:  # a hole up to the end, then a marker the readers must find
        f.truncate(size)
        f.seek(size - 8)
        f.write(b"THE-END!")
    base = copy_exe(FILE_ELF, tmp_path / "base")
    out = tmp_path / "huge.com"
    (tmp_path / "gguf.magic").write_text(GGUF_MAGIC)
    result = append(base, [Entry.file(model), Entry.file(tmp_path / "gguf.magic")], out)
    assert out.stat().st_blocks * 512 < 64 << 20  # holes stayed holes
    # the two-pass writer's bytes (commit fff83b8), zip64 fields included
    assert result.sha256 == "fd66ac560e8203e42a5521da7cfb766a1bea1d6675c85779846f8a2398de90ef"
    huge = result.entry("huge.gguf")
    assert huge.size == size and huge.data_offset % zipappend.DEFAULT_ALIGN == 0
    assert result.entry("gguf.magic").data_offset > 0xFFFFFFFF  # an offset only zip64 can express
    with zipfile.ZipFile(out) as archive, open(out, "rb") as raw:
        info = archive.getinfo("huge.gguf")
        assert info.file_size == size and info.compress_type == zipfile.ZIP_STORED
        with archive.open(info) as member:  # zipfile checks the local header it finds at the zip64 offset
            assert member.read(4) == b"GGUF"
        raw.seek(info.header_offset + 26)  # name and extra lengths: the data follows them
        name_len, extra_len = int.from_bytes(raw.read(2), "little"), int.from_bytes(raw.read(2), "little")
        assert info.header_offset + 30 + name_len + extra_len == huge.data_offset
        raw.seek(huge.data_offset + size - 8)  # (zipfile would read 4.5 GiB to seek there)
        assert raw.read(8) == b"THE-END!"
        assert archive.read("gguf.magic") == GGUF_MAGIC.encode()
    listing = run("unzip", "-l", out)
    assert listing.returncode == 0 and str(size) in listing.stdout, listing.stdout + listing.stderr
    assert run("unzip", "-p", out, "gguf.magic").stdout == GGUF_MAGIC
    seen = run(out, "-m", "/zip/gguf.magic", "/zip/huge.gguf")
    assert seen.stdout.strip().endswith("GGUF model, version 3"), seen.stdout + seen.stderr


def _cached_bytes(path: Path) -> int:
    """How much of ``path`` is in the page cache (util-linux fincore)."""
    shown = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                           capture_output=True, text=True, check=True)
    return int(shown.stdout.split()[0])


def test_the_output_replaced_leaves_the_page_cache_as_the_copy_begins_and_stays_whole_until_the_rename(
        tmp_path: Path, monkeypatch) -> None:
    """Its pages are garbage once the new output is renamed over it, and the new one needs as many: freed frames are
    reused at once (docs/benchmarks.md: a 3 GiB copy took three times as long beside a cached old artifact)."""
    if shutil.which("fincore") is None:
        pytest.skip("no fincore (util-linux) to see the page cache with")
    probe = tmp_path / "probe"
    probe.write_bytes(os.urandom(1 << 20))
    with open(probe, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    if _cached_bytes(probe):
        pytest.skip(f"{tmp_path}'s filesystem keeps clean pages when told they are not needed (tmpfs)")
    out = tmp_path / "out"
    entries = appended_entries(tmp_path)
    append(PLEDGE, entries, out)
    old = out.read_bytes()
    assert _cached_bytes(out) > 0  # just written and read: cached
    seen: list[tuple[int, bytes]] = []
    copy = copier.copy

    def first_copy(path: Path, f: object, size: int, sink: object, workers: copier.Workers, *args: object,
                   **kwargs: object) -> None:
        if not seen:  # the drop is the writeback thread's first work, beside the copy: once it has run
            workers.writeback.submit(lambda: None).result()
            seen.append((_cached_bytes(out), out.read_bytes()))
            with open(out, "rb") as old:  # reading it to compare cached it again: drop that, as before
                os.posix_fadvise(old.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        copy(path, f, size, sink, workers, *args, **kwargs)

    monkeypatch.setattr(copier, "copy", first_copy)
    append(PLEDGE, entries + [Entry.blob("more", b"x")], out)
    assert seen == [(0, old)]  # nothing of it cached when the copy began, every byte still there
    with zipfile.ZipFile(out) as archive:
        assert "more" in archive.namelist()


def test_an_output_leaves_the_page_cache_once_on_the_disk(tmp_path: Path) -> None:
    """Nothing reads it back (a new model is read for its CRC-32 before it is copied; a recorded one is not), so
    none of it stays cached, where the model read stays."""
    if shutil.which("fincore") is None:
        pytest.skip("no fincore (util-linux) to see the page cache with")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + os.urandom((8 << 20) + 1000))
    recorded: dict[Path, tuple[str, int]] = {}

    def hear(path: Path, st: os.stat_result, sha256: str, crc32: int | None = None, settled: bool = False) -> None:
        if crc32 is not None:
            recorded[path] = (sha256, crc32)

    first = append(PLEDGE, [Entry.file(model)], tmp_path / "first", on_digest=hear)
    if _cached_bytes(model) == 0:
        pytest.skip(f"{tmp_path}'s filesystem keeps no page cache")
    assert _cached_bytes(tmp_path / "first") == 0
    out = tmp_path / "out"
    result = append(PLEDGE, [Entry.file(model)], out, known=lambda path, st: (*recorded[path], True))
    assert _cached_bytes(out) == 0
    assert result.sha256 == first.sha256 == hashlib.sha256(out.read_bytes()).hexdigest()


def _holders(file: tuple[int, int]) -> list[int]:
    """The processes (this one included) with a descriptor of ``file`` (its device and inode)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or not ours to look at
            continue
        for fd in fds:
            try:
                held = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (held.st_dev, held.st_ino) == file:
                pids.append(int(pid))
                break
    return pids


def _replace_output(tmp_path: Path) -> tuple[int, int]:
    """Package ``out`` twice; the device and inode of the output the second run replaced."""
    out = tmp_path / "out"
    entries = appended_entries(tmp_path)
    append(PLEDGE, entries, out)
    replaced = os.stat(out)
    append(PLEDGE, entries + [Entry.blob("more", b"x")], out)
    assert "more" in zipfile.ZipFile(out).namelist()
    return replaced.st_dev, replaced.st_ino


# A packaging process: it replaces an output (every output counts as big), prints the replaced one's device and
# inode, and ends when its stdin does.
_REPLACE_THEN_WAIT = """
import os, sys
from pathlib import Path
from opencoti_build.bulkcopy import replaced
from opencoti_build.bulkcopy.zipwriter import append
from opencoti_build.formats.zipappend import Entry
from packaging_support import PLEDGE
replaced.FREE_APART_MIN = 0
out = Path(sys.argv[1])
append(PLEDGE, [Entry.blob("first", b"1")], out)
st = os.stat(out)
append(PLEDGE, [Entry.blob("second", b"2")], out)
print(st.st_dev, st.st_ino, flush=True)
sys.stdin.read()
"""


def test_a_big_replaced_output_is_freed_by_a_process_of_its_own_once_packaging_has_ended(tmp_path: Path) -> None:
    """The replaced output's last descriptor goes to a detached process (a session of its own, not a child of the
    packaging one), which lets go of it only once the packaging process has ended: the run's last steps share the
    disk with no freeing."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1]), str(PROJECT / "site_scons")]))
    packaging = subprocess.Popen([sys.executable, "-c", _REPLACE_THEN_WAIT, tmp_path / "out"], env=env, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        dev, ino = map(int, packaging.stdout.readline().split())
        time.sleep(0.3)  # a holder that let go at append's end (as before) has gone by now
        holders = _holders((dev, ino))
        assert holders and packaging.pid not in holders  # packaging holds none of it, the holder still does
        for pid in holders:
            with open(f"/proc/{pid}/stat") as f:  # after the command's ")": state, parent
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            assert parent != packaging.pid and os.getsid(pid) != os.getsid(packaging.pid)  # detached
    finally:
        packaging.stdin.close()  # also when an assertion failed: the packaging process ends
        assert packaging.wait(timeout=30) == 0
    deadline = time.monotonic() + 10
    while _holders((dev, ino)):
        assert time.monotonic() < deadline, "the holder did not let go of the replaced output"
        time.sleep(0.02)


@pytest.mark.parametrize("case", ["no setsid", "small"])
def test_a_replaced_output_is_freed_here_without_setsid_or_when_small(tmp_path: Path, monkeypatch, case: str) -> None:
    tools = tmp_path / "tools"  # a cat that never lets go: a small output must not be handed to it
    tools.mkdir()
    (tools / "cat").write_text("#!/bin/sh\nexec sleep 60\n")
    (tools / "cat").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    if case == "no setsid":
        monkeypatch.setenv("PATH", str(tools))
        monkeypatch.setattr("opencoti_build.bulkcopy.replaced.FREE_APART_MIN", 0)
    assert _holders(_replace_output(tmp_path)) == []  # closed here, freed, before append returned
