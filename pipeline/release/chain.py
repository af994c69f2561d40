"""The chain of custody of one release, verified: blobs, attestation, approvals.

`verify_chain` is what promotion runs before a pointer moves (raises when the target
environment's policy is not met); `verify_offline` is `serve-pipeline verify`: the same
checks with public keys only, reporting every problem instead of stopping at the first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import PolicyError, StoreError, UsageError
from pipeline.release.manifest import Manifest, manifest_digest, read_manifest
from pipeline.release.pointer_event import PointerAction, PointerEvent
from pipeline.release.pointers import Pointer, read_pointer
from pipeline.release.signing.approvals import (
    ApprovalCheck,
    ApprovalRules,
    approval_keys,
    environment_head,
    judge,
    read_approval,
    signed_predicate,
)
from pipeline.release.signing.attestation import (
    ATTESTATION_ROLE,
    RELEASE_PREDICATE,
    mismatches,
    parse_statement,
)
from pipeline.release.signing.dsse import Envelope, EnvelopeError, verified_by
from pipeline.release.signing.keys import (
    SIGNER_ENV,
    SIGNING_KEY_ENV,
    TrustedKey,
    load_public_key,
    release_signer,
)
from pipeline.release.store.base import Store, read_verified
from pipeline.spec.models import LoadedSpec, TrustedKeySpec


@dataclass(frozen=True)
class AttestationCheck:
    present: bool
    signed: bool
    signer: str | None                  # the trusted key's id that verified it
    problems: tuple[str, ...]
    creators: frozenset[str]            # the creator's verified identities

    def to_json(self) -> dict[str, Any]:
        return {"present": self.present, "signed": self.signed, "signer": self.signer,
                "problems": list(self.problems), "creator_identities": sorted(self.creators)}


@dataclass(frozen=True)
class VerifiedChain:
    release_id: str
    manifest_sha256: str
    attestation: AttestationCheck
    approvals: tuple[ApprovalCheck, ...] = ()
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def approvers(self) -> list[str]:
        return list(dict.fromkeys(a.approver for a in self.approvals
                                  if a.counts and a.approver))

    def to_json(self) -> dict[str, Any]:
        return {"release_id": self.release_id, "manifest_sha256": self.manifest_sha256,
                "attestation": self.attestation.to_json(),
                "approvals": [a.to_json() for a in self.approvals],
                "problems": list(self.problems), "ok": not self.problems}


class ApprovedManifestRewritten(StoreError):
    """The manifest differs from the bytes its approval signed: rewritten since (exit 3)."""


def trusted_keys(specs: Sequence[TrustedKeySpec], loaded: LoadedSpec, where: str
                 ) -> list[TrustedKey]:
    return [TrustedKey(spec.id, load_public_key(spec.public_key, loaded.workspace,
                                                f"{where} key {spec.id}"), spec.owner)
            for spec in specs]


def _creator_identities(envelope: Envelope, body: Mapping[str, Any] | None,
                        manifest: Manifest, signer: TrustedKey | None
                        ) -> frozenset[str]:
    """Every identity the creator may hold: the keys that signed (a keyid hint counts too,
    which only ever excludes more approvals), the signer's owner, and a verified identity
    recorded at publish (from the signed predicate when there is one)."""
    names = {f"key:{s.keyid}" for s in envelope.signatures if s.keyid}
    if signer is not None:
        names.add(f"key:{signer.keyid}")
        if signer.owner:
            names.add(signer.owner)
    creator = (body or {}).get("predicate", {}).get("creator") if signer else None
    creator = creator or manifest.creator
    if isinstance(creator, Mapping) and creator.get("verified"):
        names |= {str(v) for v in creator.get("verified_identities") or []}
    return frozenset(names)


def check_attestation(store: Store, manifest: Manifest, keys: Sequence[TrustedKey],
                      where: str) -> AttestationCheck:
    """The attestation's blob, envelope, statement, subjects and signature (against
    `keys`); problems are listed, nothing is raised."""
    digest = manifest.attestation_digest
    if manifest.attestation is None or digest is None:
        return AttestationCheck(False, False, None, (), _creator_identities(
            Envelope("", b"", ()), None, manifest, None))
    try:
        envelope = Envelope.from_bytes(read_verified(store, digest))
        body = parse_statement(envelope, RELEASE_PREDICATE)
    except (StoreError, EnvelopeError, ValueError) as exc:
        return AttestationCheck(True, False, None, (f"attestation: {exc}",), frozenset())
    problems = [f"manifest does not match its attestation: {m}"
                for m in mismatches(manifest, body)]
    if manifest.blob(ATTESTATION_ROLE) is None:
        problems.append("the attestation is not among the manifest's blobs")
    signers = verified_by(envelope, keys) if envelope.signatures else []
    if bool(envelope.signatures) != bool(manifest.attestation.get("signed")):
        problems.append("the manifest and the attestation disagree on whether it is signed")
    if envelope.signatures and keys and not signers:
        hinted = {s.keyid for s in envelope.signatures} & {k.keyid for k in keys}
        problems.append("attestation signature does not verify (forged or altered)" if hinted
                        else f"attestation signed by a key not trusted in {where}")
    signer = signers[0] if signers else None
    return AttestationCheck(True, bool(envelope.signatures),
                            signer.name if signer else None, tuple(problems),
                            _creator_identities(envelope, body, manifest, signer))


def policy_problems(check: AttestationCheck, required: bool, keys: Sequence[TrustedKey],
                    release_id: str, where: str) -> list[str]:
    if not required:
        return []
    if not check.present or not check.signed:
        return [f"release {release_id} is unsigned; {where} attestation.required refuses "
                "unsigned releases"]
    if not keys:
        return [f"{where} attestation.required, but attestation.keys trusts no key"]
    if check.signer is None:
        return [f"release {release_id}'s attestation is not signed by a key that {where} "
                "attestation.keys trusts"]
    return []


def approval_rules(loaded: LoadedSpec, environment: str,
                   extra: Sequence[TrustedKey] = ()) -> ApprovalRules:
    where = f"environments/{environment}.yaml"
    policy = loaded.policy.approval
    return ApprovalRules(environment, [*trusted_keys(policy.keys, loaded, where), *extra],
                         tuple(policy.approvers), policy.verified_identity,
                         policy.distinct_from_creator, where, tuple(policy.oidc_issuers))


def verify_chain(store: Store, loaded: LoadedSpec, environment: str,
                 release_id: str) -> VerifiedChain:
    """Everything signed about `release_id` that `environment`'s policy needs, verified;
    raises StoreError (tampered evidence) or PolicyError (not enough evidence)."""
    name = loaded.spec.name
    where = f"environments/{environment}.yaml"
    manifest = read_manifest(store, name, release_id)
    digest = manifest_digest(store, name, release_id)
    keys = trusted_keys(loaded.policy.attestation.keys, loaded, f"{where} attestation.keys")
    attestation = check_attestation(store, manifest, keys, f"{where} attestation.keys")
    if attestation.problems:
        raise StoreError(f"release {release_id} cannot be promoted: "
                         + "; ".join(attestation.problems))
    refused = policy_problems(attestation, loaded.policy.attestation.required, keys,
                              release_id, where)
    if refused:
        raise PolicyError(refused[0])
    pointer, _ = read_pointer(store, name, environment)
    rules = approval_rules(loaded, environment)
    checks = tuple(judge(key, store.read(key), rules, (name, release_id, digest),
                         environment_head(pointer), attestation.creators)
                   for key in approval_keys(store, name, environment))
    chain = VerifiedChain(release_id, digest, attestation, checks)
    if loaded.policy.approval.required and not chain.approvers:
        reasons = "; ".join(f"{c.key.rsplit('/', 1)[-1]} {c.reason}" for c in checks)
        if any(check.manifest_rewritten for check in checks):
            # Manifests are written once: one that differs from the bytes an approval
            # signed was rewritten, which is tampered evidence (exit 3), not too little.
            raise ApprovedManifestRewritten(
                f"release {release_id} cannot be promoted to {environment}: its manifest was "
                f"rewritten after its approval: {reasons}")
        raise PolicyError(
            f"release {release_id} needs a signed approval for {environment}"
            + (f" and none counts: {reasons}" if reasons else ": run `serve-pipeline "
               f"approve {release_id} --env {environment} --key KEY`"))
    return chain


def approval_environment(key: str) -> str:
    """`audit/<name>/<stamp>-approve-<env>-<tag>.json` -> `<env>`."""
    return key.rsplit("/", 1)[-1].split("-approve-", 1)[1].rsplit("-", 1)[0]


def _about(store: Store, key: str, release_id: str) -> bool:
    """Whether a stored approval claims to be about `release_id` (an unreadable one may
    be: it is judged too)."""
    entry = read_approval(store.read(key))
    return isinstance(entry, str) or entry.release_id in (release_id, None)


def verify_offline(store: Store, name: str, release_id: str,
                   attestation_keys: Sequence[TrustedKey],
                   approver_keys: Callable[[str], Sequence[TrustedKey]]) -> VerifiedChain:
    """`serve-pipeline verify`: every blob re-hashed, the attestation's signature and
    subjects, and every approval of the release checked against the public keys given
    (`approver_keys` by environment). Lists problems; raises only when there is no such
    release."""
    manifest = read_manifest(store, name, release_id)
    digest = manifest_digest(store, name, release_id)
    problems = [f"{blob.role}: {problem}" for blob in manifest.blobs
                if (problem := store.verify_blob(blob.digest))]
    attestation = check_attestation(store, manifest, attestation_keys, "the trusted keys")
    problems += attestation.problems
    if not attestation.present or not attestation.signed:
        problems.append("the release is unsigned (no signed attestation)")
    elif attestation.signer is None and not attestation.problems:
        problems.append("the attestation's signature was not checked: no trusted key given "
                        "(--public-key or attestation.keys)")
    checks = []
    for key in approval_keys(store, name):
        if not _about(store, key, release_id):
            continue
        environment = approval_environment(key)
        rules = ApprovalRules(environment, approver_keys(environment),
                              where=f"environments/{environment}.yaml")
        check = judge(key, store.read(key), rules, (name, release_id, digest), None,
                      attestation.creators)
        checks.append(check)
        if not check.counts:
            problems.append(f"approval {key}: {check.reason}")
    return VerifiedChain(release_id, digest, attestation, tuple(checks), tuple(problems))


def unsigned_approvals(store: Store, keys_for: Callable[[str], Sequence[TrustedKey]]
                       ) -> list[str]:
    """`store verify`: every approval under audit/ that is not signed, not valid, or not
    signed by a key its environment trusts (`keys_for`), and so does not count."""
    problems = []
    for key in store.list("audit/"):
        parts = key.split("/")
        if len(parts) != 3 or "-approve-" not in parts[2]:
            continue
        environment = approval_environment(key)
        rules = ApprovalRules(environment, keys_for(environment),
                              where=f"environments/{environment}.yaml")
        signed = signed_predicate(store.read(key), rules)
        if isinstance(signed, str):
            problems.append(f"{key}: approval does not count: {signed}")
        elif signed.predicate.environment != environment:
            problems.append(f"{key}: approval does not count: is for environment "
                            f"{signed.predicate.environment}")
    return problems


def refuse_typed_approval(approved_by: str | None) -> None:
    if approved_by:
        raise UsageError(f"--approved-by {approved_by}: a typed name is not an approval; "
                         "approvals are signed: `serve-pipeline approve RELEASE --env ENV "
                         "--key KEY`, then promote the release")


def check_new_release(loaded: LoadedSpec, environment: str, env: Mapping[str, str]) -> None:
    """Before `promote <env>` builds, publishes and moves in one go: an environment that
    needs an approval cannot take a release nobody has seen, and one that needs a signed
    attestation needs the signer it trusts."""
    where = f"environments/{environment}.yaml"
    if loaded.policy.approval.required:
        raise PolicyError(f"{environment} requires a signed approval before its pointer "
                          "moves: publish with `serve-pipeline run`, approve the release "
                          f"with `serve-pipeline approve RELEASE --env {environment} --key "
                          f"KEY`, then `promote {environment} --release RELEASE`")
    if not loaded.policy.attestation.required:
        return
    signer = release_signer(env)
    if signer is None:
        raise PolicyError(f"{where} attestation.required refuses unsigned releases: set "
                          f"{SIGNING_KEY_ENV} (or {SIGNER_ENV})")
    keys = trusted_keys(loaded.policy.attestation.keys, loaded, f"{where} attestation.keys")
    if signer.keyid not in {key.keyid for key in keys}:
        raise PolicyError(f"the signing key {signer.keyid[:19]} is not trusted in {where} "
                          "attestation.keys")


def unapproved_promotion(store: Store, name: str, event: PointerEvent,
                         earlier: Sequence[PointerEvent], rules: ApprovalRules) -> str | None:
    """`store verify`: why a promotion into an environment whose overlay requires approval
    has no signed approval that counts for it (a pointer written by hand, or a move around
    the policy), or None. An approval counts as promotion judged it: for the manifest the
    event recorded, given when the environment's history was `earlier` (a spent one was
    given at another point of it), and not by the release's creator."""
    if event.action is not PointerAction.PROMOTE:
        return None
    digest = event.manifest_sha256 or manifest_digest(store, name, event.release_id)
    head = environment_head(Pointer(name, rules.environment, event.previous_release_id,
                                    list(earlier)))
    try:
        manifest = read_manifest(store, name, event.release_id)
        creators = check_attestation(store, manifest, [], "").creators
    except (UsageError, StoreError) as exc:
        return f"the promote of {event.release_id} at {event.at}: {exc}"
    checks = [judge(key, store.read(key), rules, (name, event.release_id, digest), head,
                    creators)
              for key in approval_keys(store, name, rules.environment)
              if _about(store, key, event.release_id)]
    if any(check.counts for check in checks):
        return None
    why = "; ".join(f"{c.key.rsplit('/', 1)[-1]} {c.reason}" for c in checks if c.reason)
    return (f"the promote of {event.release_id} at {event.at} has no signed approval that "
            f"counts ({rules.where} approval.required)" + (f": {why}" if why else ""))
