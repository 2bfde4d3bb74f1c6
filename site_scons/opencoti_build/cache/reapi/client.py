"""A REAPI v2 cache client over gRPC: the URL and credentials a build is given, and the calls the cache tier makes
(GetCapabilities, the ActionCache, the CAS's FindMissingBlobs and batch calls, ByteStream for large blobs).

``CACHE_URL=grpc://HOST:PORT[/INSTANCE]`` (plaintext) or ``grpcs://…`` (TLS, the server's certificate checked against
the system's CAs, or ``OPENCOTI_CACHE_TLS_CA``). Credentials never come from the command line or the URL: a token
from ``OPENCOTI_CACHE_TOKEN``, or from the file ``OPENCOTI_CACHE_TOKEN_FILE`` names (sent only over TLS, as
``authorization: Bearer <token>``, or in the header ``OPENCOTI_CACHE_TOKEN_HEADER`` names, as is: BuildBuddy's
``x-buildbuddy-api-key``), and an optional client certificate (``OPENCOTI_CACHE_TLS_CERT`` with
``OPENCOTI_CACHE_TLS_KEY``). They are read once, kept in memory, and appear in no message.

grpc's generic calls carry our own encoded bytes (opencoti_build.cache.reapi.messages): no generated stubs, no protobuf
runtime. Every call has a deadline and no retries; a failure is a :class:`CallFailed` carrying the gRPC code, which
the tier (opencoti_build.cache.reapi.tier) turns into one WARN.
"""
from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from opencoti_build.cache.reapi import messages
from opencoti_build.cache.reapi.messages import ActionResult, Digest
from opencoti_build.errors import UserError

URL_FORM = "grpc://HOST:PORT[/INSTANCE] (grpcs:// for TLS)"
TOKEN, TOKEN_FILE, TOKEN_HEADER = "OPENCOTI_CACHE_TOKEN", "OPENCOTI_CACHE_TOKEN_FILE", "OPENCOTI_CACHE_TOKEN_HEADER"
BEARER = "authorization"  # the default header: "Bearer <token>"; any other carries the token as it is
TLS_CA, TLS_CERT, TLS_KEY = "OPENCOTI_CACHE_TLS_CA", "OPENCOTI_CACHE_TLS_CERT", "OPENCOTI_CACHE_TLS_KEY"
CALL_TIMEOUT_S = 8.0  # one unary call (a server on a LAN answers in milliseconds; a loaded one in a few seconds)
STREAM_BYTES_PER_S = 8 << 20  # a ByteStream call's deadline grows with its size, at least this rate
CHUNK_BYTES = 1 << 20  # ByteStream write chunks (well under gRPC's 4 MiB message limit)
MAX_MESSAGE_BYTES = 64 << 20  # what a response may hold (BatchReadBlobs stays under the batch limit anyway)
# Path segments REAPI reserves in resource names: an instance name cannot hold them.
_RESERVED = {"blobs", "uploads", "actions", "actionResults", "operations", "capabilities", "compressed-blobs"}
_V2 = "/build.bazel.remote.execution.v2."
GET_CAPABILITIES = _V2 + "Capabilities/GetCapabilities"
GET_ACTION_RESULT = _V2 + "ActionCache/GetActionResult"
UPDATE_ACTION_RESULT = _V2 + "ActionCache/UpdateActionResult"
FIND_MISSING = _V2 + "ContentAddressableStorage/FindMissingBlobs"
BATCH_UPDATE = _V2 + "ContentAddressableStorage/BatchUpdateBlobs"
BATCH_READ = _V2 + "ContentAddressableStorage/BatchReadBlobs"
BYTESTREAM_READ = "/google.bytestream.ByteStream/Read"
BYTESTREAM_WRITE = "/google.bytestream.ByteStream/Write"
NOT_FOUND = "NOT_FOUND"


@dataclass(frozen=True)
class Endpoint:
    """Where a REAPI cache is: ``target`` for gRPC (host:port), its instance name, TLS or not."""

    url: str
    target: str
    instance: str
    tls: bool


@dataclass(frozen=True)
class Credentials:
    """What the environment gives to reach the server; the token and the key stay in memory."""

    token: str | None = None
    header: str = BEARER
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None

    def __repr__(self) -> str:  # never the secrets
        return f"Credentials(token={'***' if self.token else None}, client certificate={self.cert is not None})"


class CallFailed(Exception):
    """A call the server did not answer, or answered with an error: ``code`` is the gRPC status's name."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code


def is_reapi(url: str) -> bool:
    return url.split("://", 1)[0] in ("grpc", "grpcs")


def parse_url(url: str) -> Endpoint:
    """The endpoint of a ``grpc://`` or ``grpcs://`` CACHE_URL; a one-line UserError naming CACHE_URL otherwise (a
    credential in the URL is refused: it would reach the command line and logs)."""
    bad = UserError(f"CACHE_URL={url} is not a REAPI cache URL; use CACHE_URL={URL_FORM}, or leave it empty")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise bad from None
    if parts.username is not None or parts.password is not None:
        raise UserError(f"CACHE_URL={parts.scheme}://***@{parts.netloc.rsplit('@', 1)[1]} carries a credential; "
                        f"give the token in {TOKEN} (or a file named by {TOKEN_FILE}), never in the URL")
    instance = parts.path.strip("/")
    segments = instance.split("/") if instance else []
    if (parts.scheme not in ("grpc", "grpcs") or not parts.hostname or port is None or parts.query
            or parts.fragment or "//" in parts.path or _RESERVED & set(segments)):
        raise bad
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return Endpoint(url, f"{host}:{port}", instance, parts.scheme == "grpcs")


def _read(name: str, environ: Mapping[str, str], what: str) -> bytes | None:
    path = environ.get(name)
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"{name}={path}: cannot read it ({exc.strerror or exc}); point it at {what}, or unset it") \
            from None


def _token(environ: Mapping[str, str]) -> str | None:
    token = environ.get(TOKEN)
    if token is None and environ.get(TOKEN_FILE):
        raw = _read(TOKEN_FILE, environ, "a file holding the cache's bearer token")
        token = (raw or b"").decode("utf-8", "replace").strip()
        where = f"the file {TOKEN_FILE} names"
    else:
        where = TOKEN
    if token is None:
        return None
    if not token or not token.isprintable() or any(c.isspace() for c in token) or not token.isascii():
        raise UserError(f"{where} holds no usable token (empty, or with spaces or control characters); give the "
                        "bearer token alone")
    return token


def credentials(endpoint: Endpoint, environ: Mapping[str, str] = os.environ) -> Credentials:
    """The credentials the environment gives for ``endpoint``; a one-line UserError when one cannot be used (a file
    that is not there, a token without TLS, a certificate without its key)."""
    token = _token(environ)
    if token is not None and not endpoint.tls:
        raise UserError(f"{TOKEN if environ.get(TOKEN) is not None else TOKEN_FILE} is set but CACHE_URL={endpoint.url}"
                        " is plaintext: the token would cross the network in the clear; use grpcs://, or unset it")
    cert = _read(TLS_CERT, environ, "the client certificate (PEM)")
    key = _read(TLS_KEY, environ, "the client certificate's private key (PEM)")
    if (cert is None) != (key is None):
        raise UserError(f"{TLS_CERT if cert is not None else TLS_KEY} is set without "
                        f"{TLS_KEY if cert is not None else TLS_CERT}; a client certificate needs both (PEM files)")
    ca = _read(TLS_CA, environ, "the CA certificates (PEM) the server's certificate is checked against")
    if (cert is not None or ca is not None) and not endpoint.tls:
        raise UserError(f"{TLS_CERT if cert is not None else TLS_CA} is set but CACHE_URL={endpoint.url} is "
                        "plaintext; use grpcs://, or unset it")
    header = environ.get(TOKEN_HEADER, BEARER).strip().lower()
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", header) or header.startswith("grpc-") or header.endswith("-bin"):
        raise UserError(f"{TOKEN_HEADER}={header} is not a header a token can go in; name a gRPC metadata key such as "
                        "x-buildbuddy-api-key, or unset it for authorization: Bearer")
    return Credentials(token, header, ca, cert, key)


def _identity(data: bytes) -> bytes:
    return data


class Client:
    """One REAPI server's cache services, shared by SCons's worker threads (a gRPC channel is thread-safe)."""

    def __init__(self, endpoint: Endpoint, creds: Credentials, timeout: float = CALL_TIMEOUT_S) -> None:
        import grpc  # here, not at the top: a build without a grpc CACHE_URL does not pay its import

        self.endpoint = endpoint
        self.timeout = timeout
        self._grpc = grpc
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES), ("grpc.enable_retries", 0)]
        if endpoint.tls:
            channel_creds = grpc.ssl_channel_credentials(creds.ca, creds.key, creds.cert)
            self._channel = grpc.secure_channel(endpoint.target, channel_creds, options)
        else:
            self._channel = grpc.insecure_channel(endpoint.target, options)
        value = f"Bearer {creds.token}" if creds.header == BEARER else creds.token
        self._metadata = ((creds.header, value),) if creds.token else ()

    def close(self) -> None:
        self._channel.close()

    def _failed(self, exc: Any) -> CallFailed:
        code = exc.code() if hasattr(exc, "code") else None
        detail = exc.details() if hasattr(exc, "details") else str(exc)
        name = code.name if code is not None else type(exc).__name__
        return CallFailed(name, (detail or "").strip().splitlines()[0] if (detail or "").strip() else "")

    def _unary(self, path: str, request: bytes, timeout: float | None = None) -> bytes:
        call = self._channel.unary_unary(path, request_serializer=_identity, response_deserializer=_identity)
        try:
            return call(request, timeout=timeout or self.timeout, metadata=self._metadata)
        except self._grpc.RpcError as exc:
            raise self._failed(exc) from None

    def capabilities(self) -> messages.Capabilities:
        return messages.Capabilities.decode(self._unary(GET_CAPABILITIES,
                                                        messages.capabilities_request(self.endpoint.instance)))

    def get_action_result(self, action: Digest) -> bytes | None:
        """The encoded ActionResult cached for ``action``; None when there is none (NOT_FOUND)."""
        try:
            return self._unary(GET_ACTION_RESULT, messages.get_action_result_request(self.endpoint.instance, action))
        except CallFailed as exc:
            if exc.code == NOT_FOUND:
                return None
            raise

    def update_action_result(self, action: Digest, result: ActionResult) -> None:
        self._unary(UPDATE_ACTION_RESULT, messages.update_action_result_request(self.endpoint.instance, action, result))

    def find_missing(self, digests: Sequence[Digest]) -> set[Digest]:
        if not digests:
            return set()
        raw = self._unary(FIND_MISSING, messages.find_missing_request(self.endpoint.instance, digests))
        return set(messages.find_missing_response(raw))

    def batch_update(self, blobs: Sequence[tuple[Digest, bytes]]) -> None:
        """Store small blobs in one call; CallFailed with the first blob's own error when the server refused one."""
        raw = self._unary(BATCH_UPDATE, messages.batch_update_request(self.endpoint.instance, blobs))
        for digest, status in messages.batch_update_response(raw):
            if status.code:
                raise CallFailed(_code_name(self._grpc, status.code), f"blob {digest.hash[:16]}…: {status.message}")

    def batch_read(self, digests: Sequence[Digest]) -> dict[Digest, bytes | None]:
        """The blobs the server holds, by digest (None: not found); as sent, unchecked (the tier checks each)."""
        raw = self._unary(BATCH_READ, messages.batch_read_request(self.endpoint.instance, digests))
        found: dict[Digest, bytes | None] = dict.fromkeys(digests)
        for digest, data, status in messages.batch_read_response(raw):
            if status.code == 0:
                found[digest] = data
            elif status.code != 5:  # NOT_FOUND stays None
                raise CallFailed(_code_name(self._grpc, status.code), f"blob {digest.hash[:16]}…: {status.message}")
        return found

    def _stream_timeout(self, size: int) -> float:
        return self.timeout + size / STREAM_BYTES_PER_S

    def read(self, digest: Digest) -> bytes | None:
        """A blob through ByteStream.Read (None: not found), unchecked."""
        call = self._channel.unary_stream(BYTESTREAM_READ, request_serializer=_identity,
                                          response_deserializer=_identity)
        request = messages.read_request(digest.resource(self.endpoint.instance))
        try:
            parts = [messages.read_response(r) for r in call(request, timeout=self._stream_timeout(digest.size),
                                                              metadata=self._metadata)]
        except self._grpc.RpcError as exc:
            failed = self._failed(exc)
            if failed.code == NOT_FOUND:
                return None
            raise failed from None
        return b"".join(parts)

    def write(self, digest: Digest, data: bytes) -> None:
        """A blob through ByteStream.Write, in chunks."""
        call = self._channel.stream_unary(BYTESTREAM_WRITE, request_serializer=_identity,
                                          response_deserializer=_identity)
        resource = digest.upload(self.endpoint.instance, str(uuid.uuid4()))

        def chunks() -> Iterator[bytes]:
            offsets = range(0, max(len(data), 1), CHUNK_BYTES)
            for n, offset in enumerate(offsets):
                last = n == len(offsets) - 1
                yield messages.write_request(resource if n == 0 else None, offset,
                                             data[offset:offset + CHUNK_BYTES], last)
        try:
            committed = messages.write_response(call(chunks(), timeout=self._stream_timeout(len(data)),
                                                     metadata=self._metadata))
        except self._grpc.RpcError as exc:
            raise self._failed(exc) from None
        if committed not in (len(data), -1):
            raise CallFailed("DATA_LOSS", f"ByteStream.Write committed {committed} of {len(data)} bytes")


def _code_name(grpc: Any, number: int) -> str:
    """The name of a google.rpc.Status code number (UNKNOWN for one grpc does not know)."""
    return next((code.name for code in grpc.StatusCode if code.value[0] == number), "UNKNOWN")
