"""Signed evidence: DSSE envelopes (dsse), keys and signers (keys), the release attestation
(attestation) and signed approvals (approvals)."""
