"""opencoti_build.formats.spirv: header parsing and finding modules embedded in arbitrary bytes."""
from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from opencoti_build.formats import spirv

OP_NOP, OP_CAPABILITY, OP_FUNCTION_END = 0, 17, 56


def module(bound: int = 8, version: int = 0x00010500, extra_words: int = 0) -> bytes:
    """A minimal well-formed stream: header, OpCapability Shader, OpNops, OpFunctionEnd."""
    words = [spirv.MAGIC, version, 0x000D000B, bound, 0, (2 << 16) | OP_CAPABILITY, 1]
    words += [(1 << 16) | OP_NOP] * extra_words
    words += [(1 << 16) | OP_FUNCTION_END]
    return struct.pack(f"<{len(words)}I", *words)


def test_header_fields() -> None:
    header = spirv.parse_header(module(bound=42))
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
    data = module()
    words = list(struct.unpack(f"<{len(data) // 4}I", data))
    mutate(words)
    assert spirv.parse_header(struct.pack(f"<{len(words)}I", *words)) is None


def test_header_too_short() -> None:
    assert spirv.parse_header(module()[:16]) is None


def test_find_modules_at_any_offset_with_exact_lengths() -> None:
    first, second = module(extra_words=3), module(bound=9)
    data = b"\x01" * 7 + first + b"\0" * 5 + second + b"junk" + b"\xff" * 12
    found = spirv.find_modules(data)
    assert [(m.offset, m.length) for m in found] == [(7, len(first)), (7 + len(first) + 5, len(second))]
    assert all(m.length % 4 == 0 for m in found)


def test_back_to_back_modules_are_split() -> None:
    one = module()
    found = spirv.find_modules(one + one)
    assert [(m.offset, m.length) for m in found] == [(0, len(one)), (len(one), len(one))]


def test_truncated_module_is_not_reported() -> None:
    data = module(extra_words=4)
    assert spirv.find_modules(data[:-4]) == []


def test_magic_in_plain_data_is_not_a_module() -> None:
    assert spirv.find_modules(spirv.MAGIC_BYTES + b"\0" * 64) == []


@pytest.mark.skipif(shutil.which("glslc") is None, reason="glslc not installed")
def test_real_glslc_output(tmp_path: Path) -> None:
    comp = tmp_path / "k.comp"
    comp.write_text("#version 450\nlayout(local_size_x = 8) in;\n"
                    "layout(binding = 0) buffer B { float b[]; };\n"
                    "void main() { b[gl_GlobalInvocationID.x] *= 2.0; }\n")
    spv = tmp_path / "k.spv"
    subprocess.run(["glslc", "-fshader-stage=compute", "--target-env=vulkan1.2", "-O", str(comp), "-o", str(spv)],
                   check=True)
    data = spv.read_bytes()
    found = spirv.find_modules(b"\0\0\0" + data + b"\0" * 16)
    assert len(found) == 1
    assert (found[0].offset, found[0].length) == (3, len(data))
    assert found[0].header.version == "1.5"  # vulkan1.2 -> SPIR-V 1.5
    assert found[0].header.generator >> 16 == 13  # shaderc


def test_c_arrays_written_are_read_back_from_the_linked_dso(tmp_path: Path) -> None:
    modules = {"b_shader": module(extra_words=5), "a_shader": module(bound=3), "skipped": b"\x01\x02\x03\x04"}
    (tmp_path / "shaders.hpp").write_text(spirv.c_array_header(list(modules)))
    (tmp_path / "shaders.cpp").write_text(spirv.c_array_source(modules, "shaders.hpp"))
    dso = tmp_path / "ggml-shaders.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(dso), str(tmp_path / "shaders.cpp")], check=True)
    # the reader takes exactly the arrays the writer defined that hold one well-formed module each
    assert spirv.embedded_shaders(str(dso)) == ["a_shader", "b_shader"]
    source = (tmp_path / "shaders.cpp").read_text()
    assert source.index("a_shader_data") < source.index("b_shader_data")  # sorted: bytes depend on names only
    assert f"unsigned int b_shader_len = {len(modules['b_shader'])};" in source


def test_only_c_identifiers_can_name_arrays() -> None:
    assert spirv.is_c_identifier("add_f32") and spirv.is_c_identifier("_x9")
    assert not any(spirv.is_c_identifier(n) for n in ("9lives", "add-f32", "a.b", ""))
