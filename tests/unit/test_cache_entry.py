"""The verified cache's entry format and its path-neutral key text (opencoti_build.cache_entry)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from opencoti_build import cache_entry


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


def test_key_text_neutralises_whole_paths_only() -> None:
    roots = cache_entry.path_roots([("BUILD", "/w/main/build"), ("SRC", "/w/main/tests/fx"), ("ROOT", "/w/main")],
                                   "/w/main")
    text = (b"gcc -DGGML_BUILD=1 -iquote /w/main/tests/fx/a -o build/o/x.o /w/main2/y "
            b"-ffile-prefix-map=/w/main/build=build")
    assert cache_entry.neutral(text, roots) == (
        b"gcc -DGGML_BUILD=1 -iquote @SRC@/a -o @BUILD@/o/x.o /w/main2/y -ffile-prefix-map=@BUILD@=build")
