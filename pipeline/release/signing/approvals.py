"""Signed approvals: an in-toto Statement whose subject is the release's manifest (by its
sha256) and whose predicate names the target environment, in a DSSE envelope signed by
the approver's key.

An approval is bound to more than the release: to the manifest's bytes (a manifest
rewritten afterwards breaks it), to one environment, and to that environment's history
as the approver saw it (`environment_head`): once any pointer move happens there, the
approval is spent, so it cannot be replayed for a later move.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.digest import canonical_json, sha256_bytes
from pipeline.release.manifest import iso, manifest_key, utc_now
from pipeline.release.pointers import Pointer
from pipeline.release.signing.attestation import parse_statement, statement, subject_digests
from pipeline.release.signing.dsse import (
    IN_TOTO_PAYLOAD_TYPE,
    Envelope,
    EnvelopeError,
    Signer,
    sign_envelope,
    verified_by,
)
from pipeline.release.signing.keys import TrustedKey
from pipeline.release.store.base import Store

APPROVAL_PREDICATE = "https://serve-pipeline.dev/attestation/approval/v1"


def environment_head(pointer: Pointer) -> dict[str, Any]:
    last = pointer.events[-1] if pointer.events else None
    return {"events": len(pointer.events), "last_at": last.get("at") if last else None,
            "current": pointer.current}


def approval_keys(store: Store, name: str, environment: str | None = None) -> list[str]:
    marker = f"-approve-{environment}-" if environment else "-approve-"
    return [key for key in store.list(f"audit/{name}/") if marker in key.rsplit("/", 1)[-1]]


def write_approval(store: Store, name: str, release_id: str, manifest_sha256: str,
                   environment: str, pointer: Pointer, signer: Signer, by: str,
                   identity: Mapping[str, Any], note: str = "") -> dict[str, Any]:
    """Sign and store (create-only, under audit/) an approval of `release_id` for
    `environment`; returns the stored entry."""
    moment = utc_now()
    predicate = {"name": name, "release_id": release_id, "environment": environment,
                 "approved_at": iso(moment), "nonce": secrets.token_hex(16),
                 "environment_head": environment_head(pointer),
                 "approver": {"by": by, "keyid": signer.keyid, "identity": dict(identity)},
                 "note": note}
    subject = [{"name": manifest_key(name, release_id), "digest": {"sha256": manifest_sha256}}]
    envelope = sign_envelope(IN_TOTO_PAYLOAD_TYPE, statement(subject, predicate,
                                                             APPROVAL_PREDICATE), [signer])
    entry = {"action": "approve", "release_id": release_id, "environment": environment,
             "name": name, "by": by, "at": predicate["approved_at"], "note": note,
             "actor": dict(identity), "keyid": signer.keyid, "envelope": envelope.to_json()}
    store.create(f"audit/{name}/{moment:%Y%m%dT%H%M%S%fZ}-approve-{environment}-"
                 f"{str(predicate['nonce'])[:6]}.json", canonical_json(entry))
    return entry


@dataclass(frozen=True)
class ApprovalCheck:
    """One stored approval and what it is worth: `reason` is None when it counts."""

    key: str
    reason: str | None
    approver: str | None = None
    identities: frozenset[str] = field(default_factory=frozenset)
    predicate: Mapping[str, Any] = field(default_factory=dict)

    @property
    def counts(self) -> bool:
        return self.reason is None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "counts": self.counts, "reason": self.reason,
                "approver": self.approver, "identities": sorted(self.identities)}


@dataclass(frozen=True)
class ApprovalRules:
    """What an approval must satisfy in one environment (from its overlay)."""

    environment: str
    keys: Sequence[TrustedKey]
    approvers: Sequence[str] = ()
    verified_identity: bool = False
    distinct_from_creator: bool = False
    where: str = ""


def signed_predicate(data: bytes | None, rules: ApprovalRules
                     ) -> tuple[dict[str, Any] | None, TrustedKey | None, str | None]:
    """(predicate, key that signed it, None) or (None, None, why it does not count)."""
    try:
        entry = json.loads(data or b"")
    except ValueError:
        return None, None, "not valid JSON"
    if not isinstance(entry, dict) or "envelope" not in entry:
        return None, None, "not signed (a hand-written or unsigned approval does not count)"
    try:
        envelope = Envelope.from_json(entry["envelope"])
        body = parse_statement(envelope, APPROVAL_PREDICATE)
    except (EnvelopeError, ValueError) as exc:
        return None, None, f"not a valid signed approval: {exc}"
    if not rules.keys:
        return None, None, f"no approver keys are trusted ({rules.where} approval.keys)"
    signers = verified_by(envelope, rules.keys)
    if not signers:
        hinted = {s.keyid for s in envelope.signatures} & {k.keyid for k in rules.keys}
        return None, None, ("its signature does not verify (forged or altered)" if hinted
                            else f"signed by a key not trusted in {rules.where} "
                                 "approval.keys")
    predicate: dict[str, Any] = body["predicate"]
    predicate["_manifest"] = subject_digests(body)
    return predicate, signers[0], None


def binding_problem(predicate: Mapping[str, Any], name: str, release_id: str,
                    manifest_sha256: str, environment: str) -> str | None:
    """Why a verified approval is not one for this release, manifest and environment."""
    if predicate.get("name") != name or predicate.get("release_id") != release_id:
        return f"is for release {predicate.get('release_id')} of {predicate.get('name')}"
    if predicate.get("environment") != environment:
        return f"is for environment {predicate.get('environment')}"
    approved = predicate.get("_manifest", {}).get(manifest_key(name, release_id))
    if approved != manifest_sha256:
        return (f"was given for manifest sha256 {str(approved)[:12]}, but the manifest is "
                f"{manifest_sha256[:12]} now (rewritten after approval)")
    return None


def approver_identities(predicate: Mapping[str, Any], key: TrustedKey) -> frozenset[str]:
    identity = (predicate.get("approver") or {}).get("identity") or {}
    verified = identity.get("verified_identities") if identity.get("verified") else []
    names = {f"key:{key.keyid}", *(str(v) for v in verified or [])}
    if key.owner:
        names.add(key.owner)
    return frozenset(names)


def judge(key: str, data: bytes | None, rules: ApprovalRules, release: tuple[str, str, str],
          head: Mapping[str, Any] | None, creators: frozenset[str]) -> ApprovalCheck:
    """One approval under `rules`, for release (name, id, manifest sha256). `head` is the
    environment's history now (None: do not judge replays, as `verify` does)."""
    predicate, signer, reason = signed_predicate(data, rules)
    if predicate is None or signer is None:
        return ApprovalCheck(key, reason)
    identities = approver_identities(predicate, signer)
    reason = binding_problem(predicate, *release, rules.environment)
    if reason is None and head is not None and predicate.get("environment_head") != head:
        seen = predicate.get("environment_head") or {}
        reason = (f"was given when {rules.environment} had {seen.get('events')} moves; it has "
                  f"{head.get('events')} now (replayed or spent: approve again)")
    if reason is None and rules.approvers and signer.name not in rules.approvers:
        reason = f"key {signer.name} is not among {rules.where} approval.approvers"
    identity = (predicate.get("approver") or {}).get("identity") or {}
    if reason is None and rules.verified_identity and not identity.get("verified"):
        claimed = identity.get("claimed") or {}
        reason = (f"its approver's identity was not verified (claimed: "
                  f"{', '.join(f'{k}={v}' for k, v in claimed.items()) or 'nothing'}); "
                  f"{rules.where} approval.verified_identity needs an OIDC-verified one")
    if reason is None and rules.distinct_from_creator and identities & creators:
        reason = (f"is by the release's creator (same verified identity: "
                  f"{', '.join(sorted(identities & creators))}); {rules.where} "
                  "approval.distinct_from_creator")
    return ApprovalCheck(key, reason, signer.name, identities, predicate)


def release_digest(store: Store, name: str, release_id: str) -> str | None:
    data = store.read(manifest_key(name, release_id))
    return sha256_bytes(data) if data is not None else None
