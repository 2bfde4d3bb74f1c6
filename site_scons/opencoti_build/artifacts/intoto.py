"""The in-toto Statement as it lies beside an artifact (``<artifact>.intoto.jsonl``): what makes one valid
(:func:`why_not_valid_statement`), the line it is written as (canonical JSON, or with a signer its DSSE envelope), and
reading it back (:func:`read_statement`, the signature: :func:`why_not_verified`). opencoti_build.artifacts.provenance
makes the Statements and checks them against the artifact; verify checks their signatures.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from opencoti_build.errors import UserError, WhyNot

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
# in-toto's DigestSet (spec/v1/digest_set.md): Go's dirhash Hash1 of a file tree, in lowercase hex
DIR_HASH = "dirHash"
# how many lowercase hex digits a digest of each algorithm this project writes has; any other is only non-empty
HEX_DIGITS: dict[str, tuple[int, ...]] = {"sha256": (64,), DIR_HASH: (64,), "gitCommit": (40, 64)}


class ProvenanceError(UserError):
    """A provenance file (an SBOM, a Statement) that cannot be made, written or read: one line naming it (a key file
    that cannot be used: opencoti_build.config.signing_keys)."""


class SignatureError(ProvenanceError):
    """A Statement's DSSE signature does not verify with the public key given (or there is none to verify)."""


def why_not_valid_statement(document: Mapping[str, Any]) -> WhyNot:
    """Why ``document`` is not a valid in-toto v1 Statement of SLSA provenance v1, or None.

    in-toto-attestation's checks (the document parses as its Statement and its predicate as its SLSA Provenance, no
    field unknown to them; ``Statement.validate``; ``ResourceDescriptor.validate`` of every subject, resolved
    dependency and byproduct), then what the library leaves out: the ResourceDescriptor's minimum, one of ``uri``,
    ``digest`` or ``content`` (the library takes a name alone), each digest's value in lowercase hex of its
    algorithm's length, and SLSA's required ``buildType`` and ``builder.id``."""
    from google.protobuf import json_format
    from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement

    try:
        stmt = Statement.copy_from_pb(json_format.ParseDict(document, statement_pb2.Statement()))
        stmt.validate()
        if stmt.pb.predicate_type != SLSA_PROVENANCE:
            return f"its predicateType is {stmt.pb.predicate_type!r}, not {SLSA_PROVENANCE}"
        predicate = json_format.ParseDict(document["predicate"], provenance_pb2.Provenance())
    except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if not predicate.build_definition.build_type:
        return "its buildDefinition has no buildType"
    if not predicate.run_details.builder.id:
        return "its runDetails name no builder.id"
    described = ([("subject", i, d) for i, d in enumerate(stmt.pb.subject)]
                 + [("resolved dependency", i, d) for i, d in enumerate(predicate.build_definition.resolved_dependencies)]
                 + [("byproduct", i, d) for i, d in enumerate(predicate.run_details.byproducts)])
    for what, index, descriptor in described:
        problem = _why_not_valid_descriptor(f"{what} {descriptor.name}" if descriptor.name else f"{what} #{index}",
                                      descriptor)
        if problem:
            return problem
    return None


def _why_not_valid_descriptor(label: str, descriptor: Any) -> WhyNot:
    """Why a ResourceDescriptor (``label``: what it describes) is not valid: the library's check, the minimum it
    leaves out (one of uri, digest or content) and each digest in lowercase hex of its algorithm's length."""
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor

    try:
        ResourceDescriptor.copy_from_pb(descriptor).validate()
    except ValueError as exc:
        return f"{label}: {exc}"
    if not (descriptor.uri or descriptor.digest or descriptor.content):
        return f"{label} has none of uri, digest or content (a ResourceDescriptor must have one)"
    for algorithm, value in sorted(descriptor.digest.items()):
        digits = HEX_DIGITS.get(algorithm, ())
        if not value:
            return f"{label}: its {algorithm} digest is empty"
        if digits and (len(value) not in digits or value.strip("0123456789abcdef")):
            return (f"{label}: its {algorithm} digest {value!r} is not "
                    f"{' or '.join(map(str, digits))} lowercase hex digits")
    return None


def canonical(document: Mapping[str, Any]) -> bytes:
    """The bytes a statement is written and signed as: sorted keys, no spaces."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def statement_line(document: Mapping[str, Any], signer: Any = None) -> str:
    """The ``.intoto.jsonl`` line: the Statement, or with ``signer`` its DSSE envelope."""
    if signer is None:
        return canonical(document).decode() + "\n"
    from securesystemslib.dsse import Envelope

    envelope = Envelope(payload=canonical(document), payload_type=PAYLOAD_TYPE, signatures={})
    envelope.sign(signer)
    return json.dumps(envelope.to_dict(), sort_keys=True, separators=(",", ":")) + "\n"


def read_statement(path: Path, public_key: Any = None) -> tuple[dict[str, Any], bool]:
    """(the Statement in ``path``, whether it came in a DSSE envelope); with ``public_key`` the envelope's signature
    is verified (ProvenanceError when it does not verify, or when the statement is not signed)."""
    try:
        line = path.read_text(encoding="utf-8").strip()
        data = json.loads(line)
    except OSError as exc:
        raise ProvenanceError(f"{path}: cannot read it: {exc.strerror}") from None
    except ValueError as exc:
        raise ProvenanceError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ProvenanceError(f"{path}: not a Statement or a DSSE envelope")
    if "payloadType" not in data:
        if public_key is not None:
            raise SignatureError(f"{path} is not signed, but a public key was given; package with SIGNING_KEY=")
        return data, False
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError

    try:
        envelope = Envelope.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProvenanceError(f"{path}: not a DSSE envelope ({exc})") from None
    if public_key is not None:
        try:
            envelope.verify([public_key], 1)
        except VerificationError:
            raise SignatureError(f"{path}: its signature does not verify with the public key given") from None
    try:
        document = json.loads(envelope.payload)
    except ValueError as exc:
        raise ProvenanceError(f"{path}: the envelope's payload is not JSON ({exc})") from None
    return document, True


def is_signed(path: Path) -> bool:
    """Whether the ``.intoto.jsonl`` at ``path`` is a DSSE envelope (a signed Statement); False when unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "payloadType" in data


def why_not_verified(path: Path, public_key: Any) -> WhyNot:
    """Why the Statement at ``path`` does not verify with ``public_key`` (signed by another key, altered after
    signing, or not signed at all), or None when it does; what :func:`why_not_matching` checks is not looked at."""
    try:
        read_statement(path, public_key)
    except SignatureError as exc:
        return str(exc)
    except ProvenanceError:
        return None  # not readable as a Statement: why_not_matching says so
    return None
