"""The object cache's remote tier: verified entries in Redis (no SCons here; site_tools/verified_cache.py uses it).

A value is a zstd frame of the target's file mode (2 bytes) followed by the entry's bytes in
opencoti_build.cache.cache_entry's format (content + trailer: SHA-256 and key), then the frame's own SHA-256: the
local tier's rules hold here too (every value is checked before it is used, a damaged one is a miss),
and the outer digest also catches a flip in the bits a zstd decoder ignores. Anyone with access to the server can
write it, so it is a shared tier (opencoti_build.cache.signing): its entries are used only when a trusted key signed
them, and a build pushes only entries it signs, replacing what is there (an unsigned or foreign value would
otherwise keep its key).

The remote is never a reason for a build to fail: every call is bounded by short socket timeouts
with no retries, and the first error of any kind (refused, timed out, reset, a server that refuses
commands) turns the remote off for the rest of the run with one WARN (``say``); a server that answers a push
with an error (full: ``maxmemory`` with ``noeviction``; a read-only replica) only stops the pushes, with one WARN.

The shared tier's interface (:class:`SharedTier`) is the same for a REAPI cache (``grpc://``, ``grpcs://``:
opencoti_build.cache.reapi.tier); :func:`open_tier` and :func:`check_url` pick by the URL's scheme.
"""
from __future__ import annotations

import hashlib
import os
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import zstandard

from opencoti_build.cache import cache_entry
from opencoti_build.errors import UserError
from opencoti_build.report.summary import Tally

# Entries whose target is larger than this are not pushed (one NOTE per run counts them): Redis holds a
# value in memory and sends it whole, and a team's cache is better spent on many objects than one DSO.
MAX_ENTRY_BYTES = 64 << 20
# Enough for a loaded server on a LAN; a remote that is down costs the build at most this once.
CONNECT_TIMEOUT_S = 1.5
READ_TIMEOUT_S = 2.0
# Keys: this prefix and the local tier's path-independent signature (a new format takes a new prefix).
KEY_PREFIX = "opencoti:cache:v3:"  # v2: entries carry their key; v3: and their signature
URL_FORM = "redis://[:PASSWORD@]HOST:PORT[/DB] (rediss:// for TLS)"
REAPI_SCHEMES = ("grpc", "grpcs")
# opencoti_build.cache.reapi.client's URL_FORM (a test holds them equal), here without importing the REAPI modules,
# which a build without a grpc CACHE_URL never needs
REAPI_URL_FORM = "grpc://HOST:PORT[/INSTANCE] (grpcs:// for TLS)"
URL_FORMS = f"{URL_FORM}, or a REAPI cache, {REAPI_URL_FORM}"

_MODE = struct.Struct("<H")
_DIGEST = hashlib.sha256().digest_size
# Delete a key only while it still holds the damaged value: a concurrent build may have pushed a good one since.
_DROP_IF_SAME = "if redis.sha1hex(redis.call('GET', KEYS[1]) or '') == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


def _scheme(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else ""


def check_url(url: str) -> str:
    """``url`` when it is a Redis or REAPI URL this build can use (a REAPI one with the credentials the environment
    gives for it); else a one-line UserError naming CACHE_URL (or the credential's variable) and the fix."""
    if _scheme(url) in REAPI_SCHEMES:
        from opencoti_build.cache.reapi import client

        client.credentials(client.parse_url(url))
        return url
    if _scheme(url) not in ("redis", "rediss"):
        raise UserError(f"CACHE_URL={shown(url)} is not a cache URL; use CACHE_URL={URL_FORMS}, or leave it empty")
    bad = UserError(f"CACHE_URL={shown(url)} is not a Redis URL; use CACHE_URL={URL_FORM}, or leave it empty")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise bad from None
    db = parts.path.lstrip("/")
    if (parts.scheme not in ("redis", "rediss") or not parts.hostname or port is None
            or parts.query or parts.fragment or (db and not db.isdigit()) or parts.path.count("/") > 1):
        raise bad
    return url


def shown(url: str) -> str:
    """``url`` with its password replaced by ``***`` (it goes into logs)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def pack(data: bytes, mode: int, key: str, signer: cache_entry.Signer | None = None) -> bytes:
    """The Redis value under ``key`` for a target's content ``data`` and its file ``mode``, signed by ``signer``."""
    frame = zstandard.ZstdCompressor(level=3).compress(_MODE.pack(mode & 0o777) + cache_entry.seal(data, key, signer))
    return frame + hashlib.sha256(frame).digest()


def unpack(value: bytes, name: str, trust: cache_entry.Trust | None = None) -> tuple[bytes, bytes, int]:
    """(entry bytes for the local tier, content, mode) of the Redis value under the key ``name``; CorruptEntry
    naming it, also when the value was stored under another key; UntrustedEntry when ``trust`` does not vouch
    for its signature."""
    compressed, digest = value[:-_DIGEST], value[-_DIGEST:]
    if len(value) <= _DIGEST or hashlib.sha256(compressed).digest() != digest:
        raise cache_entry.CorruptEntry(f"{name}: the value does not match its SHA-256 (damaged or truncated)")
    try:
        frame = zstandard.ZstdDecompressor().decompress(compressed)
    except zstandard.ZstdError as exc:
        raise cache_entry.CorruptEntry(f"{name}: not a whole zstd frame ({exc})") from None
    if len(frame) < _MODE.size:
        raise cache_entry.CorruptEntry(f"{name} is shorter than its header")
    (mode,) = _MODE.unpack_from(frame)
    if mode & ~0o777:
        raise cache_entry.CorruptEntry(f"{name} has an impossible file mode {mode:o}")
    blob = frame[_MODE.size:]
    return blob, cache_entry.unseal(blob, name, trust), mode


@dataclass
class TierCounts(Tally):
    """What one tier did in a run; counted per target file (a fat object and its twin are two)."""

    hits: int = 0
    misses: int = 0
    corrupt: int = 0  # damaged, truncated, or swapped (stored under another key)
    pushed: int = 0
    failed: int = 0  # pushes the tier refused (a full disk or server): shown only when there were some
    untrusted: int = 0  # whole entries no trusted key signed (opencoti_build.cache.signing): shown when some

    def text(self, name: str) -> str:
        failed = f" / {self.failed} failed pushes" if self.failed else ""
        untrusted = f" / {self.untrusted} untrusted" if self.untrusted else ""
        return (f"{name} {self.hits} hits / {self.misses} misses / {self.corrupt} corrupt / {self.pushed} pushed"
                + failed + untrusted)


def tiers_line(tiers: Sequence[tuple[str, TierCounts]]) -> str:
    """``cache: local … ; redis://… …``: the one end-of-build line for every tier."""
    return "cache: " + "; ".join(counts.text(name) for name, counts in tiers)


class SharedTier(Protocol):
    """A shared cache tier behind the local one, as opencoti_scons/cachedir.py uses it: Redis (:class:`Remote`) or a
    REAPI cache (opencoti_build.cache.reapi.tier.ReapiTier). Values are the tier's own, opaque to the caller."""

    url: str  # as messages show it (no secret)
    signer: cache_entry.Signer | None  # what signs every push; None: nothing is pushed
    corrupt_fate: str  # what becomes of a corrupt entry there, for its WARN

    @property
    def enabled(self) -> bool: ...

    def pull(self, keys: Sequence[str]) -> Sequence[Any | None] | None:
        """A step's values, one per key (None where absent); None when the tier is off."""

    def unpack(self, value: Any, key: str, trust: cache_entry.Trust | None = None) -> tuple[bytes, bytes, int]:
        """(entry bytes for the local tier, content, mode), checked: CorruptEntry, UntrustedEntry."""

    def drop(self, key: str, value: Any) -> None:
        """A value found corrupt: removed, or marked to be replaced."""

    def push_step(self, items: Sequence[tuple[str, str]]) -> int:
        """Store a built step's targets, ``(key, path)`` each; how many were stored."""

    def skipped_note(self) -> str | None:
        """The NOTE for targets too large to push, or None."""


def open_tier(url: str, say: Callable[[str], None], signer: cache_entry.Signer | None = None) -> SharedTier:
    """The shared tier at ``url`` (checked by :func:`check_url`): Redis, or a REAPI cache for grpc:// and grpcs://."""
    if _scheme(url) in REAPI_SCHEMES:
        from opencoti_build.cache.reapi.tier import ReapiTier

        return ReapiTier(url, say, signer=signer)
    return Remote(url, say, signer=signer)


class Remote:
    """One Redis server as a cache tier, shared by SCons' worker threads (redis-py's pool is thread-safe)."""

    corrupt_fate = "removed there"

    def __init__(self, url: str, say: Callable[[str], None], max_entry: int = MAX_ENTRY_BYTES,
                 signer: cache_entry.Signer | None = None) -> None:
        import redis  # here, not at the top: a build without CACHE_URL does not pay its ~0.1 s import
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.url = shown(url)
        self.skipped = 0
        self.max_entry = max_entry
        self.signer = signer  # what signs every push; None: SET NX, the first writer's value stays
        self._say = say
        self._errors = (redis.RedisError, OSError)
        self._refused = redis.ResponseError  # the server answered, with an error: it is up (full, read-only)
        self._down = threading.Event()
        self._no_pushes = threading.Event()
        self._lock = threading.Lock()
        self._client = redis.Redis.from_url(
            url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=READ_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0), retry_on_timeout=False)

    @property
    def enabled(self) -> bool:
        return not self._down.is_set()

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self._down.is_set():
                return
            self._down.set()
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0].rstrip(".")
        self._say(f"WARN: cache: CACHE_URL {self.url} unreachable ({reason}); building with the local cache only")

    def _stop_pushing(self, exc: BaseException) -> None:
        with self._lock:
            if self._no_pushes.is_set():
                return
            self._no_pushes.set()
        reason = (str(exc).strip().splitlines() or [""])[0].rstrip(".")
        self._say(f"WARN: cache: CACHE_URL {self.url} refused a push ({type(exc).__name__}: {reason}); nothing more is pushed there "
                  "this run, entries are still read from it")

    def pull(self, keys: Sequence[str]) -> list[bytes | None] | None:
        """The values under ``keys`` in one round trip (None each where absent); None when the remote is off."""
        if not self.enabled:
            return None
        try:
            values = self._client.mget([KEY_PREFIX + key for key in keys])
            return values  # type: ignore[return-value]  # bytes, not str: the client decodes no response
        except self._errors as exc:
            self._fail(exc)
            return None

    def push_file(self, key: str, path: str) -> bool:
        """Store the file ``path`` under ``key``, signed by the signer, replacing any value there (it may be one no
        reader trusts, which would keep the key); without a signer only unless a value is there. True when stored."""
        if not self.enabled or self._no_pushes.is_set():
            return False
        try:
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                if st.st_size > self.max_entry:
                    with self._lock:
                        self.skipped += 1
                    return False
                value = pack(fh.read(), st.st_mode, key, self.signer)
        except OSError:
            return False  # the target went away: SCons reports that, not the cache
        try:
            return bool(self._client.set(KEY_PREFIX + key, value, nx=self.signer is None))
        except self._refused as exc:  # full (maxmemory with noeviction), or a replica: say so, keep reading
            self._stop_pushing(exc)
            return False
        except self._errors as exc:
            self._fail(exc)
            return False

    def unpack(self, value: bytes, key: str, trust: cache_entry.Trust | None = None) -> tuple[bytes, bytes, int]:
        return unpack(value, key, trust)

    def push_step(self, items: Sequence[tuple[str, str]]) -> int:
        """Store each target of a step under its key (:meth:`push_file`); how many were stored."""
        return sum(self.push_file(key, path) for key, path in items)

    def drop(self, key: str, value: bytes) -> None:
        """Remove the damaged ``value`` under ``key`` (not a good one another build pushed meanwhile)."""
        if not self.enabled:
            return
        try:
            self._client.eval(_DROP_IF_SAME, 1, KEY_PREFIX + key, hashlib.sha1(value).hexdigest())
        except self._errors as exc:
            self._fail(exc)

    def skipped_note(self) -> str | None:
        """The NOTE for entries too large to push, once per run (None when there were none)."""
        if not self.skipped:
            return None
        return (f"NOTE: cache: {self.skipped} entries larger than {self.max_entry >> 20} MiB were not pushed to "
                f"{self.url} (kept in the local cache only)")
