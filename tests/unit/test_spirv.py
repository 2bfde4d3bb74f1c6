"""opencoti_build.formats.spirv: header parsing and finding modules embedded in arbitrary bytes.

In-process checks of the core here; the real builds and tools: tests/integration/test_spirv.py.
"""
from __future__ import annotations

import struct

import pytest

from opencoti_build.formats import spirv

from samples import spirv_module


def test_header_fields() -> None:
    header = spirv.parse_header(spirv_module(bound=42))
    assert header == spirv.SpirvHeader(major=1, minor=5, generator=0x000D000B, bound=42)
    assert header.version == "1.5"
    assert header.generator_name == "shaderc over glslang #13 v11"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda w: w.__setitem__(0, 0x03022307),  # byte-swapped magic
        lambda w: w.__setitem__(1, 0x00020000),  # SPIR-V 2.0 does not exist
        lambda w: w.__setitem__(1, 0x00010501),  # low byte of the version must be 0
        lambda w: w.__setitem__(3, 0),  # bound 0
        lambda w: w.__setitem__(4, 7),  # reserved word not 0
    ],
)
def test_header_rejects(mutate) -> None:
    data = spirv_module()
    words = list(struct.unpack(f"<{len(data) // 4}I", data))
    mutate(words)
    assert spirv.parse_header(struct.pack(f"<{len(words)}I", *words)) is None


def test_header_too_short() -> None:
    assert spirv.parse_header(spirv_module()[:16]) is None


def test_find_modules_at_any_offset_with_exact_lengths() -> None:
    first, second = spirv_module(extra_words=3), spirv_module(bound=9)
    data = b"\x01" * 7 + first + b"\0" * 5 + second + b"junk" + b"\xff" * 12
    found = spirv.find_modules(data)
    assert [(m.offset, m.length) for m in found] == [(7, len(first)), (7 + len(first) + 5, len(second))]
    assert all(m.length % 4 == 0 for m in found)


def test_back_to_back_modules_are_split() -> None:
    one = spirv_module()
    found = spirv.find_modules(one + one)
    assert [(m.offset, m.length) for m in found] == [(0, len(one)), (len(one), len(one))]


def test_truncated_module_is_not_reported() -> None:
    data = spirv_module(extra_words=4)
    assert spirv.find_modules(data[:-4]) == []


def test_magic_in_plain_data_is_not_a_module() -> None:
    assert spirv.find_modules(spirv.MAGIC_BYTES + b"\0" * 64) == []


def test_only_c_identifiers_can_name_arrays() -> None:
    assert spirv.is_c_identifier("add_f32") and spirv.is_c_identifier("_x9")
    assert not any(spirv.is_c_identifier(n) for n in ("9lives", "add-f32", "a.b", ""))
