"""SPIR-V modules: header parsing, finding the modules embedded in a DSO's bytes, and writing them as C arrays.

A module is little-endian 32-bit words: magic ``0x07230203``, version (``0x00MMmm00``), generator
(tool id << 16 | tool version), id bound, a reserved 0, then instructions whose first word holds
``word_count << 16 | opcode``. ggml-vulkan embeds each shader as an ``unsigned char`` array, so a
module inside a DSO has no length field of its own: it ends after its last ``OpFunctionEnd`` (every
shader module ends with its function definitions), found by walking the instruction stream.

The writer (:func:`c_array_source`, :func:`c_array_header`) and the reader of what it wrote
(:func:`embedded_shaders`) agree on the names: ``unsigned char <name>_data[]``, ``unsigned int <name>_len``,
as vulkan-shaders-gen writes them.
"""
from __future__ import annotations

import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAGIC = 0x07230203
MAGIC_BYTES = struct.pack("<I", MAGIC)
HEADER_WORDS = 5
OP_FUNCTION_END = 56
# Highest opcode in the SPIR-V 1.6 grammar with its vendor extensions (INTEL ranges end below 6500).
MAX_OPCODE = 6500
# Highest SPIR-V version this parser accepts (1.6, the newest).
MAX_MINOR = 6

BYTES_PER_LINE = 16
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Generator tool ids (Khronos registry, spir-v.xml) of the front ends that build ggml's shaders.
GENERATORS: dict[int, str] = {
    8: "glslang",
    13: "shaderc over glslang",  # glslc
}


@dataclass(frozen=True)
class SpirvHeader:
    """The five header words of a module."""

    major: int
    minor: int
    generator: int
    bound: int

    @property
    def version(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def generator_name(self) -> str:
        tool = self.generator >> 16
        return f"{GENERATORS.get(tool, 'tool')} #{tool} v{self.generator & 0xFFFF}"


@dataclass(frozen=True)
class SpirvModule:
    """A module found at ``offset`` of some bytes, ``length`` bytes long (a multiple of 4)."""

    offset: int
    length: int
    header: SpirvHeader


def parse_header(data: bytes, offset: int = 0) -> SpirvHeader | None:
    """The header at ``offset``, or None when the bytes there are not a plausible SPIR-V header."""
    if offset < 0 or len(data) - offset < HEADER_WORDS * 4:
        return None
    magic, version, generator, bound, reserved = struct.unpack_from("<5I", data, offset)
    major, minor = (version >> 16) & 0xFF, (version >> 8) & 0xFF
    if magic != MAGIC or version & 0xFF0000FF or major != 1 or minor > MAX_MINOR:
        return None
    if bound == 0 or reserved != 0:
        return None
    return SpirvHeader(major=major, minor=minor, generator=generator, bound=bound)


def module_length(data: bytes, offset: int) -> int:
    """Bytes from ``offset`` to the end of the module's last ``OpFunctionEnd``; 0 if it has none.

    The walk stops at the first word that cannot start an instruction (zero word count, an opcode
    past the grammar, an instruction running past the data, or another module's magic).
    """
    pos = offset + HEADER_WORDS * 4
    end = 0
    while pos + 4 <= len(data):
        word = struct.unpack_from("<I", data, pos)[0]
        count, opcode = word >> 16, word & 0xFFFF
        if word == MAGIC or count == 0 or opcode > MAX_OPCODE or pos + count * 4 > len(data):
            break
        pos += count * 4
        if opcode == OP_FUNCTION_END:
            end = pos
    return end - offset if end else 0


def find_modules(data: bytes) -> list[SpirvModule]:
    """Every complete SPIR-V module in ``data`` (at any byte offset), in order of appearance."""
    found: list[SpirvModule] = []
    pos = data.find(MAGIC_BYTES)
    while pos >= 0:
        header = parse_header(data, pos)
        length = module_length(data, pos) if header else 0
        if header and length:
            found.append(SpirvModule(offset=pos, length=length, header=header))
            pos = data.find(MAGIC_BYTES, pos + length)
        else:
            pos = data.find(MAGIC_BYTES, pos + 1)
    return found


def embedded_shaders(path: str) -> list[str]:
    """Names ``N`` of the shaders a DSO embeds as ``N_data``/``N_len`` symbols (as the glslc tool
    writes them) whose bytes are one well-formed SPIR-V module of exactly ``N_len`` bytes."""
    import lief  # only needed on a linked DSO

    from opencoti_build.formats.lief_names import lief_str

    binary = lief.ELF.parse(path)
    if binary is None:
        raise ValueError(f"{path}: not an ELF file")
    symbols = {lief_str(s.name): s for s in binary.symbols if s.name and s.value}
    names = []
    for name, data_symbol in symbols.items():
        if not name.endswith("_data") or f"{name[:-5]}_len" not in symbols:
            continue
        length_bytes = bytes(binary.get_content_from_virtual_address(symbols[f"{name[:-5]}_len"].value, 4))
        (length,) = struct.unpack("<I", length_bytes)
        blob = bytes(binary.get_content_from_virtual_address(data_symbol.value, length))
        if len(blob) == length and parse_header(blob) and module_length(blob, 0) == length:
            names.append(name[:-5])
    return sorted(names)


def is_c_identifier(name: str) -> bool:
    """Whether ``name`` can name a module's ``<name>_data``/``<name>_len`` arrays."""
    return bool(_IDENTIFIER.match(name))


def c_array_source(modules: Mapping[str, bytes], header: str) -> str:
    """The C++ defining every module's ``<name>_data``/``<name>_len``, sorted by name (the bytes depend on nothing else)."""
    lines = [f"// Generated by the opencoti glslc tool from {len(modules)} SPIR-V modules. Do not edit.",
             f'#include "{header}"', ""]
    for name in sorted(modules):
        data = modules[name]
        lines.append(f"unsigned char {name}_data[{len(data)}] = {{")
        for start in range(0, len(data), BYTES_PER_LINE):
            lines.append("    " + ",".join(f"0x{b:02x}" for b in data[start:start + BYTES_PER_LINE]) + ",")
        lines.append("};")
        lines.append(f"unsigned int {name}_len = {len(data)};")
    return "\n".join(lines) + "\n"


def c_array_header(names: Sequence[str]) -> str:
    """The header declaring what :func:`c_array_source` defines."""
    lines = ["// Generated by the opencoti glslc tool. Do not edit.", "#pragma once", ""]
    for name in sorted(names):
        lines.append(f"extern unsigned char {name}_data[];")
        lines.append(f"extern unsigned int {name}_len;")
    return "\n".join(lines) + "\n"
