"""The zip-append writer's zip64 records, field by field, at the sizes, offsets and counts that need them.

Real archives past 4 GiB or 65535 entries are built by tests/integration/test_zipappend.py (minutes of disk);
here the record writers are given those numbers directly, and each field is read back as APPNOTE 4.5 lays it
out (zipfile's own struct formats), at the limits and one below them.
"""
from __future__ import annotations

import struct
import zipfile

import pytest

from opencoti_build.formats import zipappend
from opencoti_build.formats.zipappend import Entry
from opencoti_build.formats.zipstore import CENTRAL, EOCD, EOCD64, LOCAL_HEADER, LOCATOR, U16_MAX, U32_MAX

GIB = 1 << 30
DATE, TIME = 0x5771, 0xB1AA
CRC = 0x1234ABCD


def pending(size: int, name: str = "model.gguf", mode: int = 0o644) -> zipappend.Pending:
    return zipappend.Pending(Entry.blob(name, b"", mode=mode), size, CRC)


def local(size: int, name: str = "model.gguf") -> tuple[tuple, bytes, bytes]:
    record = zipappend.local_header(pending(size, name), DATE, TIME)
    fields = LOCAL_HEADER.unpack_from(record)
    rest = record[LOCAL_HEADER.size:]
    name_len, extra_len = fields[zipfile._FH_FILENAME_LENGTH], fields[zipfile._FH_EXTRA_FIELD_LENGTH]
    assert len(rest) == name_len + extra_len
    return fields, rest[:name_len], rest[name_len:]


def central(size: int, offset: int, name: str = "model.gguf", mode: int = 0o644) -> tuple[tuple, bytes, bytes]:
    record = zipappend.central_record(pending(size, name, mode), offset, DATE, TIME)
    fields = CENTRAL.unpack_from(record)
    rest = record[CENTRAL.size:]
    name_len, extra_len = fields[zipfile._CD_FILENAME_LENGTH], fields[zipfile._CD_EXTRA_FIELD_LENGTH]
    assert len(rest) == name_len + extra_len and fields[zipfile._CD_COMMENT_LENGTH] == 0
    return fields, rest[:name_len], rest[name_len:]


def test_a_local_header_below_4_gib_is_plain() -> None:
    fields, name, extra = local(U32_MAX - 1)
    assert fields[zipfile._FH_SIGNATURE] == zipfile.stringFileHeader
    assert fields[zipfile._FH_EXTRACT_VERSION] == 20 and fields[zipfile._FH_EXTRACT_SYSTEM] == 0
    assert fields[zipfile._FH_GENERAL_PURPOSE_FLAG_BITS] == 0
    assert fields[zipfile._FH_COMPRESSION_METHOD] == zipfile.ZIP_STORED
    assert (fields[zipfile._FH_LAST_MOD_TIME], fields[zipfile._FH_LAST_MOD_DATE]) == (TIME, DATE)
    assert fields[zipfile._FH_CRC] == CRC
    assert fields[zipfile._FH_COMPRESSED_SIZE] == fields[zipfile._FH_UNCOMPRESSED_SIZE] == U32_MAX - 1
    assert (name, extra) == (b"model.gguf", b"")


@pytest.mark.parametrize("size", [U32_MAX, 5 * GIB + 3])
def test_a_local_header_from_4_gib_carries_both_sizes_in_its_zip64_extra(size: int) -> None:
    fields, name, extra = local(size)
    assert fields[zipfile._FH_EXTRACT_VERSION] == 45
    assert fields[zipfile._FH_COMPRESSED_SIZE] == fields[zipfile._FH_UNCOMPRESSED_SIZE] == U32_MAX
    assert extra == struct.pack("<HHQQ", 1, 16, size, size)
    assert name == b"model.gguf"


def test_a_non_ascii_name_sets_the_utf8_flag_in_both_records() -> None:
    fields, name, _ = local(10, "modèle.gguf")
    assert fields[zipfile._FH_GENERAL_PURPOSE_FLAG_BITS] == 0x800 and name == "modèle.gguf".encode()
    fields, name, _ = central(10, 0, "modèle.gguf")
    assert fields[zipfile._CD_FLAG_BITS] == 0x800 and name == "modèle.gguf".encode()


def test_a_central_record_below_the_limits_is_plain_and_unix() -> None:
    fields, name, extra = central(U32_MAX - 1, U32_MAX - 1, mode=0o755)
    assert fields[zipfile._CD_SIGNATURE] == zipfile.stringCentralDir
    assert (fields[zipfile._CD_CREATE_VERSION], fields[zipfile._CD_CREATE_SYSTEM]) == (20, 3)
    assert (fields[zipfile._CD_EXTRACT_VERSION], fields[zipfile._CD_EXTRACT_SYSTEM]) == (20, 0)
    assert fields[zipfile._CD_COMPRESS_TYPE] == zipfile.ZIP_STORED
    assert (fields[zipfile._CD_TIME], fields[zipfile._CD_DATE], fields[zipfile._CD_CRC]) == (TIME, DATE, CRC)
    assert fields[zipfile._CD_COMPRESSED_SIZE] == fields[zipfile._CD_UNCOMPRESSED_SIZE] == U32_MAX - 1
    assert fields[zipfile._CD_DISK_NUMBER_START] == 0 and fields[zipfile._CD_INTERNAL_FILE_ATTRIBUTES] == 0
    assert fields[zipfile._CD_EXTERNAL_FILE_ATTRIBUTES] == (0o100755 << 16)
    assert fields[zipfile._CD_LOCAL_HEADER_OFFSET] == U32_MAX - 1
    assert (name, extra) == (b"model.gguf", b"")


@pytest.mark.parametrize(("size", "offset", "wide"), [
    (5 * GIB, 7 * GIB, [5 * GIB, 5 * GIB, 7 * GIB]),  # sizes and offset, in APPNOTE's order
    (100, U32_MAX, [U32_MAX]),  # the offset alone, at the limit
    (U32_MAX, 100, [U32_MAX, U32_MAX]),  # the sizes alone, at the limit
])
def test_a_central_record_past_a_limit_moves_exactly_those_fields_to_its_zip64_extra(
        size: int, offset: int, wide: list[int]) -> None:
    fields, _, extra = central(size, offset)
    assert fields[zipfile._CD_CREATE_VERSION] == fields[zipfile._CD_EXTRACT_VERSION] == 45
    assert extra == struct.pack(f"<HH{len(wide)}Q", 1, 8 * len(wide), *wide)
    assert fields[zipfile._CD_COMPRESSED_SIZE] == fields[zipfile._CD_UNCOMPRESSED_SIZE] == min(size, U32_MAX)
    assert fields[zipfile._CD_LOCAL_HEADER_OFFSET] == min(offset, U32_MAX)


def test_end_records_below_the_limits_are_one_plain_record() -> None:
    out = zipappend.end_records(U16_MAX - 1, U32_MAX - 2, 1)
    assert len(out) == EOCD.size
    fields = EOCD.unpack(out)
    assert fields == (zipfile.stringEndArchive, 0, 0, U16_MAX - 1, U16_MAX - 1, 1, U32_MAX - 2, 0)


@pytest.mark.parametrize(("count", "cd_offset", "cd_size"), [
    (U16_MAX, 1000, 2000), (70000, 6 * GIB, 5_000_000), (3, U32_MAX, 100), (3, 100, U32_MAX),
])
def test_end_records_past_a_limit_add_zip64_ones_that_point_at_each_other(count: int, cd_offset: int,
                                                                        cd_size: int) -> None:
    out = zipappend.end_records(count, cd_offset, cd_size)
    assert len(out) == EOCD64.size + LOCATOR.size + EOCD.size
    eocd64 = EOCD64.unpack_from(out)
    assert eocd64 == (zipfile.stringEndArchive64, EOCD64.size - 12, 3 << 8 | 45, 45, 0, 0, count, count,
                      cd_size, cd_offset)
    locator = LOCATOR.unpack_from(out, EOCD64.size)
    assert locator == (zipfile.stringEndArchive64Locator, 0, cd_offset + cd_size, 1)  # the zip64 record follows the CD
    eocd = EOCD.unpack_from(out, EOCD64.size + LOCATOR.size)
    assert eocd == (zipfile.stringEndArchive, 0, 0, min(count, U16_MAX), min(count, U16_MAX),
                    min(cd_size, U32_MAX), min(cd_offset, U32_MAX), 0)
