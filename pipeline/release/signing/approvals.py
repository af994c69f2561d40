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
from datetime import datetime
from typing import Any

from pipeline.digest import canonical_json, sha256_bytes
from pipeline.release.identity import verifying_issuer
from pipeline.release.manifest import iso, manifest_key, utc_now
from pipeline.release.oidc import claims_again
from pipeline.release.pointers import Pointer
from pipeline.release.signing.approval_record import (
    Approval,
    ApprovalPredicate,
    EnvironmentHead,
)
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
from pipeline.spec.models import GITHUB_OIDC_ISSUER

APPROVAL_PREDICATE = "https://serve-pipeline.dev/attestation/approval/v1"


def environment_head(pointer: Pointer) -> EnvironmentHead:
    last = pointer.events[-1] if pointer.events else None
    return EnvironmentHead(len(pointer.events), last.at if last else None, pointer.current)


def approval_keys(store: Store, name: str, environment: str | None = None) -> list[str]:
    marker = f"-approve-{environment}-" if environment else "-approve-"
    return [key for key in store.list(f"audit/{name}/") if marker in key.rsplit("/", 1)[-1]]


def write_approval(store: Store, name: str, release_id: str, manifest_sha256: str,
                   environment: str, pointer: Pointer, signer: Signer, by: str,
                   identity: Mapping[str, Any], note: str = "") -> Approval:
    """Sign and store (create-only, under audit/) an approval of `release_id` for
    `environment`; returns the stored entry."""
    moment = utc_now()
    nonce = secrets.token_hex(16)
    predicate = ApprovalPredicate(
        name=name, release_id=release_id, environment=environment, approved_at=iso(moment),
        nonce=nonce, environment_head=environment_head(pointer).to_json(),
        approver={"by": by, "keyid": signer.keyid, "identity": dict(identity)}, note=note)
    subject = [{"name": manifest_key(name, release_id), "digest": {"sha256": manifest_sha256}}]
    envelope = sign_envelope(IN_TOTO_PAYLOAD_TYPE, statement(
        subject, predicate.to_json(), APPROVAL_PREDICATE), [signer])
    entry = Approval(release_id=release_id, environment=environment, name=name, by=by,
                     at=predicate.approved_at, note=note, actor=dict(identity),
                     keyid=signer.keyid, envelope=envelope.to_json())
    store.create(f"audit/{name}/{moment:%Y%m%dT%H%M%S%fZ}-approve-{environment}-"
                 f"{nonce[:6]}.json", canonical_json(entry.to_json()))
    return entry


@dataclass(frozen=True)
class ApprovalCheck:
    """One stored approval and what it is worth: `reason` is None when it counts."""

    key: str
    reason: str | None
    approver: str | None = None
    identities: frozenset[str] = field(default_factory=frozenset)
    predicate: ApprovalPredicate | None = None
    # A verified approval of this very release whose manifest digest is not the
    # manifest's now: the manifest was rewritten after it (tampered evidence).
    manifest_rewritten: bool = False

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
    oidc_issuers: tuple[str, ...] = (GITHUB_OIDC_ISSUER,)

    def verified(self, identity: Mapping[str, Any]) -> bool:
        """Whether `identity` (an approver's, as recorded) was verified by an issuer these
        rules trust: the issuer is chosen by whoever signs, so any other is a claim."""
        trusted = {item.rstrip("/") for item in self.oidc_issuers}
        return bool(identity.get("verified")) and verifying_issuer(identity) in trusted


def read_approval(data: bytes | None) -> Approval | str:
    """A stored approval entry, or why it is not one."""
    try:
        entry = json.loads(data or b"")
    except ValueError:
        return "not valid JSON"
    if not isinstance(entry, dict):
        return "not signed (a hand-written or unsigned approval does not count)"
    return Approval.from_json(entry)


@dataclass(frozen=True)
class SignedApproval:
    """An approval whose signature verified: what was signed, over which manifests
    (subject name -> sha256), and by which trusted key."""

    predicate: ApprovalPredicate
    subjects: Mapping[str, str]
    signer: TrustedKey


def signed_predicate(data: bytes | None, rules: ApprovalRules) -> SignedApproval | str:
    """The verified approval, or why it does not count."""
    entry = read_approval(data)
    if isinstance(entry, str):
        return entry
    if entry.envelope is None:
        return "not signed (a hand-written or unsigned approval does not count)"
    try:
        envelope = Envelope.from_json(entry.envelope)
        body = parse_statement(envelope, APPROVAL_PREDICATE)
    except (EnvelopeError, ValueError) as exc:
        return f"not a valid signed approval: {exc}"
    if not rules.keys:
        return f"no approver keys are trusted ({rules.where} approval.keys)"
    signers = verified_by(envelope, rules.keys)
    if not signers:
        hinted = {s.keyid for s in envelope.signatures} & {k.keyid for k in rules.keys}
        return ("its signature does not verify (forged or altered)" if hinted
                else f"signed by a key not trusted in {rules.where} approval.keys")
    return SignedApproval(ApprovalPredicate.from_json(body["predicate"]),
                          subject_digests(body), signers[0])


def approved_another_manifest(signed: SignedApproval, name: str, release_id: str,
                              manifest_sha256: str) -> bool:
    """Whether `signed` approves this release of `name`, but a manifest of other bytes."""
    predicate = signed.predicate
    return (predicate.name == name and predicate.release_id == release_id
            and signed.subjects.get(manifest_key(name, release_id)) != manifest_sha256)


def binding_problem(signed: SignedApproval, name: str, release_id: str,
                    manifest_sha256: str, environment: str) -> str | None:
    """Why a verified approval is not one for this release, manifest and environment."""
    predicate = signed.predicate
    if predicate.name != name or predicate.release_id != release_id:
        return f"is for release {predicate.release_id} of {predicate.name}"
    if predicate.environment != environment:
        return f"is for environment {predicate.environment}"
    approved = signed.subjects.get(manifest_key(name, release_id))
    if approved != manifest_sha256:
        return (f"was given for manifest sha256 {str(approved)[:12]}, but the manifest is "
                f"{manifest_sha256[:12]} now (rewritten after approval)")
    return None


def approver_identities(predicate: ApprovalPredicate, key: TrustedKey,
                        rules: ApprovalRules) -> frozenset[str]:
    identity = predicate.approver_identity
    verified = identity.get("verified_identities") if rules.verified(identity) else []
    names = {f"key:{key.keyid}", *(str(v) for v in verified or [])}
    if key.owner:
        names.add(key.owner)
    return frozenset(names)


def judge(key: str, data: bytes | None, rules: ApprovalRules, release: tuple[str, str, str],
          head: EnvironmentHead | None, creators: frozenset[str]) -> ApprovalCheck:
    """One approval under `rules`, for release (name, id, manifest sha256). `head` is the
    environment's history now (None: do not judge replays, as `verify` does)."""
    signed = signed_predicate(data, rules)
    if isinstance(signed, str):
        return ApprovalCheck(key, signed)
    predicate, signer = signed.predicate, signed.signer
    identities = approver_identities(predicate, signer, rules)
    reason = binding_problem(signed, *release, rules.environment)
    if reason is None and head is not None and predicate.environment_head != head.to_json():
        seen = predicate.environment_head or {}
        reason = (f"was given when {rules.environment} had {seen.get('events')} moves; it has "
                  f"{head.events} now (replayed or spent: approve again)")
    if reason is None and rules.approvers and signer.name not in rules.approvers:
        reason = f"key {signer.name} is not among {rules.where} approval.approvers"
    identity = predicate.approver_identity
    if reason is None and rules.verified_identity and not rules.verified(identity):
        claimed = identity.get("claimed") or {}
        reason = (f"its approver's identity was verified by {verifying_issuer(identity)!r}, an "
                  f"issuer {rules.where} approval.oidc_issuers does not trust"
                  if identity.get("verified") else
                  f"its approver's identity was not verified (claimed: "
                  f"{', '.join(f'{k}={v}' for k, v in claimed.items()) or 'nothing'}); "
                  f"{rules.where} approval.verified_identity needs an OIDC-verified one")
    if reason is None and rules.verified_identity:
        # Recorded claims are text the approval's signer wrote; the issuer's signature on
        # the token it carries is what proves them.
        unproven = claims_again(identity, {i.rstrip("/") for i in rules.oidc_issuers},
                                approval_time(predicate.approved_at))
        if unproven is not None:
            reason = (f"its approver's verified identity is not proven: {unproven} "
                      f"({rules.where} approval.verified_identity)")
    if reason is None and rules.distinct_from_creator and identities & creators:
        reason = (f"is by the release's creator (same verified identity: "
                  f"{', '.join(sorted(identities & creators))}); {rules.where} "
                  "approval.distinct_from_creator")
    return ApprovalCheck(key, reason, signer.name, identities, predicate,
                         approved_another_manifest(signed, *release))


def release_digest(store: Store, name: str, release_id: str) -> str | None:
    data = store.read(manifest_key(name, release_id))
    return sha256_bytes(data) if data is not None else None


def approval_time(stamp: str | None) -> float:
    """An approval's `approved_at` (ISO 8601) as a Unix time; 0 when unreadable (no token
    is valid then)."""
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
