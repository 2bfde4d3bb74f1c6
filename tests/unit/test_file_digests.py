"""opencoti_build.cache.file_digests: a digest is given back only while the file keeps the stat identity it was
taken with; any write, truncation, chmod or replacement moves that identity, and the file is read again."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from opencoti_build.cache import file_digests


@pytest.fixture
def digests() -> file_digests.Digests:
    return file_digests.Digests()


DATA = bytes(range(256)) * ((9 << 20) // 256 + 7)  # over two read chunks, not a multiple of one


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(DATA)
    return path


def expected(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_a_signature_is_the_sha256_of_every_byte_and_is_remembered(digests: file_digests.Digests, model: Path) -> None:
    assert digests.known(model) is None
    assert digests.signature(model) == expected(DATA)
    assert digests.known(model) == expected(DATA)
    assert digests.known(str(model)) == expected(DATA)  # a path is a path, str or Path
    assert digests.signature(model).startswith(file_digests.PREFIX)


def test_remembered_digests_are_given_back_without_reading(digests: file_digests.Digests, model: Path, monkeypatch) -> None:
    digests.remember(model, os.stat(model), "ab" * 32)
    monkeypatch.setattr(file_digests.hashlib, "sha256", None)  # any read would fail
    assert digests.signature(model) == "sha256:" + "ab" * 32


@pytest.mark.parametrize("change", ["append", "rewrite-same-size", "chmod", "replace", "touch"])
def test_any_change_to_the_file_forgets_its_digest(digests: file_digests.Digests, model: Path, change: str) -> None:
    digests.signature(model)
    data = DATA
    if change == "append":
        data = DATA + b"!"
        model.write_bytes(data)
    elif change == "rewrite-same-size":
        data = b"?" + DATA[1:]
        with open(model, "r+b") as f:
            f.write(b"?")
    elif change == "chmod":
        model.chmod(0o600)
    elif change == "replace":
        other = model.with_name("other")
        other.write_bytes(DATA)
        os.replace(other, model)
    else:
        st = model.stat()
        os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert digests.known(model) is None
    assert digests.signature(model) == expected(data)


def test_a_file_gone_is_not_known(digests: file_digests.Digests, model: Path) -> None:
    digests.signature(model)
    model.unlink()
    assert digests.known(model) is None


def test_a_file_written_while_it_is_read_is_not_remembered(digests: file_digests.Digests, model: Path, monkeypatch) -> None:
    real_fstat = os.fstat
    calls = []

    def fstat_after_a_write(fd: int) -> os.stat_result:
        calls.append(fd)
        if len(calls) == 2:  # the check after the read: someone appended meanwhile
            with open(model, "ab") as f:
                f.write(b"late")
        return real_fstat(fd)

    monkeypatch.setattr(file_digests.os, "fstat", fstat_after_a_write)
    assert digests.signature(model) == expected(DATA)  # what was read
    monkeypatch.undo()
    assert digests.known(model) is None  # but not vouched for
    assert digests.signature(model) == expected(DATA + b"late")


def test_entries_digests_are_kept_across_runs_while_the_file_keeps_its_stat(tmp_path: Path, model: Path) -> None:
    record = tmp_path / "build" / file_digests.RECORD_NAME
    record.parent.mkdir()
    first = file_digests.Digests()
    first.keep_in(record)
    first.remember(model, os.stat(model), "ab" * 32, crc32=1234, settled=True)
    first.remember(tmp_path / "artifact", os.stat(model), "cd" * 32)  # a whole-file digest (no CRC): not kept
    first.save()
    second = file_digests.Digests()
    assert second.entry(model, os.stat(model)) is None  # nothing loaded until asked to keep
    second.keep_in(record)
    assert second.entry(model, os.stat(model)) == ("ab" * 32, 1234, True)
    assert second.known(tmp_path / "artifact") is None
    os.utime(model, ns=(1, 1))  # another stat: the recorded digests are of other bytes, for all it knows
    assert second.entry(model, os.stat(model)) is None
    second.save()
    third = file_digests.Digests()
    third.keep_in(record)
    assert third.entry(model, os.stat(model)) is None  # a file whose stat moved is no longer kept


def test_an_unsettled_record_of_an_earlier_run_gives_scons_no_signature(tmp_path: Path, model: Path) -> None:
    """Git's racily-clean rule: a digest taken within the file's timestamp tick may be of bytes a write in that tick
    replaced, keeping the stat; the next run hashes the file again (the packager as it copies it, SCons itself)."""
    record = tmp_path / "build" / file_digests.RECORD_NAME
    record.parent.mkdir()
    first = file_digests.Digests()
    first.keep_in(record)
    first.remember(model, os.stat(model), "ab" * 32, crc32=1234, settled=False)
    assert first.known(model) == "sha256:" + "ab" * 32  # this run's own reading
    first.save()
    second = file_digests.Digests()
    second.keep_in(record)
    assert second.entry(model, os.stat(model)) == ("ab" * 32, 1234, False)  # the packager checks it as it copies
    assert second.known(model) is None
    second.remember(model, os.stat(model), "cd" * 32, crc32=5, settled=False)  # hashed again in this run
    assert second.known(model) == "sha256:" + "cd" * 32


@pytest.mark.parametrize("content", ["", "not json", '{"format": 99, "files": {}}', '{"format": 2, "files": {"x": 5}}'])
def test_an_unreadable_digest_record_is_no_record(tmp_path: Path, model: Path, content: str) -> None:
    record = tmp_path / file_digests.RECORD_NAME
    record.write_text(content)
    digests = file_digests.Digests()
    digests.keep_in(record)
    assert digests.entry(model, os.stat(model)) is None


def test_a_record_of_the_format_before_settled_records_is_no_record(tmp_path: Path, model: Path) -> None:
    """Format 1 said nothing of settling: its CRC-32s must be checked, so none is taken on trust."""
    record = tmp_path / file_digests.RECORD_NAME
    st = os.stat(model)
    ident = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    record.write_text(json.dumps({"format": 1, "files": {str(model): [ident, "ab" * 32, 7]}}))
    digests = file_digests.Digests()
    digests.keep_in(record)
    assert digests.entry(model, st) is None


def test_a_save_killed_midway_leaves_nothing_the_next_save_keeps(tmp_path: Path, model: Path) -> None:
    record = tmp_path / file_digests.RECORD_NAME
    dead = tmp_path / f".{file_digests.RECORD_NAME}.dead.tmp"  # a killed writer's: no lock held on it any more
    dead.write_text("{")
    digests = file_digests.Digests()
    digests.keep_in(record)
    digests.remember(model, os.stat(model), "ab" * 32, crc32=7)
    digests.save()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([record.name, model.name])


def _counting_reads(monkeypatch) -> list[str]:
    """The files Digests hashes from here on (hashlib.file_digest, as it reads them)."""
    read: list[str] = []
    real = hashlib.file_digest

    def counted(f, digest):
        read.append(f.name)
        return real(f, digest)

    monkeypatch.setattr(file_digests.hashlib, "file_digest", counted)
    return read


def test_a_tree_files_sha256_is_kept_across_runs_when_settled_and_never_given_to_scons(
        tmp_path: Path, monkeypatch) -> None:
    """What a package run hashes for the provenance (SCons's files, a toolchain's programs) is hashed once while the
    file keeps its stat; it is no node signature (a source tree's file may be a node, whose signature is SCons's)."""
    record = tmp_path / "build" / file_digests.RECORD_NAME
    record.parent.mkdir()
    tool = tmp_path / "tool.py"
    tool.write_bytes(b"print('a tool')\n")
    os.utime(tool, ns=(10**18, 10**18))  # changed long before it is looked at: settled (ctime is now, though)
    fresh = tmp_path / "fresh.py"
    fresh.write_bytes(b"print('just written')\n")  # its timestamp tick is not over: not settled
    first = file_digests.Digests()
    first.keep_in(record)
    monkeypatch.setattr(file_digests.timestamps, "settled", lambda st, looked_at: st.st_ino == tool.stat().st_ino)
    assert first.sha256(tool) == hashlib.sha256(tool.read_bytes()).hexdigest()
    assert first.sha256(fresh) == hashlib.sha256(fresh.read_bytes()).hexdigest()
    assert first.known(tool) is None and first.known(fresh) is None
    first.save()
    second = file_digests.Digests()
    second.keep_in(record)
    read = _counting_reads(monkeypatch)
    assert second.sha256(tool) == hashlib.sha256(b"print('a tool')\n").hexdigest() and read == []
    assert second.sha256(fresh) == hashlib.sha256(fresh.read_bytes()).hexdigest() and read == [str(fresh)]
    assert second.known(tool) is None
    tool.write_bytes(b"print('a changed tool')\n")  # another stat identity: hashed again
    assert second.sha256(tool) == hashlib.sha256(b"print('a changed tool')\n").hexdigest()
    assert read == [str(fresh), str(tool)]


def test_a_sources_imports_are_kept_by_its_sha256(tmp_path: Path) -> None:
    record = tmp_path / file_digests.RECORD_NAME
    first = file_digests.Digests()
    first.keep_in(record)
    assert first.imported_names("ab" * 32) is None
    first.remember_imports("ab" * 32, ["opencoti_build.errors"])
    first.save()
    second = file_digests.Digests()
    second.keep_in(record)
    assert second.imported_names("ab" * 32) == ["opencoti_build.errors"]
    assert second.imported_names("cd" * 32) is None
