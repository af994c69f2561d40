"""The promotion policy: every move of an environment pointer is decided here.

`promote ENV` (a new release), `promote ENV --release X` (or the release current in the
environment ENV `requires`), `rollback ENV` and `rollback ENV --to X` each get a
`Decision` (the checks it passed, notes to show) or a PolicyError naming the check that
refused and the file and key that configure it. Only `commit` moves a pointer.

For an existing release, in order: it belongs to this spec (its manifest and spec blob
name it), its blobs are intact, it passed each environment in `requires` and was not
withdrawn there (pipeline.release.standing), the target's gates hold on its recorded
results (pipeline.release.target_gates) unless `reverify` re-measures them, and its signed
chain holds (pipeline.release.chain): an attestation over exactly these subjects, signed by
a key the target trusts when it asks for one, and the signed approvals its `approval` asks
for, over this manifest's digest and this environment, by verified identities other than
the creator's.

A rollback skips the promotion checks, and so it may only return to a release that was
live in that environment and not withdrawn there; anything else must be promoted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import PolicyError, StoreError, UsageError
from pipeline.release.chain import (
    ApprovedManifestRewritten,
    check_new_release,
    refuse_typed_approval,
    verify_chain,
)
from pipeline.release.configured import overlay_file
from pipeline.release.manifest import (
    Manifest,
    manifest_digest,
    read_manifest,
    verify_release,
)
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import (
    Moved,
    check_manifest_unchanged,
    move_pointer,
    read_checked_pointer,
    read_pointer,
    unrecorded,
)
from pipeline.release.serving_layout import layout_prefix
from pipeline.release.standing import rollback_target, standing
from pipeline.release.store.base import Store
from pipeline.release.target_gates import review_gates
from pipeline.spec.models import LoadedSpec


@dataclass(frozen=True)
class Decision:
    """A move the policy allows: what it checked, and what the user should know."""

    action: PointerAction
    environment: str
    release_id: str
    manifest: Manifest
    approvers: list[str] = field(default_factory=list)
    checks: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def promotion_needs(loaded: LoadedSpec, environment: str) -> str:
    """What a promotion into `environment` must pass, for refusals that point there."""
    needs = [f"passed {required}" for required in loaded.policy.requires]
    if loaded.policy.approval.required:
        needs.append("an approval")
    needs.append(f"{environment}'s gates" if not loaded.policy.reverify
                 else f"a re-measurement under {environment}'s gates")
    return ", ".join(needs)


def source_release(store: Store, loaded: LoadedSpec, release_id: str | None) -> str:
    """The release to promote: the one named, else the one current where `requires` says."""
    if release_id is not None:
        return release_id
    if not loaded.policy.requires:
        raise UsageError("give --release ID: this environment requires no other one to "
                         "take a release from")
    source = loaded.policy.requires[0]
    pointer, _ = read_pointer(store, loaded.spec.name, source)
    if pointer.current is None:
        raise PolicyError(f"{source} has no release yet: promote to {source} first")
    return pointer.current


def check_belongs(store: Store, loaded: LoadedSpec, release_id: str,
                  manifest: Manifest) -> None:
    """The release was published from a spec with this name (not copied in from another):
    its manifest and the spec blob it was verified with both say so."""
    name = loaded.spec.name
    found = [manifest.name]
    spec_blob = manifest.blob("spec")
    if spec_blob is not None:
        try:
            body = json.loads(store.read_blob(spec_blob.digest))
            found.append(body["spec"]["name"])
        except (StoreError, ValueError, KeyError, TypeError):
            raise StoreError(f"release {release_id}: its spec blob cannot be read") from None
    other = next((n for n in found if n != name), None)
    if other is not None or manifest.release_id != release_id:
        raise PolicyError(f"release {release_id} was published from the spec {other!r}, not "
                          f"{name!r} ({loaded.path.name}: name): only a release of this spec "
                          "may be promoted")


def check_intact(store: Store, release_id: str, manifest: Manifest, verb: str) -> None:
    problems = verify_release(store, manifest)
    if problems:
        raise StoreError(f"release {release_id} cannot be {verb}: " + "; ".join(problems))


def check_requires(store: Store, loaded: LoadedSpec, environment: str, release_id: str) -> str:
    for required in loaded.policy.requires:
        # Its history as the audit log holds it: a rollback undone by rewinding the pointer
        # still withdraws the release.
        pointer = read_checked_pointer(store, loaded.spec.name, required)
        found = standing(pointer, release_id)
        where = f"({overlay_file(environment)}: requires)"
        if found.withdrawn is not None:
            raise PolicyError(f"release {release_id} does not count as passed {required}: "
                              f"{found.withdrawn_text()}; {environment} requires {required} "
                              f"{where}")
        if not found.passed:
            raise PolicyError(f"release {release_id} has not passed {required}; {environment} "
                              f"requires it {where}")
    return "passed " + ", ".join(loaded.policy.requires) if loaded.policy.requires else ""


def check_passed_as_is(store: Store, loaded: LoadedSpec, release_id: str) -> None:
    """The release passed each environment in `requires` as the manifest it is now: one
    rewritten since (gate results, figures, digests) did not pass anything, even where the
    rewrite kept its unsigned attestation in step and someone approved it afterwards."""
    name = loaded.spec.name
    digest = manifest_digest(store, name, release_id)
    for required in loaded.policy.requires:
        pointer, _ = read_pointer(store, name, required)
        check_manifest_unchanged(pointer, release_id, digest)
        # ... as recorded by the move itself: a pointer event rewritten to the new digest
        # is contradicted by its audit entry, and one added by hand has none.
        for event in pointer.events:
            if event.release_id == release_id:
                reason = unrecorded(store, name, required, event)
                if reason is not None:
                    raise StoreError(f"release {release_id} cannot be promoted: {reason}")


def check_gates(loaded: LoadedSpec, environment: str, release_id: str,
                manifest: Manifest) -> tuple[str, tuple[str, ...]]:
    if loaded.policy.reverify:
        return (f"{environment}'s gates: re-measured before the pointer moves "
                f"({overlay_file(environment)}: reverify)"), ()
    review = review_gates(manifest, loaded, environment)
    if review.refusals:
        raise PolicyError(f"release {release_id} does not meet {environment}'s gates on its "
                          f"recorded results: {'; '.join(review.refusals)}; re-measure with "
                          f"`reverify: true` in {overlay_file(environment)}")
    return f"{environment}'s gates on the recorded results", tuple(review.notes)


def check_approval(store: Store, loaded: LoadedSpec, environment: str, release_id: str,
                   approved_by: str | None) -> list[str]:
    """The signed chain (pipeline.release.chain): the attestation's subjects and signature,
    and the signed approvals the target's `approval` asks for. A typed name never counts."""
    refuse_typed_approval(approved_by)
    return verify_chain(store, loaded, environment, release_id).approvers


def decide_promotion(store: Store, loaded: LoadedSpec, environment: str,
                     release_id: str | None, approved_by: str | None = None) -> Decision:
    """Every check a promotion of an existing release must pass; raises when one fails.
    Writes nothing: the approval `approved_by` names is recorded by the move itself."""
    target = source_release(store, loaded, release_id)
    manifest = read_manifest(store, loaded.spec.name, target)
    check_belongs(store, loaded, target, manifest)
    pointer, _ = read_pointer(store, loaded.spec.name, environment)
    if pointer.current == target:
        raise UsageError(f"{environment} already points at {target}")
    check_intact(store, target, manifest, "promoted")
    checks = ["belongs to this spec", "blobs intact"]
    try:
        checks.append(check_requires(store, loaded, environment, target))
        gates, notes = check_gates(loaded, environment, target, manifest)
        checks.append(gates)
        granted = check_approval(store, loaded, environment, target, approved_by)
    except (PolicyError, ApprovedManifestRewritten):
        # Tampered evidence outranks a refusal: a manifest rewritten since it passed also
        # fails its approval (or its gates), and the rewrite is what the operator must
        # hear (exit 3), not a missing approval (exit 5); the staging event it no longer
        # matches says more than the approval's digest does.
        check_passed_as_is(store, loaded, target)
        raise
    check_passed_as_is(store, loaded, target)
    if granted:
        checks.append("approved by " + ", ".join(granted))
    return Decision(PointerAction.PROMOTE, environment, target, manifest, granted,
                    tuple(c for c in checks if c), (*notes, *missing_layout(store, loaded,
                                                                             manifest)))


def missing_layout(store: Store, loaded: LoadedSpec, manifest: Manifest) -> tuple[str, ...]:
    """Where the environment asks for the serving layout beside its releases and this one
    was published without it: how to write it there (a pointer move publishes nothing)."""
    if not loaded.spec.publish.serving_layout or manifest.serving_layout is not None:
        return ()
    where = f"{store.url.rstrip('/')}/{layout_prefix(manifest.name, manifest.release_id)}"
    return (f"release {manifest.release_id} was published without its serving layout "
            f"(`serve-pipeline materialize {manifest.release_id} --to {where}` writes it "
            "there)",)


def decide_new_release(loaded: LoadedSpec, environment: str, approved_by: str | None,
                       env: Mapping[str, str]) -> None:
    """`promote <env>` that builds the release itself: its run judges the environment's own
    gates. No approval can exist for a release nobody has seen yet, and an environment that
    needs a signed attestation needs the signer it trusts (pipeline.release.chain)."""
    if loaded.policy.requires:
        raise UsageError(f"{environment} takes releases from {', '.join(loaded.policy.requires)}"
                         ", never a new build")
    refuse_typed_approval(approved_by)
    check_new_release(loaded, environment, env)


def decide_rollback(store: Store, name: str, environment: str, to: str | None,
                    needs: str = "") -> Decision:
    """A rollback returns only to a release live in `environment` before and not withdrawn
    there (a rollback moved away from it); `needs` says what a promotion would need."""
    pointer, _ = read_pointer(store, name, environment)
    target = to or rollback_target(pointer)
    if target == pointer.current:
        raise UsageError(f"{environment} already points at {target}")
    command = f"rollback {environment}" + (f" --to {to}" if to else "")
    instead = "promote it instead" + (f" (requires: {needs})" if needs else "")
    found = standing(pointer, target)
    if found.withdrawn is not None:
        raise PolicyError(f"{command}: {found.withdrawn_text()}; {instead}")
    if not found.was_live:
        raise PolicyError(f"{command}: {target} was never live in {environment}; {instead}")
    manifest = read_manifest(store, name, target)
    check_intact(store, target, manifest, "rolled back to")
    return Decision(PointerAction.ROLLBACK, environment, target, manifest,
                    checks=(f"live in {environment} at {found.live_at}, not withdrawn",
                            "blobs intact"))


def commit(store: Store, name: str, decision: Decision, by: str, note: str = "",
           run_id: str | None = None, actor: dict[str, Any] | None = None) -> Moved:
    """Move the pointer as decided; the only place the policy's moves happen."""
    return move_pointer(store, name, decision.environment, decision.release_id,
                        decision.action, by, note=note, run_id=run_id,
                        approved_by=decision.approvers or None, actor=actor)


def promote_existing(store: Store, loaded: LoadedSpec, environment: str,
                     release_id: str | None, by: str, approved_by: str | None = None,
                     note: str = "", actor: dict[str, Any] | None = None) -> Moved:
    """Point `environment` at an existing release after the policy's checks."""
    decision = decide_promotion(store, loaded, environment, release_id, approved_by)
    source = ", ".join(loaded.policy.requires) or decision.manifest.verified_in or "a run"
    return commit(store, loaded.spec.name, decision, by, note or f"from {source}",
                  actor=actor)


def rollback(store: Store, name: str, environment: str, to: str | None, by: str,
             actor: dict[str, Any] | None = None, needs: str = "", note: str = "") -> Moved:
    """`note` (why) is kept in the pointer's event and its audit entry."""
    return commit(store, name, decide_rollback(store, name, environment, to, needs), by,
                  note=note, actor=actor)
