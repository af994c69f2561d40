"""DSSE envelopes (github.com/secure-systems-lab/dsse, protocol and envelope v1.0.0).

The signature covers PAE(payloadType, payload), never the JSON around it, so that any
DSSE verifier (securesystemslib, sigstore, in-toto) checks our envelopes unchanged.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


class EnvelopeError(ValueError):
    """An envelope that cannot be decoded; says what is wrong."""


def pae(payload_type: str, body: bytes) -> bytes:
    """Pre-Authentication Encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


class Signer(Protocol):
    """Something that signs bytes with a private key it may never show (a file, a KMS)."""

    @property
    def keyid(self) -> str: ...

    def sign(self, data: bytes) -> bytes: ...


class Verifier(Protocol):
    @property
    def keyid(self) -> str: ...

    def verify(self, signature: bytes, data: bytes) -> bool: ...


AnyVerifier = TypeVar("AnyVerifier", bound=Verifier)


@dataclass(frozen=True)
class Signature:
    keyid: str
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]

    def to_json(self) -> dict[str, Any]:
        return {"payload": base64.b64encode(self.payload).decode(),
                "payloadType": self.payload_type,
                "signatures": [{"keyid": s.keyid, "sig": base64.b64encode(s.sig).decode()}
                               for s in self.signatures]}

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), indent=2).encode()

    @classmethod
    def from_json(cls, body: Any) -> Envelope:
        if not isinstance(body, dict):
            raise EnvelopeError("not a JSON object")
        payload, kind, signatures = (body.get(k) for k in ("payload", "payloadType",
                                                           "signatures"))
        if not isinstance(payload, str) or not isinstance(kind, str):
            raise EnvelopeError("payload and payloadType must be strings")
        if not isinstance(signatures, list):
            raise EnvelopeError("signatures must be a list")
        parsed = []
        for entry in signatures:
            if not isinstance(entry, dict) or not isinstance(entry.get("sig"), str):
                raise EnvelopeError("every signature needs a base64 `sig`")
            parsed.append(Signature(str(entry.get("keyid") or ""), _b64(entry["sig"])))
        return cls(kind, _b64(payload), tuple(parsed))

    @classmethod
    def from_bytes(cls, data: bytes) -> Envelope:
        try:
            return cls.from_json(json.loads(data))
        except (ValueError, UnicodeDecodeError) as exc:
            raise EnvelopeError(f"not a DSSE envelope ({exc})") from None


def _b64(text: str) -> bytes:
    """Standard or URL-safe base64, as the protocol says verifiers must accept."""
    try:
        padded = text + "=" * (-len(text) % 4)
        alphabet = b"-_" if ("-" in text or "_" in text) else None
        return base64.b64decode(padded, altchars=alphabet, validate=True)
    except (binascii.Error, ValueError):
        raise EnvelopeError("invalid base64") from None


def sign_envelope(payload_type: str, body: bytes, signers: Sequence[Signer]) -> Envelope:
    """An envelope over `body`, signed by each of `signers` (none: an unsigned envelope)."""
    message = pae(payload_type, body)
    return Envelope(payload_type, body,
                    tuple(Signature(s.keyid, s.sign(message)) for s in signers))


def verified_by(envelope: Envelope, trusted: Sequence[AnyVerifier]) -> list[AnyVerifier]:
    """The trusted keys with a valid signature in `envelope`. The keyid is only a hint
    (the protocol forbids security decisions on it): every key is tried on every
    signature."""
    message = pae(envelope.payload_type, envelope.payload)
    return [key for key in trusted
            if any(key.verify(signature.sig, message) for signature in envelope.signatures)]
