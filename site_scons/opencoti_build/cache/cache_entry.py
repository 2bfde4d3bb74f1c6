"""Verified cache entries and path-independent cache keys (no SCons here; site_tools/verified_cache.py uses it).

An entry is the file's bytes followed by a fixed trailer: a magic, the bytes' length, their SHA-256, the key
the entry was stored under (the cache signature: a local entry's file name, a remote entry's Redis key) and a
signature slot (the signing key's id and its signature over the key, the length and the SHA-256: :func:`signed_message`;
zeros when the entry is unsigned). Reading an entry checks the first four against the key it is read for, and a
restored file whose bytes do not match is removed, so a flipped byte, a truncation or an entry swapped with another
(a restore from backup, a copy tool, a sharing layer's bug: each whole and self-consistent) is a miss, never an
output. Who wrote an entry is checked only where a reader asks for it (``trust``: opencoti_build.cache.signing, for
a tier others can write): an entry it does not vouch for is an :class:`UntrustedEntry`. Entries are written under a
temporary name (opencoti_build.tempfiles) and renamed into place: a reader sees a whole entry or none,
whoever else is writing; an entry file is never writable by its group or others (who could change it in place).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from opencoti_build import tempfiles

MAGIC = b"opencoti-cache-entry-v3\0"
KEY_BYTES = 64  # a hex SHA-256 signature, the longest SCons makes
KEYID_BYTES = 32  # a signing key's id: the SHA-256 of its public key (DER SubjectPublicKeyInfo)
SIGNATURE_BYTES = 72  # the longest signature a key here makes: ECDSA P-256 in DER (ed25519's are 64)
# magic, content length, sha256, key (NUL-padded), signing key id (zeros: unsigned), signature length, signature
_TRAILER = struct.Struct(f"<{len(MAGIC)}sQ32s{KEY_BYTES}s{KEYID_BYTES}sB{SIGNATURE_BYTES}s")
# The earlier formats' trailers, recognised so their entries are quiet misses: v1 (magic, content length, sha256:
# no key), v2 (the same and the key: no signature).
_OUTDATED = ((struct.Struct("<24sQ32s"), b"opencoti-cache-entry-v1\0"),
             (struct.Struct(f"<24sQ32s{KEY_BYTES}s"), b"opencoti-cache-entry-v2\0"))
# What a signature covers, after this context: the key (NUL-padded), the content's length and its SHA-256.
SIGNED_CONTEXT = b"opencoti-cache-entry-v3 signature\0"
_CHUNK = 1 << 20
_NOT_SHARED = 0o755  # an entry's file mode: nobody but its owner may write it in place


class CorruptEntry(Exception):
    """A cache entry whose bytes do not match its recorded digest or key (flipped, truncated, swapped, foreign)."""


class CannotWrite(Exception):
    """A checked entry whose target could not be written (a full disk, a read-only directory): not the entry's fault."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(f"cannot write {path}: {exc.strerror or exc}")
        self.path, self.strerror = path, exc.strerror or str(exc)


class OutdatedEntry(CorruptEntry):
    """An entry an earlier format of this build wrote: not damaged, but unverifiable against its key (a quiet miss)."""


class UntrustedEntry(Exception):
    """A whole entry its reader does not vouch for: unsigned, signed by a key it does not trust, or with a signature
    that does not verify (moved from another key, or its content changed and its digest with it). ``kind`` names
    which, for the reader's one WARN per kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Seal:
    """What an entry's trailer says: the content's length and SHA-256, the key, and who signed them (``keyid``
    all zeros and an empty ``signature``: nobody)."""

    length: int
    digest: bytes
    key: str
    keyid: bytes
    signature: bytes

    @property
    def signed(self) -> bool:
        return any(self.keyid)


class Signer(Protocol):
    """A private key that signs entries (opencoti_build.cache.signing.Signer)."""

    keyid: bytes

    def sign(self, message: bytes) -> bytes: ...


class Trust(Protocol):
    """A reader's rule for whose entries it uses (opencoti_build.cache.signing.Policy): ``check`` raises
    UntrustedEntry for an entry it does not vouch for; ``st`` is the entry file's stat (None: not a file)."""

    def check(self, where: str, seal: Seal, st: os.stat_result | None) -> None: ...


def _key_field(key: str) -> bytes:
    field = key.encode("ascii")
    if len(field) > KEY_BYTES:
        raise ValueError(f"cache key {key!r} is longer than {KEY_BYTES} characters")
    return field


def signed_message(key: str, length: int, digest: bytes) -> bytes:
    """The bytes a signature over the entry of ``length`` bytes with SHA-256 ``digest`` under ``key`` signs: the
    same content under another key is another message, so a signature moved with it does not verify."""
    return SIGNED_CONTEXT + _key_field(key).ljust(KEY_BYTES, b"\0") + struct.pack("<Q", length) + digest


def _pack_trailer(length: int, digest: bytes, key: str, signer: Signer | None) -> bytes:
    field = _key_field(key)
    if signer is None:
        return _TRAILER.pack(MAGIC, length, digest, field, bytes(KEYID_BYTES), 0, b"")
    signature = signer.sign(signed_message(key, length, digest))
    if len(signature) > SIGNATURE_BYTES or len(signer.keyid) != KEYID_BYTES:
        raise ValueError(f"a signature of {len(signature)} bytes does not fit an entry's {SIGNATURE_BYTES}")
    return _TRAILER.pack(MAGIC, length, digest, field, signer.keyid, len(signature), signature)


def _check_trailer(name: str, key: str, fields: tuple, stored: int) -> Seal:
    """The Seal of a trailer's ``fields`` read from entry ``name``; CorruptEntry unless it is whole and was written
    for ``key``."""
    magic, length, digest, found, keyid, signature_length, signature = fields
    if magic != MAGIC or length != stored or signature_length > SIGNATURE_BYTES:
        raise CorruptEntry(f"{name} has no valid trailer (truncated or not written by this build)")
    # The signature slot is exact too (nothing verifies it in a private tier): a key id with a signature, or
    # neither, and zeros past the signature. A flipped bit there is a corrupt entry, as anywhere else.
    if bool(any(keyid)) != bool(signature_length) or any(signature[signature_length:]):
        raise CorruptEntry(f"{name} has a damaged signature slot (a flipped bit, or not written by this build)")
    bound = found.rstrip(b"\0").decode("ascii", "replace")
    if bound != key:
        raise CorruptEntry(f"{name} holds the entry stored under key {bound[:16]}… (swapped or copied over)")
    return Seal(length, digest, key, keyid, signature[:signature_length] if any(keyid) else b"")


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


def write_entry(source: Path | str, entry: Path | str, signer: Signer | None = None) -> None:
    """Store ``source`` as the cache entry ``entry`` (its directory must exist; its name is the key), atomically;
    signed by ``signer`` when given."""
    entry = Path(entry)
    _key_field(entry.name)
    out, tmp = _atomic_writer(entry)
    try:
        with out, open(source, "rb") as src:
            length, digest = _copy_hashing(src, out, None)
            out.write(_pack_trailer(length, digest, entry.name, signer))
        os.chmod(tmp, os.stat(source).st_mode & _NOT_SHARED)
        os.replace(tmp, entry)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _check_outdated(name: str, tail: bytes, size: int) -> None:
    """OutdatedEntry when an entry of ``size`` bytes ending in ``tail`` has an earlier format's whole trailer."""
    for trailer, magic in _OUTDATED:
        if len(tail) >= trailer.size:
            found, length = trailer.unpack_from(tail, len(tail) - trailer.size)[:2]
            if found == magic and length == size - trailer.size:
                raise OutdatedEntry(f"{name} was written by an earlier cache format")


def _trailer(entry: Path, size: int, fh, trust: Trust | None) -> Seal:
    fh.seek(max(0, size - _TRAILER.size))
    tail = fh.read(_TRAILER.size)
    _check_outdated(str(entry), tail, size)
    if size < _TRAILER.size:
        raise CorruptEntry(f"{entry} is shorter than its trailer")
    seal = _check_trailer(str(entry), entry.name, _TRAILER.unpack(tail), size - _TRAILER.size)
    if trust is not None:
        trust.check(str(entry), seal, os.fstat(fh.fileno()))
    fh.seek(0)
    return seal


def check_trailer(entry: Path | str, trust: Trust | None = None) -> None:
    """CorruptEntry (OutdatedEntry) unless ``entry`` ends in a whole trailer written for its key, UntrustedEntry
    unless ``trust`` (when given) vouches for its signature; the content is not read (read_entry checks it when it
    restores)."""
    entry = Path(entry)
    with open(entry, "rb") as fh:
        _trailer(entry, os.fstat(fh.fileno()).st_size, fh, trust)


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


def read_entry(entry: Path | str, dest: Path | str, trust: Trust | None = None) -> None:
    """Restore ``entry`` to ``dest``, checking its key, its signature (with ``trust``) and its digest on the way;
    CorruptEntry removes ``dest``, UntrustedEntry comes before it is opened.

    ``dest`` is a target being brought up to date: it is written in place (no temporary to outlive a
    kill; a killed restore leaves a file the build's record does not describe, which is redone).
    """
    entry, dest = Path(entry), Path(dest)
    with open(entry, "rb") as fh:
        seal = _trailer(entry, os.fstat(fh.fileno()).st_size, fh, trust)
        length, recorded = seal.length, seal.digest
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


def seal(data: bytes, key: str, signer: Signer | None = None) -> bytes:
    """``data`` as the bytes of the entry under ``key`` (what write_entry stores), for a tier that is not a file;
    signed by ``signer`` when given."""
    return data + _pack_trailer(len(data), hashlib.sha256(data).digest(), key, signer)


def unseal(blob: bytes, key: str, trust: Trust | None = None) -> bytes:
    """The content the bytes of the entry under ``key`` carry, checked against their trailer and key, and their
    signature against ``trust`` when given (UntrustedEntry)."""
    _check_outdated(key, blob[-_TRAILER.size:], len(blob))
    if len(blob) < _TRAILER.size:
        raise CorruptEntry(f"{key} is shorter than its trailer")
    seal = _check_trailer(key, key, _TRAILER.unpack_from(blob, len(blob) - _TRAILER.size), len(blob) - _TRAILER.size)
    if trust is not None:
        trust.check(key, seal, None)
    data = blob[:seal.length]
    if hashlib.sha256(data).digest() != seal.digest:
        raise CorruptEntry(f"{key}: content does not match its SHA-256")
    return data


def store_sealed(blob: bytes, entry: Path | str, mode: int) -> None:
    """Write an entry's bytes (already checked) as the entry ``entry``, atomically (a remote hit filling the local tier)."""
    entry = Path(entry)
    entry.parent.mkdir(mode=_NOT_SHARED, parents=True, exist_ok=True)
    out, tmp = _atomic_writer(entry)
    try:
        with out:
            out.write(blob)
        os.chmod(tmp, mode & _NOT_SHARED)
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


def content_signature(entry: Path | str, algorithm: str, trust: Trust | None = None) -> str:
    """The ``algorithm`` hex digest of the bytes an entry holds (what the restored file will hash to); the entry
    checked against ``trust`` first when given."""
    digest = hashlib.new(algorithm)
    with open(entry, "rb") as fh:
        length = _trailer(Path(entry), os.fstat(fh.fileno()).st_size, fh, trust).length
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
