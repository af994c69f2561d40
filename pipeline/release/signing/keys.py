"""Keys: a file signer (Ed25519 or ECDSA P-256 PEM), public keys to verify with, and the
one place that finds the release signer (a key file, its PEM, or a plugged-in KMS signer).

A key's id is `sha256:` + the hex SHA-256 of its SubjectPublicKeyInfo (DER): the same key
has the same id wherever it is configured, so an overlay cannot give one key two names.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from pipeline.errors import UsageError
from pipeline.release.signing.dsse import Signer

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey

SIGNING_KEY_ENV = "SERVE_PIPELINE_SIGNING_KEY"          # path to a PEM private key
SIGNING_KEY_PEM_ENV = "SERVE_PIPELINE_SIGNING_KEY_PEM"  # the PEM itself (a CI secret)
SIGNER_ENV = "SERVE_PIPELINE_SIGNER"                    # module:function returning a Signer
APPROVAL_KEY_ENV = "SERVE_PIPELINE_APPROVAL_KEY"        # path to an approver's PEM key


def key_fingerprint(public: PublicKey) -> str:
    der = public.public_bytes(serialization.Encoding.DER,
                              serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def _checked_private(key: object, where: str) -> PrivateKey:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    raise UsageError(f"{where}: only Ed25519 and ECDSA P-256 keys are supported")


def _checked_public(key: object, where: str) -> PublicKey:
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    raise UsageError(f"{where}: only Ed25519 and ECDSA P-256 public keys are supported")


class FileSigner:
    """A private key held in this process (read from a PEM file or a secret)."""

    def __init__(self, key: PrivateKey) -> None:
        self._key = key
        self.public_key: PublicKey = key.public_key()
        self._keyid = key_fingerprint(self.public_key)

    @property
    def keyid(self) -> str:
        return self._keyid

    def sign(self, data: bytes) -> bytes:
        if isinstance(self._key, ed25519.Ed25519PrivateKey):
            return self._key.sign(data)
        return self._key.sign(data, ec.ECDSA(hashes.SHA256()))

    @classmethod
    def from_pem(cls, pem: bytes, where: str) -> FileSigner:
        try:
            key = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{where}: not an unencrypted PEM private key "
                             f"({str(exc).splitlines()[0]})") from None
        return cls(_checked_private(key, where))

    @classmethod
    def from_file(cls, path: Path) -> FileSigner:
        try:
            pem = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"signing key {path}: {exc.strerror}") from None
        return cls.from_pem(pem, f"signing key {path}")


@dataclass(frozen=True)
class TrustedKey:
    """A public key an environment trusts, under the id its overlay gives it."""

    name: str
    public_key: PublicKey
    owner: str | None = None

    @property
    def keyid(self) -> str:
        return key_fingerprint(self.public_key)

    def verify(self, signature: bytes, data: bytes) -> bool:
        try:
            if isinstance(self.public_key, ed25519.Ed25519PublicKey):
                self.public_key.verify(signature, data)
            else:
                self.public_key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return False
        return True


def load_public_key(text: str, workspace: Path, where: str) -> PublicKey:
    """`text` is a PEM public key, or a path to one (relative to the spec's folder)."""
    if text.lstrip().startswith("-----BEGIN"):
        pem = text.encode()
    else:
        path = Path(text) if Path(text).is_absolute() else workspace / text
        try:
            pem = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"{where}: public key {path}: {exc.strerror}") from None
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError):
        raise UsageError(f"{where}: not a PEM public key") from None
    return _checked_public(key, where)


def release_signer(env: Mapping[str, str]) -> Signer | None:
    """The signer for release attestations, or None (the release is published unsigned).

    `SERVE_PIPELINE_SIGNER=module:function` plugs in a signer that keeps its key elsewhere
    (a KMS); otherwise a PEM from `SERVE_PIPELINE_SIGNING_KEY_PEM` or the file
    `SERVE_PIPELINE_SIGNING_KEY` names."""
    plugged = env.get(SIGNER_ENV)
    if plugged:
        return _plugged_signer(plugged)
    pem = env.get(SIGNING_KEY_PEM_ENV)
    if pem:
        return FileSigner.from_pem(pem.encode(), SIGNING_KEY_PEM_ENV)
    path = env.get(SIGNING_KEY_ENV)
    return FileSigner.from_file(Path(path)) if path else None


def _plugged_signer(reference: str) -> Signer:
    module_name, _, function_name = reference.partition(":")
    where = f"{SIGNER_ENV}={reference}"
    try:
        factory = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UsageError(f"{where}: cannot load ({exc})") from None
    signer = factory()
    if not callable(getattr(signer, "sign", None)) or not isinstance(
            getattr(signer, "keyid", None), str):
        raise UsageError(f"{where}: the factory returned no Signer (needs keyid and sign)")
    return signer  # type: ignore[no-any-return]
