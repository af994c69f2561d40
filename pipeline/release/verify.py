"""`store verify`: check every manifest's blobs and every pointer; read-only, except that
`--repair` writes the audit entries a pointer's history shows to be missing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from pipeline.digest import sha256_bytes
from pipeline.errors import StoreError
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerEvent
from pipeline.release.pointers import (
    Pointer,
    audit_disagreement,
    began_here,
    lost_moves,
    unrecorded,
    write_audit,
)
from pipeline.release.serving_layout import layout_problems
from pipeline.release.store.base import Leftover, Store

# A leftover younger than this may belong to a writer still at work: --repair keeps it.
LEFTOVER_AGE_S = 3600.0


@dataclass
class StoreCheck:
    manifests: int = 0
    blobs: int = 0
    pointers: int = 0
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    # Not problems: no reader sees them, and no release depends on them.
    leftovers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"manifests": self.manifests, "blobs": self.blobs, "pointers": self.pointers,
                "problems": self.problems, "repaired": self.repaired,
                "leftovers": self.leftovers, "notes": self.notes, "ok": not self.problems}


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


# Why a pointer move is not one the policy made (pipeline.release.chain
# unapproved_promotion), by (name, environment, event, the events before it); None when it
# is.
MoveCheck = Callable[[str, str, PointerEvent, list[PointerEvent]], str | None]


def verify_store(store: Store, repair: bool = False,
                 unapproved: MoveCheck | None = None) -> StoreCheck:
    """`unapproved`: judges each move into an environment that requires approval; a move
    it refuses is a problem, and `repair` never writes an audit entry for it."""
    check = StoreCheck()
    releases = _check_manifests(store, check)
    # Listed before any pointer is read: a move made meanwhile is in both or in neither, so
    # it is never taken for one the pointer lost (check_no_lost_moves's order).
    audit = store.list("audit/")
    for _key, name, environment, pointer in _documents(store, "environments/", check):
        check.pointers += 1
        events = _events(check, name, environment, pointer.get("events", []))
        _check_pointer(store, check, releases, name, environment, pointer.get("current"),
                       events)
        held = Pointer(name, environment, pointer.get("current"), events)
        check.problems += [f"{name}/{environment}: {key} records a move its pointer does not "
                           "hold (rewound or rewritten)"
                           for key in lost_moves(store, name, environment, held,
                                                 [k for k in audit
                                                  if k.startswith(f"audit/{name}/")])]
        refused = {id(event): reason for index, event in enumerate(events)
                   if unapproved is not None and
                   (reason := unapproved(name, environment, event, events[:index])) is not None}
        check.problems += [f"{name}/{environment}: {reason}" for reason in refused.values()]
        _check_audit(store, check, name, environment,
                     [event for event in events if id(event) not in refused], repair)
    _check_leftovers(store, check, repair)
    return check


def _check_leftovers(store: Store, check: StoreCheck, repair: bool) -> None:
    """What interrupted writers left: listed; with `repair`, removed once old enough that
    no writer can still own it."""
    for leftover in store.leftovers():
        if repair and leftover.age_s >= LEFTOVER_AGE_S:
            store.remove_leftover(leftover)
            check.repaired.append(f"{leftover.key}: removed ({_described(leftover)})")
        else:
            kept = (" (younger than an hour: a writer may still own it)"
                    if repair else " (`store verify --repair` removes it after an hour)")
            check.leftovers.append(f"{leftover.key}: {_described(leftover)}{kept}")


def _described(leftover: Leftover) -> str:
    age = leftover.age_s
    spoken = f"{age / 3600:.1f} h" if age >= 3600 else f"{age / 60:.0f} min"
    return f"{leftover.what}, left by an interrupted writer {spoken} ago"


def _events(check: StoreCheck, name: str, environment: str, events: Any
            ) -> list[PointerEvent]:
    """The pointer's events that are events; each one that is not is a problem."""
    found = []
    for event in events if isinstance(events, list) else [events]:
        try:
            found.append(PointerEvent.from_json(event))
        except StoreError:
            check.problems.append(f"{name}/{environment}: an event is malformed")
    return found


def _check_audit(store: Store, check: StoreCheck, name: str, environment: str,
                 events: list[PointerEvent], repair: bool) -> None:
    """Every move of the pointer has its audit entry. One that is missing (the store failed
    after the swap) is rebuilt from the event with `repair`: the event holds all of it."""
    for event in events:
        if unrecorded(store, name, environment, event) is None:
            continue
        where = f"{name}/{environment}: the {event.action.value} at {event.at}"
        contradiction = audit_disagreement(store, name, environment, event)
        if contradiction is not None:
            check.problems.append(f"{name}/{environment}: {contradiction} (not repaired)")
            continue
        if not began_here(store, name, environment, event):
            check.problems.append(f"{where} has no audit entry, and this tool did not begin "
                                  "it (no intent recorded): the pointer's history was "
                                  "written by hand (not repaired)")
        elif repair:
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


def _check_manifests(store: Store, check: StoreCheck) -> set[tuple[str, str]]:
    """Every manifest, the blobs it names (each blob re-hashed once) and its published
    serving layout's files; (name, release id) of each manifest found."""
    releases: set[tuple[str, str]] = set()
    verified: dict[str, str | None] = {}
    for key, name, release_id, body in _documents(
            store, "releases/", check, "unexpected key under releases/"):
        check.manifests += 1
        releases.add((name, release_id))
        try:
            manifest = Manifest.from_json(body, key)
        except StoreError as error:
            check.problems.append(str(error))
            continue
        if manifest.release_id != release_id or manifest.name != name:
            check.problems.append(f"{key}: names release {manifest.release_id!r} of "
                                  f"{manifest.name!r}")
        for blob in manifest.blobs:
            if blob.digest not in verified:
                verified[blob.digest] = store.verify_blob(blob.digest)
                check.blobs += 1
            if verified[blob.digest]:
                check.problems.append(f"release {name}/{release_id} {blob.role}: "
                                      f"{verified[blob.digest]}")
        check.problems += [f"release {name}/{release_id} {problem}"
                           for problem in layout_problems(store, manifest)]
    return releases


def _check_pointer(store: Store, check: StoreCheck, releases: set[tuple[str, str]],
                   name: str, environment: str, current: Any,
                   events: list[PointerEvent]) -> None:
    if current is not None and (name, current) not in releases:
        check.problems.append(f"{name}/{environment}: current release {current} has no "
                              "manifest")
    if events and events[-1].release_id != current:
        check.problems.append(f"{name}/{environment}: current {current} is not the last "
                              "event's release")
    for event in events:
        recorded = event.manifest_sha256
        data = store.read(f"releases/{name}/{event.release_id}.json") if recorded else None
        if recorded and data is not None and sha256_bytes(data) != recorded:
            check.problems.append(f"{name}/{environment}: the manifest of "
                                  f"{event.release_id} changed after it was "
                                  "promoted (tampered?)")
        if (name, event.release_id) not in releases:
            check.problems.append(f"{name}/{environment}: event at {event.at} "
                                  f"names unknown release {event.release_id}")
    for earlier, later in pairwise(events):
        if later.previous_release_id != earlier.release_id:
            check.problems.append(f"{name}/{environment}: history broken at {later.at}")
