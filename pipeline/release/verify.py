"""`store verify`: check every manifest's blobs and every pointer; read-only, except that
`--repair` writes the audit entries a pointer's history shows to be missing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from pipeline.digest import sha256_bytes
from pipeline.release.pointers import audit_key, write_audit
from pipeline.release.store.base import Store


@dataclass
class StoreCheck:
    manifests: int = 0
    blobs: int = 0
    pointers: int = 0
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"manifests": self.manifests, "blobs": self.blobs, "pointers": self.pointers,
                "problems": self.problems, "repaired": self.repaired, "ok": not self.problems}


def _load(store: Store, key: str, check: StoreCheck) -> dict[str, Any] | None:
    data = store.read(key)
    if data is None:
        check.problems.append(f"{key}: listed but unreadable")
        return None
    try:
        body = json.loads(data)
    except ValueError:
        check.problems.append(f"{key}: not valid JSON")
        return None
    if not isinstance(body, dict):
        check.problems.append(f"{key}: not a JSON object")
        return None
    return body


def verify_store(store: Store, repair: bool = False) -> StoreCheck:
    check = StoreCheck()
    releases = _check_manifests(store, check)
    for _key, name, environment, pointer in _documents(store, "environments/", check):
        check.pointers += 1
        _check_pointer(store, check, releases, name, environment, pointer)
        _check_audit(store, check, name, environment, pointer.get("events", []), repair)
    return check


def _check_audit(store: Store, check: StoreCheck, name: str, environment: str,
                 events: list[dict[str, Any]], repair: bool) -> None:
    """Every move of the pointer has its audit entry. One that is missing (the store failed
    after the swap) is rebuilt from the event with `repair`: the event holds all of it."""
    for event in events:
        if not isinstance(event, dict) or not {"at", "action"} <= set(event):
            check.problems.append(f"{name}/{environment}: an event is malformed")
            continue
        if store.read(audit_key(name, environment, event)) is not None:
            continue
        where = f"{name}/{environment}: the {event['action']} at {event['at']}"
        if repair:
            write_audit(store, name, environment, event)
            check.repaired.append(f"{where}: audit entry written from the pointer's history")
        else:
            check.problems.append(f"{where} has no audit entry (`store verify --repair` "
                                  "writes it)")


def _documents(store: Store, prefix: str, check: StoreCheck,
               unexpected: str | None = None) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(key, name, stem, body) of every readable `<prefix><name>/<stem>.json`; other keys
    are reported as `unexpected` (or skipped when it is None)."""
    for key in store.list(prefix):
        parts = key.split("/")
        if len(parts) != 3 or not parts[2].endswith(".json"):
            if unexpected is not None:
                check.problems.append(f"{key}: {unexpected}")
            continue
        body = _load(store, key, check)
        if body is not None:
            yield key, parts[1], parts[2].removesuffix(".json"), body


def _check_manifests(store: Store, check: StoreCheck) -> dict[tuple[str, str], dict[str, Any]]:
    """Every manifest and the blobs it names (each blob re-hashed once)."""
    releases: dict[tuple[str, str], dict[str, Any]] = {}
    verified: dict[str, str | None] = {}
    for key, name, release_id, manifest in _documents(
            store, "releases/", check, "unexpected key under releases/"):
        check.manifests += 1
        if manifest.get("release_id") != release_id or manifest.get("name") != name:
            check.problems.append(f"{key}: names release {manifest.get('release_id')!r} of "
                                  f"{manifest.get('name')!r}")
        releases[(name, release_id)] = manifest
        for blob in manifest.get("blobs", []):
            digest = str(blob.get("digest", ""))
            if digest not in verified:
                verified[digest] = store.verify_blob(digest)
                check.blobs += 1
            if verified[digest]:
                check.problems.append(f"release {name}/{release_id} {blob.get('role')}: "
                                      f"{verified[digest]}")
    return releases


def _check_pointer(store: Store, check: StoreCheck, releases: dict[tuple[str, str], Any],
                   name: str, environment: str, pointer: dict[str, Any]) -> None:
    current = pointer.get("current")
    events = pointer.get("events", [])
    if current is not None and (name, current) not in releases:
        check.problems.append(f"{name}/{environment}: current release {current} has no "
                              "manifest")
    if events and events[-1].get("release_id") != current:
        check.problems.append(f"{name}/{environment}: current {current} is not the last "
                              "event's release")
    for event in events:
        recorded = event.get("manifest_sha256")
        key_of = f"releases/{name}/{event.get('release_id')}.json"
        data = store.read(key_of) if recorded else None
        if recorded and data is not None and sha256_bytes(data) != recorded:
            check.problems.append(f"{name}/{environment}: the manifest of "
                                  f"{event.get('release_id')} changed after it was "
                                  "promoted (tampered?)")
        if (name, event.get("release_id")) not in releases:
            check.problems.append(f"{name}/{environment}: event at {event.get('at')} "
                                  f"names unknown release {event.get('release_id')}")
    for earlier, later in pairwise(events):
        if later.get("previous_release_id") != earlier.get("release_id"):
            check.problems.append(f"{name}/{environment}: history broken at "
                                  f"{later.get('at')}")
