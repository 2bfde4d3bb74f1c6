"""The REAPI v2 messages the cache tier sends and reads, written from the spec's field numbers
(build.bazel.remote.execution.v2, google.bytestream, google.rpc.Status, google.protobuf.Any) over our wire codec.

Only what a cache client needs: digests, ActionResults with output files, the requests of the ActionCache,
ContentAddressableStorage, Capabilities and ByteStream services, and their responses. Every decoder checks what it
returns (a digest is 64 lowercase hex digits and a size that is not negative) and raises WireError otherwise.

A cached step is named the way REAPI names any action: by the digest of an ``Action`` whose ``Command`` lists the
step's targets' keys (the local tier's layout-independent signatures, opencoti_scons/cachedir.py), so the action
digest is as layout-free as the keys, and the server holds an entry any REAPI tool can look up.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from opencoti_build.cache.reapi import wire
from opencoti_build.cache.reapi.wire import WireError

SHA256 = 1  # DigestFunction.Value.SHA256
DIGEST_NAMES = {0: "UNKNOWN", 1: "SHA256", 2: "SHA1", 3: "MD5", 4: "VSO", 5: "SHA384", 6: "SHA512", 7: "MURMUR3",
                8: "SHA256TREE", 9: "BLAKE3", 10: "GITSHA1"}
# What an entry's signature travels as: one google.protobuf.Any per output in ExecutedActionMetadata.auxiliary_metadata
SEAL_TYPE = "type.googleapis.com/opencoti.cache.v3.EntrySeal"
# The first arguments of a cached step's Command: a new entry format takes a new version here.
STEP_COMMAND = ("opencoti-cache-step", "v3")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Digest:
    """A blob's SHA-256 (lowercase hex) and size: how REAPI names every blob and action."""

    hash: str
    size: int

    @classmethod
    def of(cls, data: bytes) -> Digest:
        return cls(hashlib.sha256(data).hexdigest(), len(data))

    def encode(self) -> bytes:
        return wire.message([(1, self.hash), (2, self.size or None)])

    @classmethod
    def decode(cls, raw: bytes) -> Digest:
        fields = wire.decode(raw)
        digest = cls(wire.text(fields, 1), wire.integer(fields, 2, signed=True))
        if not _HEX64.fullmatch(digest.hash) or digest.size < 0:
            raise WireError(f"not a SHA-256 digest: {digest.hash[:70]!r}/{digest.size}")
        return digest

    def matches(self, data: bytes) -> bool:
        """Whether ``data`` is the blob this digest names."""
        return len(data) == self.size and hashlib.sha256(data).hexdigest() == self.hash

    def resource(self, instance: str) -> str:
        """The ByteStream resource name to read this blob."""
        return _prefixed(instance, f"blobs/{self.hash}/{self.size}")

    def upload(self, instance: str, uuid: str) -> str:
        """The ByteStream resource name to write this blob."""
        return _prefixed(instance, f"uploads/{uuid}/blobs/{self.hash}/{self.size}")


def _prefixed(instance: str, name: str) -> str:
    return f"{instance}/{name}" if instance else name


@dataclass(frozen=True)
class OutputFile:
    """One output of a cached step: its path (the target's key), its content's digest, the executable bit."""

    path: str
    digest: Digest
    executable: bool = False

    def encode(self) -> bytes:
        return wire.message([(1, self.path), (2, self.digest.encode()), (4, True if self.executable else None)])

    @classmethod
    def decode(cls, raw: bytes) -> OutputFile:
        fields = wire.decode(raw)
        return cls(wire.text(fields, 1), Digest.decode(wire.data(fields, 2)), bool(wire.integer(fields, 4)))


@dataclass(frozen=True)
class EntrySeal:
    """What the local tier's trailer holds beside the content (opencoti_build.cache.cache_entry): the key an output
    was stored under, the signing key's id and its signature, and the file mode. REAPI has no field for a signature,
    so it travels as a google.protobuf.Any in the ActionResult's execution_metadata.auxiliary_metadata."""

    key: str
    keyid: bytes
    signature: bytes
    mode: int

    def encode(self) -> bytes:
        body = wire.message([(1, self.key), (2, self.keyid or None), (3, self.signature or None), (4, self.mode)])
        return wire.message([(1, SEAL_TYPE), (2, body)])

    @classmethod
    def decode(cls, any_message: bytes) -> EntrySeal | None:
        """The seal an Any carries; None when the Any is of another type (another tool's metadata)."""
        outer = wire.decode(any_message)
        if wire.text(outer, 1) != SEAL_TYPE:
            return None
        fields = wire.decode(wire.data(outer, 2))
        return cls(wire.text(fields, 1), wire.data(fields, 2), wire.data(fields, 3), wire.integer(fields, 4))


@dataclass(frozen=True)
class ActionResult:
    """A cached step: its output files (each a CAS blob) and their seals."""

    outputs: tuple[OutputFile, ...]
    seals: tuple[EntrySeal, ...]

    def encode(self) -> bytes:
        metadata = wire.message([(1, "opencoti-build"), *((11, seal.encode()) for seal in self.seals)])
        return wire.message([*((2, output.encode()) for output in self.outputs), (9, metadata)])

    @classmethod
    def decode(cls, raw: bytes) -> ActionResult:
        fields = wire.decode(raw)
        outputs = tuple(OutputFile.decode(o) for o in wire.repeated(fields, 2))
        metadata = wire.decode(wire.data(fields, 9))
        seals = (EntrySeal.decode(a) for a in wire.repeated(metadata, 11))
        return cls(outputs, tuple(seal for seal in seals if seal is not None))


def step_action(keys: Sequence[str]) -> tuple[bytes, bytes]:
    """(Action, Command) of the cached step whose targets have ``keys``, in the step's order: the Command lists the
    keys as its arguments and its output paths, the input root is the empty Directory."""
    command = wire.message([*((1, arg) for arg in (*STEP_COMMAND, *keys)), *((7, key) for key in keys)])
    action = wire.message([(1, Digest.of(command).encode()), (2, Digest.of(b"").encode())])
    return action, command


@dataclass(frozen=True)
class Status:
    """A google.rpc.Status: a gRPC code (0: OK) and its message."""

    code: int
    message: str

    @classmethod
    def decode(cls, raw: bytes) -> Status:
        fields = wire.decode(raw)
        return cls(wire.integer(fields, 1, signed=True), wire.text(fields, 2))


@dataclass(frozen=True)
class Capabilities:
    """What a server's CacheCapabilities say that this client uses."""

    digest_functions: tuple[int, ...]
    update_enabled: bool
    max_batch_bytes: int  # 0: the server sets no limit

    @classmethod
    def decode(cls, raw: bytes) -> Capabilities:
        cache = wire.decode(wire.data(wire.decode(raw), 1))
        update = wire.decode(wire.data(cache, 2))
        return cls(tuple(wire.repeated_ints(cache, 1)), bool(wire.integer(update, 1)), wire.integer(cache, 4, True))

    def digest_names(self) -> str:
        return ", ".join(DIGEST_NAMES.get(n, str(n)) for n in self.digest_functions) or "none"


def _instance(instance: str) -> tuple[int, str | None]:
    return (1, instance or None)


def capabilities_request(instance: str) -> bytes:
    return wire.message([_instance(instance)])


def get_action_result_request(instance: str, action: Digest) -> bytes:
    return wire.message([_instance(instance), (2, action.encode()), (6, SHA256)])


def update_action_result_request(instance: str, action: Digest, result: ActionResult) -> bytes:
    return wire.message([_instance(instance), (2, action.encode()), (3, result.encode()), (5, SHA256)])


def find_missing_request(instance: str, digests: Iterable[Digest]) -> bytes:
    return wire.message([_instance(instance), *((2, d.encode()) for d in digests), (3, SHA256)])


def find_missing_response(raw: bytes) -> list[Digest]:
    return [Digest.decode(d) for d in wire.repeated(wire.decode(raw), 2)]


def batch_update_request(instance: str, blobs: Iterable[tuple[Digest, bytes]]) -> bytes:
    requests = (wire.message([(1, digest.encode()), (2, data)]) for digest, data in blobs)
    return wire.message([_instance(instance), *((2, r) for r in requests), (5, SHA256)])


def batch_update_response(raw: bytes) -> list[tuple[Digest, Status]]:
    found = []
    for response in wire.repeated(wire.decode(raw), 1):
        fields = wire.decode(response)
        found.append((Digest.decode(wire.data(fields, 1)), Status.decode(wire.data(fields, 2))))
    return found


def batch_read_request(instance: str, digests: Iterable[Digest]) -> bytes:
    return wire.message([_instance(instance), *((2, d.encode()) for d in digests), (4, SHA256)])


def batch_read_response(raw: bytes) -> list[tuple[Digest, bytes, Status]]:
    found = []
    for response in wire.repeated(wire.decode(raw), 1):
        fields = wire.decode(response)
        found.append((Digest.decode(wire.data(fields, 1)), wire.data(fields, 2), Status.decode(wire.data(fields, 3))))
    return found


def read_request(resource: str) -> bytes:
    return wire.message([(1, resource)])


def read_response(raw: bytes) -> bytes:
    return wire.data(wire.decode(raw), 10)


def write_request(resource: str | None, offset: int, data: bytes, finish: bool) -> bytes:
    """One WriteRequest of a ByteStream upload (the resource name on the first only)."""
    return wire.message([(1, resource), (2, offset or None), (3, True if finish else None), (10, data)])


def write_response(raw: bytes) -> int:
    return wire.integer(wire.decode(raw), 1, signed=True)
