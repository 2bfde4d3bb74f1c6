"""The key files SIGNING_KEY= and PUBKEY= (``opencoti-build verify --pubkey``) name, loaded: the DSSE signer of the
provenance Statements (opencoti_build.artifacts.provenance writes them) and the public key their signatures are
verified with (artifacts/verify.py). buildvars loads each one before anything is written or read, so a key that
cannot be used is refused in one line first.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from opencoti_build.errors import UserError


class KeyFileError(UserError):
    """A SIGNING_KEY or PUBKEY file that cannot be used: one line naming it and the fix."""


def load_private_key(path: Path) -> Any:
    """The ed25519 or ECDSA P-256 private key in the PEM file ``path`` (unencrypted), as a signer."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from securesystemslib.signer import CryptoSigner

    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except OSError as exc:
        raise KeyFileError(f"SIGNING_KEY={path}: cannot read it: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"SIGNING_KEY={path} is not an unencrypted PEM private key ({exc}); give an ed25519 or "
                           "ECDSA P-256 key, e.g. `openssl genpkey -algorithm ed25519 -out key.pem`") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey) and not (
            isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1)):
        raise KeyFileError(f"SIGNING_KEY={path} is a {type(key).__name__.removeprefix('_')}; DSSE signing here "
                           "takes an ed25519 or ECDSA P-256 key")
    return CryptoSigner(key)


def load_public_key(path: Path, given_as: str = "--pubkey ") -> Any:
    """The public key in the PEM file ``path`` as a securesystemslib key (``given_as``: how the messages name it,
    ``--pubkey `` or ``PUBKEY=``)."""
    from cryptography.hazmat.primitives.serialization import load_pem_public_key
    from securesystemslib.signer import SSlibKey

    try:
        return SSlibKey.from_crypto(load_pem_public_key(path.read_bytes()))
    except OSError as exc:
        raise KeyFileError(f"{given_as}{path}: cannot read it: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{given_as}{path} is not a PEM public key ({exc}); give the public half of the "
                           "SIGNING_KEY, e.g. `openssl pkey -in key.pem -pubout -out key.pub`") from None
