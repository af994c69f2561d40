"""Approvals of a release for an environment, and which of them count.

An approval exists in two forms only: an `approve` audit event, or the `approved_by` of
the promote event that relied on it (written with the move, so a promotion that fails
records nothing). With `approval.distinct_from_creator` an approval by the release's
creator does not count. The promotion policy (pipeline.release.policy) asks for them.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

from pipeline.digest import canonical_json
from pipeline.errors import PolicyError
from pipeline.release.identity import names_of
from pipeline.release.manifest import iso, read_manifest, utc_now
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
