"""opencoti_build.formats.hipbundle on plain bundles (clang-offload-bundler's: 24-byte magic, u64 count, then per entry
u64 offset, size, id length and the id, one bundle per TU on 4096-byte boundaries) and on LLVM's CCOB header.

Real hipcc output is checked by tests/integration/test_hip.py; here each layout is built byte by byte,
including the compressed (CCOB) forms that this machine's clang 15 cannot produce.
"""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
import zstandard

from opencoti_build.formats import hipbundle

HOST = "host-x86_64-unknown-linux"


def plain_bundle(ids: list[str], code: bytes = b"\x7fELF-code-object") -> bytes:
    """A bundle whose entries (the host one empty) all carry ``code``, as clang-offload-bundler lays it out."""
    header_len = len(hipbundle.BUNDLE_MAGIC) + 8 + sum(24 + len(i) for i in ids)
    out = bytearray(hipbundle.BUNDLE_MAGIC + struct.pack("<Q", len(ids)))
    payloads = bytearray()
    for entry_id in ids:
        size = 0 if entry_id.startswith("host-") else len(code)
        out += struct.pack("<QQQ", header_len + len(payloads), size, len(entry_id)) + entry_id.encode()
        payloads += code[:size]
    return bytes(out + payloads)


def gfx(target: str) -> str:
    return f"hipv4-amdgcn-amd-amdhsa--{target}"


def ccob(version: int, method: int, plain: bytes) -> bytes:
    payload = zlib.compress(plain) if method == 0 else zstandard.ZstdCompressor().compress(plain)
    fmt, has_total = hipbundle.COMPRESSED_HEADERS[version]
    header_len = 8 + struct.calcsize(fmt)
    sizes = (header_len + len(payload), len(plain)) if has_total else (len(plain),)
    return b"CCOB" + struct.pack("<HH", version, method) + struct.pack(fmt, *sizes, 0x1234) + payload


def pad(data: bytes, boundary: int = 4096) -> bytes:
    return data + b"\0" * (-len(data) % boundary)


def test_one_plain_bundle() -> None:
    data = plain_bundle([HOST, gfx("gfx1030"), gfx("gfx906")])
    [bundle] = hipbundle.parse_bundles(data)
    assert bundle.compression is None
    assert bundle.length == len(data)
    assert bundle.targets == ["gfx1030", "gfx906"]
    assert [e.kind for e in bundle.entries] == ["host", "hipv4", "hipv4"]


def test_one_bundle_per_translation_unit_on_page_boundaries(tmp_path: Path) -> None:
    first = plain_bundle([HOST, gfx("gfx906")])
    second = plain_bundle([HOST, gfx("gfx906"), gfx("gfx1030")])
    section = pad(first) + second
    bundles = hipbundle.parse_bundles(section)
    assert [b.offset for b in bundles] == [0, 4096]
    raw = tmp_path / "fatbin.bin"  # not ELF: read as the raw section
    raw.write_bytes(section)
    assert hipbundle.bundle_targets(raw) == ["gfx1030", "gfx906"]


def test_target_id_keeps_features() -> None:
    entry = hipbundle.BundleEntry(id=gfx("gfx90a:xnack+"), offset=0, size=1)
    assert entry.target == "gfx90a:xnack+"
    assert hipbundle.BundleEntry(id=HOST, offset=0, size=0).target is None


@pytest.mark.parametrize(("version", "method", "name"), [(1, 1, "zstd"), (2, 0, "zlib"), (2, 1, "zstd"), (3, 1, "zstd")])
def test_compressed_bundles_are_reported_and_decoded(version: int, method: int, name: str) -> None:
    plain = plain_bundle([HOST, gfx("gfx1100"), gfx("gfx942")])
    section = pad(ccob(version, method, plain)) + plain_bundle([HOST, gfx("gfx1030")])
    bundles = hipbundle.parse_bundles(section)
    assert [b.compression for b in bundles] == [name, None]
    assert bundles[0].targets == ["gfx1100", "gfx942"]
    assert bundles[1].offset == 4096
    assert bundles[1].targets == ["gfx1030"]


def test_unknown_compression_method_is_named() -> None:
    data = bytearray(ccob(2, 1, plain_bundle([HOST, gfx("gfx906")])))
    data[6:8] = struct.pack("<H", 7)
    with pytest.raises(hipbundle.HipBundleError, match="unknown compression method 7"):
        hipbundle.parse_bundles(bytes(data))


def test_corrupt_compressed_payload() -> None:
    data = bytearray(ccob(3, 1, plain_bundle([HOST, gfx("gfx906")])))
    data[40:48] = b"\xff" * 8
    with pytest.raises(hipbundle.HipBundleError, match="zstd data does not decode"):
        hipbundle.parse_bundles(bytes(data))


def test_entry_past_the_end() -> None:
    data = plain_bundle([HOST, gfx("gfx906")])
    with pytest.raises(hipbundle.HipBundleError, match="run past the end"):
        hipbundle.parse_bundles(data[:-4])


def test_elf_without_section_is_a_clear_error() -> None:
    with pytest.raises(hipbundle.HipBundleError, match=r"no \.hip_fatbin section"):
        hipbundle.bundle_targets("/bin/true")


def test_file_without_bundle(tmp_path: Path) -> None:
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"\0" * 64)
    with pytest.raises(hipbundle.HipBundleError, match="holds no clang offload bundle"):
        hipbundle.bundle_targets(empty)
