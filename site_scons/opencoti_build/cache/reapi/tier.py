"""The object cache's shared tier on a REAPI v2 cache (BuildGrid, bazel-remote, BuildBuddy, Buildbarn): the same
interface as the Redis tier (opencoti_build.cache.remote_cache.SharedTier), so opencoti_scons/cachedir.py uses either.

Each cached step is one ActionCache entry, under the digest of an Action naming the step's targets' keys
(messages.step_action: layout-free, as the keys are). Its ActionResult lists one output file per target (a fat
object and its ``.aarch64`` twin, a DSO's pieces), each a CAS blob named by its own SHA-256, and carries each
target's seal (its key, the signing key's id and signature, its mode) in ``execution_metadata.auxiliary_metadata``.
Pushes ask ``FindMissingBlobs`` first, send small blobs in ``BatchUpdateBlobs`` calls and large ones through
``ByteStream.Write``, then ``UpdateActionResult``; lookups read the entry, then its blobs (``BatchReadBlobs``,
``ByteStream.Read``) in one go: a step comes back whole or not at all.

The guarantees are the Redis tier's. Every output is checked before it is used: its path must be the key asked for
(an entry stored under another step's action: swapped), its blob must hash to its digest (damaged in the server's
storage), and its seal must verify as a local entry's trailer does (opencoti_build.cache.cache_entry, with the
reader's trust: opencoti_build.cache.signing). Nothing in REAPI deletes an entry, so a damaged blob is uploaded again
by the next signed push of that step, which also replaces the entry. ``GetCapabilities`` is asked once per run (the
instance exists, SHA256 is among its digest functions); any failure to read turns the tier off for the run with one
WARN, a refused push stops the pushes with one WARN, and the build never fails because of the cache.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from opencoti_build.cache import cache_entry
from opencoti_build.cache.reapi import client as grpc_client
from opencoti_build.cache.reapi.messages import SHA256, ActionResult, Digest, EntrySeal, OutputFile, step_action
from opencoti_build.cache.reapi.wire import WireError

MAX_ENTRY_BYTES = 64 << 20  # as the Redis tier: a larger target stays in the local tier (one NOTE counts them)
# Blobs up to this go in batch calls (under gRPC's default 4 MiB message, and the server's own limit when lower,
# with room for the request's framing); larger ones through ByteStream.
BATCH_BYTES = (4 << 20) - (64 << 10)
# Codes that say the server cannot be reached (or dropped us) rather than that it refused this one request.
UNREACHABLE = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "UNKNOWN", "INTERNAL", "UNAUTHENTICATED",
               "UNIMPLEMENTED"}


@dataclass(frozen=True)
class Fetched:
    """One target of a step as the server gave it, not yet checked (``pull`` returns these, ``unpack`` checks them):
    the output the entry lists under the key asked for (None: it lists none), its blob and its seal."""

    action: str
    output: OutputFile | None
    data: bytes | None
    seal: EntrySeal | None
    problem: str = ""  # the entry itself could not be read


class _Recorded:
    """A signature read back from an entry, replayed into a local entry's trailer (cache_entry.Signer's shape)."""

    def __init__(self, keyid: bytes, signature: bytes) -> None:
        self.keyid, self._signature = keyid, signature

    def sign(self, message: bytes) -> bytes:
        return self._signature


def unpack(value: Fetched, key: str, trust: cache_entry.Trust | None = None) -> tuple[bytes, bytes, int]:
    """(entry bytes for the local tier, content, mode) of one target fetched under ``key``: CorruptEntry when the
    entry was stored for another step or the blob is damaged, UntrustedEntry when ``trust`` does not vouch for it."""
    where = f"{key} (step {value.action[:16]}…)"
    if value.problem:
        raise cache_entry.CorruptEntry(f"{where}: {value.problem}")
    output, data, seal = value.output, value.data, value.seal
    if output is None or output.path != key or (seal is not None and seal.key != key):
        raise cache_entry.CorruptEntry(f"{where}: its ActionCache entry holds another step's outputs (swapped or "
                                       "copied over)")
    if data is None or not output.digest.matches(data):
        raise cache_entry.CorruptEntry(f"{where}: CAS blob {output.digest.hash[:16]}… does not match its SHA-256 "
                                       "(damaged in the server's storage)")
    mode = seal.mode if seal is not None else (0o755 if output.executable else 0o644)
    if mode & ~0o777:
        raise cache_entry.CorruptEntry(f"{where} has an impossible file mode {mode:o}")
    signer = _Recorded(seal.keyid, seal.signature) if seal is not None and (seal.keyid or seal.signature) else None
    try:
        blob = cache_entry.seal(data, key, signer)
    except ValueError as exc:  # a key id or signature of the wrong size
        raise cache_entry.CorruptEntry(f"{where}: its seal does not fit an entry ({exc})") from None
    return blob, cache_entry.unseal(blob, key, trust), mode


class ReapiTier:
    """One REAPI server's cache as a shared tier, used by SCons's worker threads."""

    corrupt_fate = "replaced there by the next signed push"

    def __init__(self, url: str, say: Callable[[str], None], max_entry: int = MAX_ENTRY_BYTES,
                 signer: cache_entry.Signer | None = None, environ: Mapping[str, str] = os.environ,
                 client: grpc_client.Client | None = None) -> None:
        endpoint = grpc_client.parse_url(url)
        self.url = url  # holds no secret: parse_url refuses credentials in it
        self.max_entry = max_entry
        self.signer = signer  # what signs every push; None: nothing is pushed (REAPI is always a shared tier)
        self.skipped = 0
        self.batch_bytes = BATCH_BYTES
        self._client = client or grpc_client.Client(endpoint, grpc_client.credentials(endpoint, environ))
        self._say = say
        self._down = threading.Event()
        self._no_pushes = threading.Event()
        self._lock = threading.Lock()
        self._checked = False  # GetCapabilities asked (once per run)
        self._forced: set[Digest] = set()  # blobs found damaged: sent again though the server says it has them
        self._pushed: set[str] = set()  # actions pushed this run (--cache-populate pushes a target twice)

    @property
    def enabled(self) -> bool:
        return not self._down.is_set()

    def _say_once(self, event: threading.Event, line: str) -> None:
        with self._lock:
            if event.is_set():
                return
            event.set()
        self._say(line)

    def _fail(self, exc: grpc_client.CallFailed, call: str = "a call") -> None:
        how = f"unreachable ({exc})" if exc.code in UNREACHABLE else f"refused {call} ({exc})"
        self._say_once(self._down, f"WARN: cache: CACHE_URL {self.url} {how}; building with the local cache only")

    def _stop_pushing(self, exc: grpc_client.CallFailed) -> None:
        self._say_once(self._no_pushes, f"WARN: cache: CACHE_URL {self.url} refused a push ({exc}); nothing more is "
                       "pushed there this run, entries are still read from it")

    def _ready(self) -> bool:
        """Whether the server can serve this run, asking GetCapabilities the first time (others wait for it)."""
        with self._lock:
            checked, self._checked = self._checked, True
            if not checked:
                self._check_capabilities()
        return self.enabled

    def _check_capabilities(self) -> None:
        try:
            caps = self._client.capabilities()
        except (grpc_client.CallFailed, WireError) as exc:
            self._down.set()  # under the lock already: said here, once
            how = (f"unreachable ({exc})" if getattr(exc, "code", "") in UNREACHABLE
                   else f"refused GetCapabilities ({exc}; is the instance name right?)")
            self._say(f"WARN: cache: CACHE_URL {self.url} {how}; building with the local cache only")
            return
        if SHA256 not in caps.digest_functions:
            self._down.set()
            self._say(f"WARN: cache: CACHE_URL {self.url} offers {caps.digest_names()} digests, not SHA256; building "
                      "with the local cache only")
            return
        if caps.max_batch_bytes:
            self.batch_bytes = min(self.batch_bytes, caps.max_batch_bytes - (64 << 10))
        if not caps.update_enabled and self.signer is not None:
            self._no_pushes.set()
            self._say(f"NOTE: cache: CACHE_URL {self.url} takes no ActionCache updates from clients; entries are read "
                      "from it, none are pushed")

    def pull(self, keys: Sequence[str]) -> list[Fetched | None] | None:
        """The step whose targets have ``keys``, one value per key (all None: the server has no whole entry);
        None when the tier is off."""
        if not self._ready():
            return None
        action = Digest.of(step_action(keys)[0])
        try:
            raw = self._client.get_action_result(action)
            if raw is None:
                return [None] * len(keys)
            try:
                result = ActionResult.decode(raw)
            except WireError as exc:
                return [Fetched(action.hash, None, None, None, f"its ActionResult is unreadable ({exc})")] * len(keys)
            outputs = {output.path: output for output in result.outputs}
            seals = {seal.key: seal for seal in result.seals}
            wanted = [outputs.get(key) for key in keys]
            blobs = self._read_blobs({output.digest for output in wanted if output is not None})
        except grpc_client.CallFailed as exc:
            self._fail(exc, "a read")
            return None
        if any(output is not None and blobs.get(output.digest) is None for output in wanted):
            return [None] * len(keys)  # a blob is gone (evicted): a miss
        return [Fetched(action.hash, output, blobs.get(output.digest) if output else None, seals.get(key))
                for key, output in zip(keys, wanted)]

    def _read_blobs(self, digests: set[Digest]) -> dict[Digest, bytes | None]:
        found: dict[Digest, bytes | None] = {}
        for batch, large in self._batches(sorted(digests, key=lambda d: (d.size, d.hash))):
            if large:
                found[batch[0]] = self._client.read(batch[0])
            else:
                found.update(self._client.batch_read(batch))
        return found

    def _batches(self, digests: Sequence[Digest]) -> list[tuple[list[Digest], bool]]:
        """The digests in batch calls of at most ``batch_bytes`` each, and each larger one alone (True: ByteStream)."""
        batches: list[tuple[list[Digest], bool]] = []
        current: list[Digest] = []
        size = 0
        for digest in digests:
            if digest.size > self.batch_bytes:
                batches.append(([digest], True))
                continue
            if current and size + digest.size > self.batch_bytes:
                batches.append((current, False))
                current, size = [], 0
            current.append(digest)
            size += digest.size
        return ([(current, False)] if current else []) + batches

    def unpack(self, value: Fetched, key: str, trust: cache_entry.Trust | None = None) -> tuple[bytes, bytes, int]:
        return unpack(value, key, trust)

    def drop(self, key: str, value: Fetched) -> None:
        """A target found corrupt: REAPI deletes nothing, so a damaged blob is marked to be sent again by this run's
        push of the step (the server would say it has it); a swapped entry is replaced by that push."""
        output = value.output
        if output is not None and value.data is not None and not output.digest.matches(value.data):
            with self._lock:
                self._forced.add(output.digest)

    def push_step(self, items: Sequence[tuple[str, str]]) -> int:
        """Store a built step whose targets are ``(key, path)``, signed: its blobs, then its ActionCache entry. The
        number of targets stored (0: none, the step is one unit)."""
        if not self.enabled or self.signer is None or not items or not self._ready() or self._no_pushes.is_set():
            return 0
        read = self._read_targets(items)
        if read is None:
            return 0
        outputs, seals, blobs = read
        action, command = step_action([key for key, _ in items])
        action_digest = Digest.of(action)
        with self._lock:
            if action_digest.hash in self._pushed:
                return 0
        blobs.update({action_digest: action, Digest.of(command): command})
        try:
            with self._lock:
                forced = self._forced & blobs.keys()
            missing = self._client.find_missing(list(blobs)) | forced
            self._upload({digest: blobs[digest] for digest in missing})
            self._client.update_action_result(action_digest, ActionResult(tuple(outputs), tuple(seals)))
        except grpc_client.CallFailed as exc:
            if exc.code in UNREACHABLE:
                self._fail(exc)
            else:
                self._stop_pushing(exc)
            return 0
        with self._lock:
            self._forced -= blobs.keys()
            self._pushed.add(action_digest.hash)
        return len(items)

    def _read_targets(self, items: Sequence[tuple[str, str]]) \
            -> tuple[list[OutputFile], list[EntrySeal], dict[Digest, bytes]] | None:
        """Each target's output, seal and blob; None when one is too large (counted) or went away."""
        assert self.signer is not None
        outputs, seals, blobs = [], [], {}
        for key, path in items:
            try:
                with open(path, "rb") as fh:
                    st = os.fstat(fh.fileno())
                    if st.st_size > self.max_entry:
                        with self._lock:
                            self.skipped += len(items)
                        return None
                    data = fh.read()
            except OSError:
                return None  # the target went away: SCons reports that, not the cache
            digest = Digest.of(data)
            message = cache_entry.signed_message(key, len(data), bytes.fromhex(digest.hash))
            outputs.append(OutputFile(key, digest, bool(st.st_mode & 0o111)))
            seals.append(EntrySeal(key, self.signer.keyid, self.signer.sign(message), st.st_mode & 0o777))
            blobs[digest] = data
        return outputs, seals, blobs

    def _upload(self, blobs: dict[Digest, bytes]) -> None:
        for batch, large in self._batches(sorted(blobs, key=lambda d: (d.size, d.hash))):
            if large:
                self._client.write(batch[0], blobs[batch[0]])
            else:
                self._client.batch_update([(digest, blobs[digest]) for digest in batch])

    def skipped_note(self) -> str | None:
        """The NOTE for entries too large to push, once per run (None when there were none)."""
        if not self.skipped:
            return None
        return (f"NOTE: cache: {self.skipped} entries larger than {self.max_entry >> 20} MiB were not pushed to "
                f"{self.url} (kept in the local cache only)")
