"""Our DSSE envelopes, checked by a third-party verifier (securesystemslib), and theirs
by ours: the attestation is a standard in-toto Statement any DSSE verifier can check."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from securesystemslib import dsse
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import CryptoSigner, SSlibKey  # type: ignore[attr-defined]

from pipeline.release.signing.attestation import STATEMENT_TYPE, attest, release_subjects
from pipeline.release.signing.dsse import Envelope, verified_by
from pipeline.release.signing.keys import FileSigner, TrustedKey


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa-p256"])
def test_securesystemslib_verifies_our_attestation(kind: str) -> None:
    key = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else \
        ec.generate_private_key(ec.SECP256R1())
    signer = FileSigner(key)
    subjects = release_subjects("fraud-mlp", [("model", "ab" * 32)], "sha256:" + "cd" * 32,
                                None)
    data, summary = attest(subjects, {"gates": []}, signer)
    assert summary["signed"] and summary["keyid"] == signer.keyid

    theirs = dsse.Envelope.from_dict(json.loads(data))
    public = SSlibKey.from_crypto(key.public_key(), keyid=signer.keyid)
    assert list(theirs.verify([public], 1)) == [signer.keyid]
    statement = json.loads(theirs.payload)
    assert statement["_type"] == STATEMENT_TYPE and statement["subject"] == subjects

    body = json.loads(data)
    payload = json.loads(base64.b64decode(body["payload"]))
    payload["subject"][0]["digest"]["sha256"] = "ef" * 32          # one subject changed
    body["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    with pytest.raises(VerificationError):
        dsse.Envelope.from_dict(body).verify([public], 1)


def test_we_verify_an_envelope_securesystemslib_signed() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    theirs = dsse.Envelope(b'{"_type": "x"}', "application/vnd.in-toto+json", {})
    theirs.sign(CryptoSigner(key))
    ours = Envelope.from_bytes(json.dumps(theirs.to_dict()).encode())
    trusted = TrustedKey("theirs", key.public_key())
    other = TrustedKey("other", ed25519.Ed25519PrivateKey.generate().public_key())
    assert verified_by(ours, [other, trusted]) == [trusted]
