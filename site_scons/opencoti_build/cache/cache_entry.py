"""Verified cache entries and path-independent cache keys (no SCons here; site_tools/verified_cache.py uses it).

An entry is the file's bytes followed by a fixed trailer: a magic, the bytes' length, their SHA-256 and the key
the entry was stored under (the cache signature: a local entry's file name, a remote entry's Redis key). Reading
an entry checks all three against the key it is read for, and a restored file whose bytes do not match is
removed, so a flipped byte, a truncation or an entry swapped with another (a restore from backup, a copy tool, a
sharing layer's bug: each whole and self-consistent) is a miss, never an output. Entries are written under a temporary name
(opencoti_build.incremental.tempfiles) and renamed into place: a reader sees a whole entry or none, whoever
else is writing.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import struct
from collections.abc import Iterable
from pathlib import Path

from opencoti_build.incremental import tempfiles

MAGIC = b"opencoti-cache-entry-v2\0"
# The earlier format's trailer (magic, content length, sha256: no key), recognised so its entries are quiet misses.
_V1 = struct.Struct("<24sQ32s")
_V1_MAGIC = b"opencoti-cache-entry-v1\0"
KEY_BYTES = 64  # a hex SHA-256 signature, the longest SCons makes
_TRAILER = struct.Struct(f"<{len(MAGIC)}sQ32s{KEY_BYTES}s")  # magic, content length, sha256, key (NUL-padded)
_CHUNK = 1 << 20


class CorruptEntry(Exception):
    """A cache entry whose bytes do not match its recorded digest or key (flipped, truncated, swapped, foreign)."""


class CannotWrite(Exception):
    """A checked entry whose target could not be written (a full disk, a read-only directory): not the entry's fault."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(f"cannot write {path}: {exc.strerror or exc}")
        self.path, self.strerror = path, exc.strerror or str(exc)


class OutdatedEntry(CorruptEntry):
    """An entry an earlier format of this build wrote: not damaged, but unverifiable against its key (a quiet miss)."""


def _key_field(key: str) -> bytes:
    field = key.encode("ascii")
    if len(field) > KEY_BYTES:
        raise ValueError(f"cache key {key!r} is longer than {KEY_BYTES} characters")
    return field


def _check_trailer(name: str, key: str, magic: bytes, length: int, stored: int, found: bytes) -> None:
    """CorruptEntry unless a trailer read from entry ``name`` is whole and was written for ``key``."""
    if magic != MAGIC or length != stored:
        raise CorruptEntry(f"{name} has no valid trailer (truncated or not written by this build)")
    bound = found.rstrip(b"\0").decode("ascii", "replace")
    if bound != key:
        raise CorruptEntry(f"{name} holds the entry stored under key {bound[:16]}… (swapped or copied over)")


def _copy_hashing(src, dst, length: int | None) -> tuple[int, bytes]:
    digest = hashlib.sha256()
    copied = 0
    while length is None or copied < length:
        chunk = src.read(_CHUNK if length is None else min(_CHUNK, length - copied))
        if not chunk:
            break
        digest.update(chunk)
        dst.write(chunk)
        copied += len(chunk)
    return copied, digest.digest()


def _atomic_writer(dest: Path):
    fd, tmp = tempfiles.create(dest)
    return os.fdopen(fd, "wb"), tmp


def write_entry(source: Path | str, entry: Path | str) -> None:
    """Store ``source`` as the cache entry ``entry`` (its directory must exist; its name is the key), atomically."""
    entry = Path(entry)
    key = _key_field(entry.name)
    out, tmp = _atomic_writer(entry)
    try:
        with out, open(source, "rb") as src:
            length, digest = _copy_hashing(src, out, None)
            out.write(_TRAILER.pack(MAGIC, length, digest, key))
        os.chmod(tmp, os.stat(source).st_mode & 0o777)
        os.replace(tmp, entry)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _check_outdated(name: str, tail: bytes, size: int) -> None:
    """OutdatedEntry when an entry of ``size`` bytes ending in ``tail`` has the earlier format's whole trailer."""
    if len(tail) >= _V1.size:
        magic, length, _ = _V1.unpack_from(tail, len(tail) - _V1.size)
        if magic == _V1_MAGIC and length == size - _V1.size:
            raise OutdatedEntry(f"{name} was written by an earlier cache format")


def _trailer(entry: Path, size: int, fh) -> tuple[int, bytes]:
    fh.seek(max(0, size - _TRAILER.size))
    tail = fh.read(_TRAILER.size)
    _check_outdated(str(entry), tail, size)
    if size < _TRAILER.size:
        raise CorruptEntry(f"{entry} is shorter than its trailer")
    magic, length, digest, key = _TRAILER.unpack(tail)
    _check_trailer(str(entry), entry.name, magic, length, size - _TRAILER.size, key)
    fh.seek(0)
    return length, digest


def check_trailer(entry: Path | str) -> None:
    """CorruptEntry (OutdatedEntry) unless ``entry`` ends in a whole trailer written for its key; the content is
    not read (read_entry checks it when it restores)."""
    entry = Path(entry)
    with open(entry, "rb") as fh:
        _trailer(entry, os.fstat(fh.fileno()).st_size, fh)


def _open_target(dest: Path):
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        return open(dest, "wb")
    except OSError as exc:
        raise CannotWrite(dest, exc) from exc


def _write_target(dest: Path, out, chunk: bytes | None) -> None:
    """Write ``chunk`` to the target (None: flush it), an OSError becoming CannotWrite (a read error is the entry's)."""
    try:
        if chunk is None:
            out.flush()
        else:
            out.write(chunk)
    except OSError as exc:
        raise CannotWrite(dest, exc) from exc


def read_entry(entry: Path | str, dest: Path | str) -> None:
    """Restore ``entry`` to ``dest``, checking its key and digest on the way; CorruptEntry removes ``dest``.

    ``dest`` is a target being brought up to date: it is written in place (no temporary to outlive a
    kill; a killed restore leaves a file the build's record does not describe, which is redone).
    """
    entry, dest = Path(entry), Path(dest)
    with open(entry, "rb") as fh:
        length, recorded = _trailer(entry, os.fstat(fh.fileno()).st_size, fh)
        try:
            digest, copied = hashlib.sha256(), 0
            out = _open_target(dest)
            try:
                while copied < length and (chunk := fh.read(min(_CHUNK, length - copied))):
                    digest.update(chunk)
                    copied += len(chunk)
                    _write_target(dest, out, chunk)
                _write_target(dest, out, None)
            finally:
                with contextlib.suppress(OSError):  # flushed above: only a failed flush leaves bytes to fail again
                    out.close()
            if copied != length or digest.digest() != recorded:
                raise CorruptEntry(f"{entry}: content does not match its SHA-256")
            os.chmod(dest, (os.fstat(fh.fileno()).st_mode & 0o777) | 0o200)
        except BaseException:
            dest.unlink(missing_ok=True)
            raise


def seal(data: bytes, key: str) -> bytes:
    """``data`` as the bytes of the entry under ``key`` (what write_entry stores), for a tier that is not a file."""
    return data + _TRAILER.pack(MAGIC, len(data), hashlib.sha256(data).digest(), _key_field(key))


def unseal(blob: bytes, key: str) -> bytes:
    """The content the bytes of the entry under ``key`` carry, checked against their trailer and key."""
    _check_outdated(key, blob[-_TRAILER.size:], len(blob))
    if len(blob) < _TRAILER.size:
        raise CorruptEntry(f"{key} is shorter than its trailer")
    magic, length, digest, found = _TRAILER.unpack_from(blob, len(blob) - _TRAILER.size)
    _check_trailer(key, key, magic, length, len(blob) - _TRAILER.size, found)
    data = blob[:length]
    if hashlib.sha256(data).digest() != digest:
        raise CorruptEntry(f"{key}: content does not match its SHA-256")
    return data


def store_sealed(blob: bytes, entry: Path | str, mode: int) -> None:
    """Write an entry's bytes (already checked) as the entry ``entry``, atomically (a remote hit filling the local tier)."""
    entry = Path(entry)
    entry.parent.mkdir(parents=True, exist_ok=True)
    out, tmp = _atomic_writer(entry)
    try:
        with out:
            out.write(blob)
        os.chmod(tmp, mode & 0o777)
        os.replace(tmp, entry)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def restore_bytes(data: bytes, dest: Path | str, mode: int) -> None:
    """Write checked content to the target ``dest`` in place, as read_entry does (writable by its owner)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(dest, "wb") as out:
            out.write(data)
        os.chmod(dest, (mode & 0o777) | 0o200)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise


def content_signature(entry: Path | str, algorithm: str) -> str:
    """The ``algorithm`` hex digest of the bytes an entry holds (what the restored file will hash to)."""
    digest = hashlib.new(algorithm)
    with open(entry, "rb") as fh:
        length, _ = _trailer(Path(entry), os.fstat(fh.fileno()).st_size, fh)
        while length:
            chunk = fh.read(min(_CHUNK, length))
            if not chunk:
                raise CorruptEntry(f"{entry} is cut short")
            digest.update(chunk)
            length -= len(chunk)
    return digest.hexdigest()


def path_roots(roots: Iterable[tuple[str, str | None]], project: str) -> list[tuple[bytes, bytes]]:
    """(path, placeholder) byte pairs to neutralise in a signature, longest path first.

    ``roots`` are (name, absolute path or None). A root inside ``project`` is also matched in its
    project-relative form, as SCons writes paths below the top directory.
    """
    pairs: dict[bytes, bytes] = {}
    for name, path in roots:
        if not path:
            continue
        path = os.path.normpath(path)
        token = f"@{name}@".encode()
        pairs[path.encode()] = token
        rel = os.path.relpath(path, project)
        if not rel.startswith("..") and rel != ".":
            pairs[rel.encode()] = token
    return sorted(pairs.items(), key=lambda item: len(item[0]), reverse=True)


def neutral(contents: bytes, roots: list[tuple[bytes, bytes]]) -> bytes:
    """``contents`` with every root replaced by its placeholder where it is a whole path prefix.

    A root matches only when a ``/``, whitespace, a quote, ``=``, NUL or the end follows (so
    ``/work/main`` leaves ``/work/main2`` alone); a relative root also only where an argument starts
    (start, whitespace, quote, NUL) or right after a glued ``-I``/``-L`` (glslc's ``-Idir``), so ``build`` in
    ``GGML_BUILD`` or in ``-DMODE=build`` stays (a checkout whose BUILD_DIR is elsewhere has the same words there).
    """
    after = rb"(?=[/\s\"'=\0]|$)"
    for path, token in roots:
        before = b"" if path.startswith(b"/") else rb"(?:^|(?<=[\s\"'\0])|(?<=-I)|(?<=-L))"
        contents = re.sub(before + re.escape(path) + after, token, contents)
    return contents


# A prefix map as a signature spells it (opencoti_build.cosmo.prefix_maps; nvcc's behind -Xcompiler=): OLD never
# holds "=" (such a path is not mapped), NEW is a fixed name.
_PREFIX_MAP = re.compile(rb"(?:^|[ \t])((?:-Xcompiler=)?-ffile-prefix-map=)[^=\s]+=(\S*)")  # with its space


def canonical_maps(contents: bytes) -> bytes:
    """``contents`` with its prefix maps replaced by one canonical set, appended: what each maps to, in a fixed
    order, without the paths mapped.

    The maps are a function of where the checkout, SRC, LLAMACPP and BUILD_DIR are, and of nothing else: how
    many there are (a root inside the checkout is also mapped as SCons writes it, relative; a symlinked one
    also resolved) and their order (a map after every map whose path is a prefix of its own) depend on the
    layout alone, while what they do does not: every path under a root becomes its fixed name, so the objects
    are the same bytes whatever the layout. A key over them would differ by layout for the same bytes."""
    found = sorted({match.group(1) + b"*=" + match.group(2) for match in _PREFIX_MAP.finditer(contents)})
    return _PREFIX_MAP.sub(b"", contents) + b"\0" + b" ".join(found)


def neutral_command(contents: bytes, roots: list[tuple[bytes, bytes]]) -> bytes:
    """A step's command as its cache key reads it: prefix maps canonical (:func:`canonical_maps`), then every root
    replaced by its placeholder (:func:`neutral`); the command that runs keeps its real paths."""
    return neutral(canonical_maps(contents), roots)
