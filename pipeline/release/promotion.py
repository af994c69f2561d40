"""Moving an existing release into an environment: policy checks, approvals, no rebuild.

An environment whose overlay says `requires: [staging]` only takes a release
that was promoted there, after its blobs are checked (release.verify_release),
and, when `approval.required` is set, after someone approved it for that
environment. An approval exists in two forms only: an `approve` audit event, or
the `approved_by` of the promote event that relied on it (written with the move,
so a promotion that fails records nothing). With `approval.distinct_from_creator`
an approval by the release's creator does not count.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.digest import canonical_json
from pipeline.errors import PolicyError, StoreError, UsageError
from pipeline.release.identity import names_of
from pipeline.release.manifest import iso, read_manifest, utc_now, verify_release
from pipeline.release.pointers import move_pointer, read_pointer
from pipeline.release.store.base import Store
from pipeline.spec.models import LoadedSpec


def approve(store: Store, name: str, release_id: str, environment: str, by: str,
            note: str = "", actor: dict[str, Any] | None = None) -> dict[str, Any]:
    """Record that `by` approved `release_id` for `environment` (append-only audit entry)."""
    read_manifest(store, name, release_id)
    moment = utc_now()
    entry: dict[str, Any] = {"action": "approve", "release_id": release_id,
                             "environment": environment, "name": name, "by": by,
                             "at": iso(moment), "note": note}
    if actor:
        entry["actor"] = actor
    store.create(f"audit/{name}/{moment:%Y%m%dT%H%M%S%fZ}-approve-{environment}-"
                 f"{secrets.token_hex(3)}.json", canonical_json(entry))
    return entry


def approvals(store: Store, name: str, release_id: str, environment: str) -> list[dict[str, Any]]:
    found = []
    for key in store.list(f"audit/{name}/"):
        if f"-approve-{environment}-" not in key.rsplit("/", 1)[-1]:
            continue
        data = store.read(key)
        if data is None:
            continue
        entry: dict[str, Any] = json.loads(data)
        if entry.get("release_id") == release_id and entry.get("environment") == environment:
            found.append(entry)
    return found


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


def creator_names(manifest: Mapping[str, Any]) -> set[str]:
    actor = manifest.get("created_by_actor")
    return names_of(manifest.get("created_by"), actor if isinstance(actor, dict) else None)


def counted_approvers(loaded: LoadedSpec, environment: str, subject: str,
                      creators: set[str], claimed: list[str]) -> list[str]:
    """The approvers that count under the policy. With `distinct_from_creator`, approvals by
    the creator do not count, and a release approved only by its creator is refused."""
    if not loaded.policy.approval.distinct_from_creator:
        return list(dict.fromkeys(claimed))
    own = [name for name in claimed if names_of(name, None) & creators]
    others = [name for name in claimed if name not in own]
    if own and not others:
        raise PolicyError(
            f"{subject} is approved only by its creator {', '.join(dict.fromkeys(own))} "
            f"(created by {', '.join(sorted(creators))}): environments/{environment}.yaml "
            "approval.distinct_from_creator requires an approval by someone else")
    return list(dict.fromkeys(others))


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
    claimed = [a["by"] for a in approvals(store, name, target, environment)]
    if approved_by:
        claimed.append(approved_by)
    granted = counted_approvers(loaded, environment, f"release {target}",
                                creator_names(manifest), claimed)
    if loaded.policy.approval.required and not granted:
        raise PolicyError(
            f"release {target} needs an approval for {environment}: run `serve-pipeline "
            f"approve {target} --env {environment} --by NAME` or promote with --approved-by")
    return CheckedPromotion(target, manifest, granted)


def check_new_release_approval(loaded: LoadedSpec, environment: str, approved_by: str | None,
                               creators: set[str]) -> None:
    """`promote <env>` that builds the release itself: the creator is whoever runs it."""
    if loaded.policy.approval.required and not approved_by:
        raise PolicyError(f"{environment} requires an approval before its pointer moves: pass "
                          "--approved-by NAME, or publish with `run` and promote the release "
                          "after `serve-pipeline approve`")
    if approved_by:
        counted_approvers(loaded, environment, "the release this promotion builds", creators,
                          [approved_by])


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
