"""Moving an existing release into an environment: policy checks, approvals, no rebuild.

An environment whose overlay says `requires: [staging]` only takes a release
that was promoted there, after its blobs are checked (release.verify_release),
and, when `approval.required` is set, after someone approved it for that
environment. Approvals and the release's attestation are signed evidence, checked by
release.chain.verify_chain: an approval is a signed statement over the manifest's digest
and the target environment (`serve-pipeline approve --key`); a typed name never counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.errors import PolicyError, StoreError, UsageError
from pipeline.release.chain import check_new_release, refuse_typed_approval, verify_chain
from pipeline.release.manifest import read_manifest, verify_release
from pipeline.release.pointers import move_pointer, read_pointer
from pipeline.release.store.base import Store
from pipeline.spec.models import LoadedSpec


def passed_in(store: Store, name: str, release_id: str, environment: str) -> bool:
    """Whether `release_id` was ever promoted into `environment`."""
    pointer, _ = read_pointer(store, name, environment)
    return any(e["action"] == "promote" and e["release_id"] == release_id
               for e in pointer.events)


def candidate(store: Store, loaded: LoadedSpec, release_id: str | None) -> str:
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


@dataclass(frozen=True)
class CheckedPromotion:
    release_id: str
    manifest: dict[str, Any]
    approvers: list[str]


def check_promotion(store: Store, loaded: LoadedSpec, environment: str,
                    release_id: str | None, approved_by: str | None = None) -> CheckedPromotion:
    """Every check a promotion of an existing release must pass; raises when one fails.
    Writes nothing: the approval `approved_by` names is recorded by the move itself."""
    name = loaded.spec.name
    target = candidate(store, loaded, release_id)
    manifest = read_manifest(store, name, target)
    problems = verify_release(store, manifest)
    if problems:
        raise StoreError(f"release {target} cannot be promoted: " + "; ".join(problems))
    for required in loaded.policy.requires:
        if not passed_in(store, name, target, required):
            raise PolicyError(f"release {target} has not passed {required}; {environment} "
                              f"requires it (environments/{environment}.yaml: requires)")
    pointer, _ = read_pointer(store, name, environment)
    if pointer.current == target:
        raise UsageError(f"{environment} already points at {target}")
    refuse_typed_approval(approved_by)
    chain = verify_chain(store, loaded, environment, target)
    return CheckedPromotion(target, manifest, chain.approvers)


def check_new_release_approval(loaded: LoadedSpec, environment: str, approved_by: str | None,
                               env: Mapping[str, str]) -> None:
    """`promote <env>` that builds the release itself: no approval can exist for it yet."""
    refuse_typed_approval(approved_by)
    check_new_release(loaded, environment, env)


def commit_promotion(store: Store, loaded: LoadedSpec, environment: str,
                     checked: CheckedPromotion, by: str, note: str = "",
                     run_id: str | None = None,
                     actor: dict[str, Any] | None = None) -> dict[str, Any]:
    source = ", ".join(loaded.policy.requires) or checked.manifest.get("verified_in") or "a run"
    return move_pointer(store, loaded.spec.name, environment, checked.release_id, "promote", by,
                        note=note or f"from {source}", run_id=run_id,
                        approved_by=checked.approvers or None, actor=actor)


def promote_existing(store: Store, loaded: LoadedSpec, environment: str,
                     release_id: str | None, by: str, approved_by: str | None = None,
                     note: str = "", actor: dict[str, Any] | None = None) -> dict[str, Any]:
    """Point `environment` at an existing release after the policy's checks."""
    checked = check_promotion(store, loaded, environment, release_id, approved_by)
    return commit_promotion(store, loaded, environment, checked, by, note, actor=actor)
