"""opencoti_build.formats.zipstore on zip stores laid out byte by byte: zip64 records, comments, damage.

The writer's tests (test_zipappend.py) read back what it writes; the forms it writes only past 4 GiB or
65535 entries, and the ones it never writes, are built here in a few hundred bytes, and Python's zipfile
reads each one too, so the layouts are ones a real reader accepts.
"""
from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from opencoti_build.formats import zipstore
from opencoti_build.formats.zipstore import ZipStoreError

U32 = 0xFFFFFFFF
EXE = b"\x7fELF" + bytes(1000)  # what precedes the store in a llamafile: offsets are absolute
DATA = b"the entry's bytes"


def store(*, zip64: bool = False, comment: bytes = b"", disk: int = 0, local_sig: bytes = b"PK\x03\x04",
          comment_len: int | None = None) -> bytes:
    """An executable with a one-entry zip store ("a/b.txt" holding DATA), zip64 where asked; ``disk`` is the
    end record's number of this disk, ``comment_len`` the comment length it states."""
    name, size, crc = b"a/b.txt", len(DATA), zlib.crc32(DATA)
    offset = len(EXE)
    size32 = U32 if zip64 else size
    local_extra = struct.pack("<HHQQ", 1, 16, size, size) if zip64 else b""
    local = local_sig + struct.pack("<HHHHHIIIHH", 45, 0, 0, 0, 0, crc, size32, size32, len(name),
                                    len(local_extra)) + name + local_extra + DATA
    # the zip64 extra holds the saturated fields in this order: size, compressed size, offset
    central_extra = struct.pack("<HHQQQ", 1, 24, size, size, offset) if zip64 else b""
    central = b"PK\x01\x02" + struct.pack(
        "<HHHHHHIIIHHHHHII", 45 | 3 << 8, 45, 0, 0, 0, 0, crc, size32, size32, len(name), len(central_extra), 0, 0, 0,
        0o100644 << 16, U32 if zip64 else offset) + name + central_extra
    cd_offset = offset + len(local)
    end = b""
    if zip64:
        eocd64_offset = cd_offset + len(central)
        end += b"PK\x06\x06" + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, 1, 1, len(central), cd_offset)
        end += b"PK\x06\x07" + struct.pack("<IQI", 0, eocd64_offset, 1)
    count = 0xFFFF if zip64 else 1
    end += b"PK\x05\x06" + struct.pack("<HHHHIIH", disk, 0, count, count, U32 if zip64 else len(central),
                                       U32 if zip64 else cd_offset,
                                       len(comment) if comment_len is None else comment_len) + comment
    return EXE + local + central + end


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "exe"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("zip64", [False, True])
def test_records_and_data_offsets_are_where_zipfile_finds_them(tmp_path: Path, zip64: bool) -> None:
    path = write(tmp_path, store(zip64=zip64))
    with zipfile.ZipFile(path) as archive:  # a layout a real reader takes
        assert archive.read("a/b.txt") == DATA
    found = zipstore.read_zip_store(path)
    assert found.file_size == path.stat().st_size
    (record,) = found.records
    assert (record.name, record.method, record.crc32) == ("a/b.txt", zipfile.ZIP_STORED, zlib.crc32(DATA))
    assert (record.size, record.compressed_size, record.header_offset) == (len(DATA), len(DATA), len(EXE))
    assert path.read_bytes()[found.cd_offset:].startswith(record.raw)
    with open(path, "rb") as f:
        start = zipstore.data_offset(f, path, record, found.cd_offset)
    assert path.read_bytes()[start:start + len(DATA)] == DATA


def test_an_end_record_signature_inside_the_comment_is_not_taken_for_the_end_record(tmp_path: Path) -> None:
    comment = b"PK\x05\x06 looks like an end record, but its comment would not reach the end of the file"
    path = write(tmp_path, store(comment=comment))  # (Python's zipfile takes the comment's one and fails)
    assert [r.name for r in zipstore.read_zip_store(path).records] == ["a/b.txt"]


@pytest.mark.parametrize("data, complaint", [
    (store(disk=1), "multi-disk archives are not supported"),
    (store(comment_len=5), "no zip store"),  # the comment length runs past the end of the file
    (store(zip64=True)[:-22 - 20 - 56] + b"PK\x06\x06".ljust(56, b"\0") + store(zip64=True)[-22 - 20:],
     "not absolute"),
], ids=["this-disk-1", "comment-past-the-end", "zip64-end-record-zeroed"])
def test_damaged_end_records_are_refused_in_one_line(tmp_path: Path, data: bytes, complaint: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(ZipStoreError, match=complaint) as caught:
        zipstore.read_zip_store(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


def test_a_zip64_locator_pointing_at_no_end_record_is_refused(tmp_path: Path) -> None:
    data = bytearray(store(zip64=True))
    locator = len(data) - 22 - 20
    struct.pack_into("<Q", data, locator + 8, 3)  # the zip64 end record's offset: 3, inside the executable
    with pytest.raises(ZipStoreError, match="zip64 locator points at no zip64 end record"):
        zipstore.read_zip_store(write(tmp_path, bytes(data)))


def test_a_saturated_field_without_its_zip64_extra_is_refused(tmp_path: Path) -> None:
    data = store(zip64=True)
    # the central record's zip64 extra renamed to another tag: the saturated sizes have no value
    cd = data.index(b"PK\x01\x02")
    extra = cd + 46 + len(b"a/b.txt")
    damaged = data[:extra] + b"\x99\x99" + data[extra + 2:]
    with pytest.raises(ZipStoreError, match="record 0 lacks its zip64 extra field"):
        zipstore.read_zip_store(write(tmp_path, damaged))


def test_an_entry_without_its_local_header_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, store(local_sig=b"PK\x03\x05"))
    found = zipstore.read_zip_store(path)
    with open(path, "rb") as f, pytest.raises(ZipStoreError, match=r"entry 'a/b.txt' has no local header at 1004"):
        zipstore.data_offset(f, path, found.records[0], found.cd_offset)


def test_an_entry_running_into_the_central_directory_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, store())
    found = zipstore.read_zip_store(path)
    with open(path, "rb") as f, pytest.raises(ZipStoreError, match="entry 'a/b.txt' runs past the central directory"):
        zipstore.data_offset(f, path, found.records[0], found.cd_offset - 1)
    with open(path, "rb") as f:  # the data ending exactly where the directory starts is fine
        assert zipstore.data_offset(f, path, found.records[0], found.cd_offset) == found.cd_offset - len(DATA)
