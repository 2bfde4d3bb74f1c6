"""The verified cache's entry format and its path-neutral key text (opencoti_build.cache.cache_entry)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from opencoti_build.cache import cache_entry


def test_an_entry_restores_its_bytes_and_refuses_any_change(tmp_path: Path) -> None:
    source = tmp_path / "x.o"
    source.write_bytes(bytes(range(256)) * 40)
    entry = tmp_path / "entry"
    cache_entry.write_entry(source, entry)
    cache_entry.read_entry(entry, tmp_path / "back.o")
    assert (tmp_path / "back.o").read_bytes() == source.read_bytes()
    assert cache_entry.content_signature(entry, "sha256") == hashlib.sha256(source.read_bytes()).hexdigest()
    good = entry.read_bytes()
    for bad in (good[:100] + bytes([good[100] ^ 1]) + good[101:], good[:-1], good[:10], b""):
        entry.write_bytes(bad)
        with pytest.raises(cache_entry.CorruptEntry):
            cache_entry.read_entry(entry, tmp_path / "out.o")
        assert not (tmp_path / "out.o").exists()  # a refused restore leaves no file behind


def test_a_flipped_bit_anywhere_in_an_unsigned_entrys_trailer_is_refused(tmp_path: Path) -> None:
    """The signature slot too, which nothing verifies in a private tier (a soak seed once flipped a bit there)."""
    source = tmp_path / "x.o"
    source.write_bytes(b"object bytes" * 100)
    entry = tmp_path / "entry"
    cache_entry.write_entry(source, entry)
    good = entry.read_bytes()
    for at in range(len(good) - cache_entry._TRAILER.size, len(good)):
        entry.write_bytes(good[:at] + bytes([good[at] ^ 0x10]) + good[at + 1:])
        with pytest.raises(cache_entry.CorruptEntry):
            cache_entry.read_entry(entry, tmp_path / "out.o")


def test_a_relative_root_glued_to_an_include_option_is_neutralised_and_a_define_value_is_not() -> None:
    roots = cache_entry.path_roots([("SRC", "/w/main/tests/fx")], "/w/main")
    assert cache_entry.neutral(b"glslc -Itests/fx/a -L tests/fx/lib -DM=tests/fx -o x tests/fx/b.comp", roots) == (
        b"glslc -I@SRC@/a -L @SRC@/lib -DM=tests/fx -o x @SRC@/b.comp")


def test_key_text_neutralises_whole_paths_only() -> None:
    roots = cache_entry.path_roots([("BUILD", "/w/main/build"), ("SRC", "/w/main/tests/fx"), ("ROOT", "/w/main")],
                                   "/w/main")
    text = (b"gcc -DGGML_BUILD=1 -iquote /w/main/tests/fx/a -o build/o/x.o /w/main2/y "
            b"-ffile-prefix-map=/w/main/build=build")
    assert cache_entry.neutral(text, roots) == (
        b"gcc -DGGML_BUILD=1 -iquote @SRC@/a -o @BUILD@/o/x.o /w/main2/y -ffile-prefix-map=@BUILD@=build")


BIG = bytes(range(251)) * ((5 << 20) // 251)  # over four copy chunks, not a multiple of one
# magic, length, sha256, key, signing key id, signature length, signature
TRAILER = len(cache_entry.MAGIC) + 8 + 32 + cache_entry.KEY_BYTES + cache_entry.KEYID_BYTES + 1 + cache_entry.SIGNATURE_BYTES
AFTER_KEY = cache_entry.KEYID_BYTES + 1 + cache_entry.SIGNATURE_BYTES  # what follows the key field


def rekeyed(blob: bytes, key: str) -> bytes:
    """``blob`` with the key field of its trailer (wherever the blob ends) made ``key``."""
    at = len(blob) - AFTER_KEY - cache_entry.KEY_BYTES
    return blob[:at] + key.encode().ljust(cache_entry.KEY_BYTES, b"\0") + blob[len(blob) - AFTER_KEY:]


def entry_of(tmp_path: Path, data: bytes, mode: int = 0o644) -> Path:
    source = tmp_path / "source.o"
    source.write_bytes(data)
    source.chmod(mode)
    entry = tmp_path / "entry"
    cache_entry.write_entry(source, entry)
    return entry


@pytest.mark.parametrize("data", [b"", b"x", BIG], ids=["empty", "one-byte", "five-mib"])
def test_every_size_round_trips_through_a_file_entry_and_the_sealed_form(tmp_path: Path, data: bytes) -> None:
    entry = entry_of(tmp_path, data)
    assert entry.read_bytes() == cache_entry.seal(data, "entry")  # the file tier and the remote tier store the same
    assert entry.stat().st_size == len(data) + TRAILER
    cache_entry.read_entry(entry, tmp_path / "deep" / "er" / "back.o")  # the target's directories are made
    assert (tmp_path / "deep" / "er" / "back.o").read_bytes() == data
    assert cache_entry.unseal(cache_entry.seal(data, "n"), "n") == data
    assert cache_entry.content_signature(entry, "sha256") == hashlib.sha256(data).hexdigest()
    assert cache_entry.content_signature(entry, "md5") == hashlib.md5(data).hexdigest()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_a_changed_byte_past_the_first_chunk_is_caught(tmp_path: Path) -> None:
    entry = entry_of(tmp_path, BIG)
    data = bytearray(entry.read_bytes())
    data[len(BIG) - 1] ^= 0x40  # the last content byte: only a digest over every chunk sees it
    entry.write_bytes(bytes(data))
    with pytest.raises(cache_entry.CorruptEntry, match=f"^{entry}: content does not match its SHA-256$"):
        cache_entry.read_entry(entry, tmp_path / "out.o")
    assert not (tmp_path / "out.o").exists()
    with pytest.raises(cache_entry.CorruptEntry, match="^entry: content does not match its SHA-256$"):
        cache_entry.unseal(bytes(data), "entry")


def test_the_trailer_is_checked_for_its_magic_and_length(tmp_path: Path) -> None:
    good = cache_entry.seal(b"0123456789", "k")
    trailer = len(good) - 10
    cases = {
        "short": (good[: trailer - 1], "is shorter than its trailer"),
        "magic": (good[:10] + b"X" + good[11:], "has no valid trailer (truncated or not written by this build)"),
        "length": (b"!" + good, "has no valid trailer (truncated or not written by this build)"),
        "cut": (good[1:], "has no valid trailer (truncated or not written by this build)"),
    }
    for name, (blob, message) in cases.items():
        entry = tmp_path / name
        blob = rekeyed(blob, name)
        entry.write_bytes(blob)
        with pytest.raises(cache_entry.CorruptEntry, match=f"^{entry} {message.replace('(', '.').replace(')', '.')}$"):
            cache_entry.read_entry(entry, tmp_path / "out.o")
        with pytest.raises(cache_entry.CorruptEntry, match=f"^{entry} "):
            cache_entry.content_signature(entry, "sha256")
        with pytest.raises(cache_entry.CorruptEntry, match=f"^{name} {message.replace('(', '.').replace(')', '.')}$"):
            cache_entry.unseal(blob, name)
    assert cache_entry.unseal(cache_entry.seal(b"", "empty"), "empty") == b""  # a trailer alone is a valid empty entry


def test_modes_an_entry_keeps_and_a_restore_makes_writable(tmp_path: Path) -> None:
    entry = entry_of(tmp_path, b"#!/bin/sh\n", mode=0o555)
    assert entry.stat().st_mode & 0o777 == 0o555
    cache_entry.read_entry(entry, tmp_path / "tool")
    assert (tmp_path / "tool").stat().st_mode & 0o777 == 0o755  # the owner can write the target again
    cache_entry.store_sealed(cache_entry.seal(b"abc", "hit"), tmp_path / "remote" / "hit", 0o100751)
    assert (tmp_path / "remote" / "hit").read_bytes() == cache_entry.seal(b"abc", "hit")
    assert (tmp_path / "remote" / "hit").stat().st_mode & 0o7777 == 0o751
    assert [p.name for p in (tmp_path / "remote").iterdir()] == ["hit"]  # no temporary left
    cache_entry.restore_bytes(b"abc", tmp_path / "restored" / "x.o", 0o100444)
    assert (tmp_path / "restored" / "x.o").read_bytes() == b"abc"
    assert (tmp_path / "restored" / "x.o").stat().st_mode & 0o7777 == 0o644


def test_a_failed_write_leaves_no_temporary_and_a_failed_restore_no_target(tmp_path: Path, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")

    (tmp_path / "cache").mkdir()
    source = tmp_path / "source.o"
    source.write_bytes(b"data")
    monkeypatch.setattr(cache_entry.os, "replace", refuse)
    with pytest.raises(OSError):
        cache_entry.write_entry(source, tmp_path / "cache" / "entry")
    with pytest.raises(OSError):
        cache_entry.store_sealed(cache_entry.seal(b"data", "sealed"), tmp_path / "cache" / "sealed", 0o644)
    assert list((tmp_path / "cache").iterdir()) == []
    monkeypatch.setattr(cache_entry.os, "chmod", refuse)
    with pytest.raises(OSError):
        cache_entry.restore_bytes(b"data", tmp_path / "target.o", 0o644)
    assert not (tmp_path / "target.o").exists()


def test_path_roots_skip_unset_roots_and_add_project_relative_forms_longest_first() -> None:
    roots = cache_entry.path_roots([("SRC", "/w/main/tests/fx/"), ("UNSET", None), ("EMPTY", ""),
                                    ("OUTSIDE", "/elsewhere/b"), ("ROOT", "/w/main"), ("UP", "/w/main/../main/o")],
                                   "/w/main")
    assert roots == [
        (b"/w/main/tests/fx", b"@SRC@"), (b"/elsewhere/b", b"@OUTSIDE@"), (b"/w/main/o", b"@UP@"),
        (b"tests/fx", b"@SRC@"), (b"/w/main", b"@ROOT@"), (b"o", b"@UP@"),
    ]


def test_an_entry_is_bound_to_its_key_so_a_swapped_entry_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a1").write_bytes(b"object a")
    (tmp_path / "b2").write_bytes(b"object b, longer")
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in ("a1", "b2"):
        cache_entry.write_entry(tmp_path / name, cache / f"key{name}")
    a, b = (cache / "keya1").read_bytes(), (cache / "keyb2").read_bytes()
    (cache / "keya1").write_bytes(b)  # each whole and self-consistent, under the other's key
    (cache / "keyb2").write_bytes(a)
    for entry, other in (("keya1", "keyb2"), ("keyb2", "keya1")):
        with pytest.raises(cache_entry.CorruptEntry, match=f"^{cache / entry} holds the entry stored under key "
                                                           f"{other}… .swapped or copied over.$"):
            cache_entry.read_entry(cache / entry, tmp_path / "out.o")
        assert not (tmp_path / "out.o").exists()
        with pytest.raises(cache_entry.CorruptEntry, match="holds the entry stored under key"):
            cache_entry.content_signature(cache / entry, "sha256")
    with pytest.raises(cache_entry.CorruptEntry, match="^k2 holds the entry stored under key k1"):
        cache_entry.unseal(cache_entry.seal(b"x", "k1"), "k2")
    with pytest.raises(ValueError, match="longer than 64"):
        cache_entry.seal(b"x", "f" * 65)


@pytest.mark.parametrize("version", [1, 2])
def test_an_entry_of_an_earlier_format_is_outdated_not_corrupt(tmp_path: Path, version: int) -> None:
    entry = tmp_path / "entry"
    key = b"entry".ljust(cache_entry.KEY_BYTES, b"\0") if version == 2 else b""  # v2's trailer ends in its key
    for data in (b"an object", b"an object of more than this format's trailer" * 4):  # shorter and longer than v3's
        content = (data + f"opencoti-cache-entry-v{version}\0".encode() + len(data).to_bytes(8, "little")
                   + hashlib.sha256(data).digest() + key)
        entry.write_bytes(content)
        with pytest.raises(cache_entry.OutdatedEntry, match="written by an earlier cache format"):
            cache_entry.read_entry(entry, tmp_path / "out.o")
        with pytest.raises(cache_entry.OutdatedEntry):
            cache_entry.check_trailer(entry)
        with pytest.raises(cache_entry.OutdatedEntry):
            cache_entry.unseal(content, "entry")
        assert not (tmp_path / "out.o").exists()


def test_a_restore_that_cannot_write_its_target_says_so_not_that_the_entry_is_unreadable(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    source = tmp_path / "source.o"
    source.write_bytes(BIG)
    entry = tmp_path / "entry"
    cache_entry.write_entry(source, entry)
    real_open = open

    class Full:
        def __init__(self, path: Path) -> None:
            self._fh = real_open(path, "wb")

        def write(self, data: bytes) -> int:
            raise OSError(28, "No space left on device")

        def flush(self) -> None:
            self._fh.flush()

        def close(self) -> None:
            self._fh.close()

    monkeypatch.setattr(cache_entry, "open", lambda path, mode="r", *a, **k: Full(path) if mode == "wb"
                        else real_open(path, mode, *a, **k), raising=False)
    with pytest.raises(cache_entry.CannotWrite, match=f"^cannot write {tmp_path / 'out.o'}: No space left on device$"):
        cache_entry.read_entry(entry, tmp_path / "out.o")
    assert not (tmp_path / "out.o").exists()


def _command(project: str, src: str, build: str, maps: list[tuple[str, str]], extra: str = "") -> bytes:
    flags = " ".join(f"-ffile-prefix-map={old}={new}" for old, new in maps)
    return (f"cosmocc -iquote {src}/llama.cpp -I {build}/gen {extra}-DNDEBUG {flags} -c -o {build}/o/x.o "
            f"{src}/llama.cpp/x.c").encode()


def _key_text(project: str, src: str, build: str, maps: list[tuple[str, str]], extra: str = "") -> bytes:
    roots = cache_entry.path_roots([("BUILD_DIR", os.path.join(project, build)), ("SRC", os.path.join(project, src)),
                                    ("ROOT", project)], project)
    return cache_entry.neutral_command(_command(project, src, build, maps, extra), roots)


def test_a_command_reads_the_same_in_every_layout_and_differently_for_anything_else() -> None:
    default = _key_text("/w/main", "tests/fx", "build", [("/w/main", "."), ("/w/main/tests/fx", "src"),
                                                         ("tests/fx", "src"), ("/w/main/build", "build"),
                                                         ("build", "build")])
    layouts = {
        "another checkout": _key_text("/elsewhere/second-checkout", "tests/fx", "build", [
            ("/elsewhere/second-checkout", "."), ("/elsewhere/second-checkout/tests/fx", "src"), ("tests/fx", "src"),
            ("/elsewhere/second-checkout/build", "build"), ("build", "build")]),
        "SRC outside, maps in another order": _key_text("/w/main", "/t/src", "build", [
            ("/t/src", "src"), ("/w/main", "."), ("/w/main/build", "build"), ("build", "build")]),
        "BUILD_DIR elsewhere": _key_text("/w/main", "tests/fx", "/o/out", [
            ("/w/main", "."), ("/w/main/tests/fx", "src"), ("tests/fx", "src"), ("/o/out", "build")]),
    }
    assert layouts == {name: default for name in layouts}
    maps = [("/w/main", "."), ("/w/main/tests/fx", "src"), ("tests/fx", "src"), ("/w/main/build", "build")]
    others = [_key_text("/w/main", "tests/fx", "build", maps, extra) for extra in ("-O3 ", "-DX=1 ", "-march=znver4 ")]
    others.append(_key_text("/w/main", "tests/fx", "build", maps[:3] + [("/w/main/build", "gen")]))  # another name
    others.append(_key_text("/w/main", "tests/fx", "build", maps[:1]).replace(b"cosmocc", b"/opt/cosmo/bin/cosmocc"))
    assert len({default, *others}) == len(others) + 1


def test_prefix_maps_read_as_one_canonical_set_whatever_their_number_and_order() -> None:
    one = b"g++ -Xcompiler=-ffile-prefix-map=/a/b=src -ffile-prefix-map=/a=. -c x.cu"
    other = b"g++ -ffile-prefix-map=/z=. -ffile-prefix-map=z=. -Xcompiler=-ffile-prefix-map=/q=src -c x.cu"
    assert cache_entry.canonical_maps(one) == cache_entry.canonical_maps(other) == (
        b"g++ -c x.cu\0-Xcompiler=-ffile-prefix-map=*=src -ffile-prefix-map=*=.")
    assert cache_entry.canonical_maps(b"cc -DPATH=/a=b x.c") == b"cc -DPATH=/a=b x.c\0"  # not a map: kept
