"""Signed cache entries: who wrote an entry, not only that it is whole (no SCons here; opencoti_scons/cachedir.py
uses it; the entry format is opencoti_build.cache.cache_entry's).

``CACHE_SIGNING_KEY=PEM`` (an ed25519 or ECDSA P-256 private key) signs every entry a build writes, over the entry's
key, its length and its SHA-256 (cache_entry.signed_message): a valid signature moved to another key, or kept over
other bytes, does not verify. ``CACHE_TRUSTED_KEYS=FILE`` (one or more PEM public keys, concatenated) is whom a
reader takes entries from, where others can write them. A tier others can write is *shared*: the Redis tier, and a
local ``CACHE_DIR`` owned by another user or writable by its group or by others (:func:`shared_reason`; a group
that is its owner's own user private group does not count). A shared tier's entry is used only when a trusted key
signed it (:class:`Policy`); without trusted keys a shared tier is not read at all, as Nix requires signatures by
default. A private tier's entries are used as they are, unless an entry file there is itself someone else's.

A key's id is the SHA-256 of its public key in DER (SubjectPublicKeyInfo): ``openssl pkey -pubin -in key.pub
-outform DER | sha256sum`` prints it; messages show its first 16 hex digits. The private key stays in memory: no
message shows anything of it but its id.
"""
from __future__ import annotations

import grp
import hashlib
import os
import pwd
import re
import stat
from pathlib import Path
from typing import Any

from opencoti_build.cache.cache_entry import Seal, UntrustedEntry, signed_message
from opencoti_build.errors import UserError

GENERATE = "openssl genpkey -algorithm ed25519 -out cache-signing.pem"
PUBLIC = "openssl pkey -in cache-signing.pem -pubout -out cache-trusted.pem"
_PEM_PUBLIC = re.compile(rb"-----BEGIN PUBLIC KEY-----\r?\n.*?-----END PUBLIC KEY-----", re.S)

# UntrustedEntry kinds: a reader says one WARN per kind and tier, and counts the rest
UNSIGNED = "unsigned"
UNKNOWN_KEY = "unknown key"
BAD_SIGNATURE = "bad signature"
FOREIGN = "foreign"


def key_id(public_key: Any) -> bytes:
    """The id of a public key: the SHA-256 of its DER SubjectPublicKeyInfo."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return hashlib.sha256(public_key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)).digest()


def shown_id(keyid: bytes) -> str:
    return keyid.hex()[:16]


def _usable(key: Any) -> bool:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    return isinstance(key, (ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey)) or (
        isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)) and isinstance(key.curve, ec.SECP256R1))


class Signer:
    """An ed25519 or ECDSA P-256 private key signing entries (cache_entry.Signer); ``keyid`` names its public key."""

    def __init__(self, key: Any) -> None:
        self._key = key
        self.keyid = key_id(key.public_key())

    def sign(self, message: bytes) -> bytes:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        if isinstance(self._key, ec.EllipticCurvePrivateKey):
            return self._key.sign(message, ec.ECDSA(hashes.SHA256()))
        return self._key.sign(message)

    def __repr__(self) -> str:  # never the key itself
        return f"Signer({shown_id(self.keyid)})"


def load_signer(path: Path | str, name: str = "CACHE_SIGNING_KEY") -> Signer:
    """The private key in the PEM file ``path``; a UserError naming ``name``, the file and the fix when it is not an
    unencrypted ed25519 or ECDSA P-256 private key (nothing of the file's content is shown)."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    fix = f"give an unencrypted ed25519 (or ECDSA P-256) private key in PEM, e.g. `{GENERATE}`"
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"{name}={path}: cannot read it ({exc.strerror or exc}); {fix}") from None
    try:
        key = load_pem_private_key(data, password=None)
    except TypeError:
        raise UserError(f"{name}={path} is encrypted; {fix}") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise UserError(f"{name}={path} is not a PEM private key ({type(exc).__name__}); {fix}") from None
    if not _usable(key):
        raise UserError(f"{name}={path} is a {type(key).__name__.removeprefix('_')}; {fix}")
    return Signer(key)


class TrustedKeys:
    """The public keys entries are taken from, by id; :meth:`verify` vouches for an entry or raises UntrustedEntry."""

    def __init__(self, keys: dict[bytes, Any], path: str = "") -> None:
        self.keys = keys
        self.path = path

    def verify(self, where: str, seal: Seal) -> None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        if not seal.signed:
            raise UntrustedEntry(UNSIGNED, f"{where} is unsigned")
        key = self.keys.get(seal.keyid)
        if key is None:
            raise UntrustedEntry(UNKNOWN_KEY, f"{where} is signed by key {shown_id(seal.keyid)}, which "
                                              f"CACHE_TRUSTED_KEYS={self.path} does not hold")
        message = signed_message(seal.key, seal.length, seal.digest)
        try:
            if isinstance(key, ec.EllipticCurvePublicKey):
                key.verify(seal.signature, message, ec.ECDSA(hashes.SHA256()))
            else:
                key.verify(seal.signature, message)
        except InvalidSignature:
            raise UntrustedEntry(BAD_SIGNATURE, f"{where}: its signature by trusted key {shown_id(seal.keyid)} does "
                                                "not verify over its key and content (moved from another key, or "
                                                "changed)") from None


def load_trusted(path: Path | str, name: str = "CACHE_TRUSTED_KEYS") -> TrustedKeys:
    """The ed25519 and ECDSA P-256 public keys in the PEM file ``path`` (one or more, concatenated); a UserError
    naming ``name``, the file and the fix when it holds none, or one that is not such a key."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    fix = f"give the PEM public keys whose entries this build may use, e.g. from `{PUBLIC}`"
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"{name}={path}: cannot read it ({exc.strerror or exc}); {fix}") from None
    blocks = _PEM_PUBLIC.findall(data)
    if not blocks:
        private = b"PRIVATE KEY-----" in data
        raise UserError(f"{name}={path} holds {'a private key, not public keys' if private else 'no PEM public key'}; "
                        f"{fix}")
    keys: dict[bytes, Any] = {}
    for n, block in enumerate(blocks, 1):
        try:
            key = load_pem_public_key(block)
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise UserError(f"{name}={path}: public key {n} is not readable ({type(exc).__name__}); {fix}") from None
        if not _usable(key):
            raise UserError(f"{name}={path}: public key {n} is a {type(key).__name__.removeprefix('_')}, not an "
                            f"ed25519 or ECDSA P-256 key; {fix}")
        keys[key_id(key)] = key
    return TrustedKeys(keys, str(path))


def _private_group(gid: int, owner: int) -> bool:
    """Whether ``gid`` is user ``owner``'s own user private group (named after it, its primary group, no other
    member): group write bits then let nobody else write."""
    try:
        group, user = grp.getgrgid(gid), pwd.getpwuid(owner)
    except KeyError:
        return False
    if group.gr_name != user.pw_name or user.pw_gid != gid or set(group.gr_mem) - {user.pw_name}:
        return False
    return not any(p.pw_gid == gid and p.pw_uid != owner for p in pwd.getpwall())


def shared_reason(st: os.stat_result, uid: int | None = None) -> str | None:
    """Why others than user ``uid`` (default: this process's) and root can write the file or directory of stat
    ``st``, or None when they cannot: owned by another user, writable by others, or by a group that is not its
    owner's private group."""
    uid = os.geteuid() if uid is None else uid
    if st.st_uid not in (uid, 0):
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = f"uid {st.st_uid}"
        return f"owned by {owner}"
    if st.st_mode & stat.S_IWOTH:
        return "writable by others"
    if st.st_mode & stat.S_IWGRP and not _private_group(st.st_gid, st.st_uid):
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        return f"writable by group {group}"
    return None


class Policy:
    """One tier's rule for whose entries it uses (cache_entry.Trust): a ``shared`` tier's entries only when a key of
    ``trusted`` signed them; a private tier's as they are, but for an entry file others can write (someone else's,
    or left writable), which is held to the shared rule. Without ``trusted`` the shared rule refuses everything."""

    def __init__(self, trusted: TrustedKeys | None, shared: bool) -> None:
        self.trusted = trusted
        self.shared = shared

    def check(self, where: str, seal: Seal, st: os.stat_result | None) -> None:
        if not self.shared:
            reason = shared_reason(st) if st is not None else None
            if reason is None:
                return
            if self.trusted is None:
                raise UntrustedEntry(FOREIGN, f"{where} is {reason} and CACHE_TRUSTED_KEYS is not set")
        if self.trusted is None:
            raise UntrustedEntry(FOREIGN, f"{where} is in a shared tier and CACHE_TRUSTED_KEYS is not set")
        self.trusted.verify(where, seal)

