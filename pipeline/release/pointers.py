"""Environment pointers (compare-and-swap), their history and the audit log.

Which moves are allowed is pipeline.release.policy's business; this module moves.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.digest import canonical_json, sha256_bytes
from pipeline.errors import ConflictError, StoreError
from pipeline.release.manifest import iso, manifest_digest, utc_now
from pipeline.release.pointer_event import PointerAction, PointerEvent
from pipeline.release.store.base import Store

AUDIT_ATTEMPTS = 2
AUDIT_BACKOFF_S = 0.2


def pointer_key(name: str, environment: str) -> str:
    return f"environments/{name}/{environment}.json"


@dataclass
class Pointer:
    name: str
    environment: str
    current: str | None
    events: list[PointerEvent]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "environment": self.environment, "current": self.current,
                "events": [event.to_json() for event in self.events]}

    def last_move_onto(self, release_id: str) -> PointerEvent | None:
        return next((event for event in reversed(self.events)
                     if event.release_id == release_id), None)


def read_pointer(store: Store, name: str, environment: str) -> tuple[Pointer, str | None]:
    found = store.read_versioned(pointer_key(name, environment))
    if found is None:
        return Pointer(name, environment, None, []), None
    data, etag = found
    try:
        body = json.loads(data)
    except ValueError:
        raise StoreError(f"environment pointer {environment} is not valid JSON") from None
    if not isinstance(body, Mapping) or not isinstance(body.get("events", []), list):
        raise StoreError(f"environment pointer {environment} is not a pointer (a JSON object "
                         "with a list of events)")
    events = [PointerEvent.from_json(event) for event in body.get("events", [])]
    return Pointer(name, environment, body.get("current"), events), etag


def check_manifest_unchanged(pointer: Pointer, release_id: str, digest: str) -> None:
    """A manifest is written once: if it differs from when it was first promoted, someone
    edited it in the store, and nothing it names can be trusted."""
    for event in pointer.events:
        recorded = event.manifest_sha256
        if event.release_id == release_id and recorded and recorded != digest:
            raise StoreError(f"the manifest of release {release_id} changed since it was "
                             f"promoted at {event.at} (sha256 {digest[:12]}, recorded "
                             f"{recorded[:12]}): refusing to point at it")


@dataclass(frozen=True)
class Moved:
    """A pointer move that happened. `warnings` say what went wrong after the swap (the
    audit entry): the move stands, and is reported as done."""

    event: PointerEvent
    warnings: tuple[str, ...] = ()


def move_pointer(store: Store, name: str, environment: str, release_id: str,
                 action: PointerAction, by: str, note: str = "", run_id: str | None = None,
                 approved_by: list[str] | None = None,
                 actor: Mapping[str, Any] | None = None) -> Moved:
    """Compare-and-swap the pointer to `release_id`; append the event and an audit entry.

    `approved_by` (the approvals this move relies on) and `actor` (who ran the command,
    pipeline.identity) are part of the event: they are recorded only if the move succeeds.
    Nothing after the swap can fail the move: an audit entry that cannot be written is a
    warning (`store verify --repair`, or the next move, writes it from the history)."""
    pointer, etag = read_pointer(store, name, environment)
    check_current(pointer)
    check_no_lost_moves(store, name, environment)
    repair_audit(store, name, environment, pointer)
    digest = manifest_digest(store, name, release_id)
    check_manifest_unchanged(pointer, release_id, digest)
    moment = utc_now()
    event = PointerEvent(action=PointerAction(action), release_id=release_id,
                         previous_release_id=pointer.current, at=iso(moment), by=by,
                         manifest_sha256=digest, note=note or None, run_id=run_id or None,
                         approved_by=tuple(approved_by) if approved_by else None,
                         actor=dict(actor) if actor else None)
    # Before the swap: what lets a crash between the swap and the audit entry be repaired,
    # and only such a crash (a hand-written event has no intent).
    store.create(intent_key(name, environment, event), audit_entry(name, environment, event))
    pointer.events.append(event)
    pointer.current = release_id
    store.write_if(pointer_key(name, environment),
                   json.dumps(pointer.to_json(), indent=2).encode(), etag)
    problem = write_audit_retrying(store, name, environment, event)
    if problem is None:
        return Moved(event)
    return Moved(event, (f"{environment} points at {release_id}, but its audit entry could "
                         f"not be written ({problem}): run `serve-pipeline store verify "
                         "--repair` to write it from the pointer's history",))


def write_audit_retrying(store: Store, name: str, environment: str, event: PointerEvent,
                         attempts: int = AUDIT_ATTEMPTS) -> str | None:
    """Write the audit entry, again after a store error (the store retries each request
    itself too); what went wrong when every attempt failed, else None."""
    problem = None
    for attempt in range(attempts):
        try:
            write_audit(store, name, environment, event)
            return None
        except StoreError as error:
            problem = str(error)
            if attempt + 1 < attempts:
                time.sleep(AUDIT_BACKOFF_S * (attempt + 1))
    return problem


def _stamp_and_tag(event: PointerEvent) -> tuple[str, str]:
    stamp = event.at.replace("-", "").replace(":", "").replace(".", "")
    return stamp, sha256_bytes(canonical_json(event.to_json()))[:8]


def audit_key(name: str, environment: str, event: PointerEvent) -> str:
    """Named by the event itself, so that writing it again is harmless."""
    stamp, tag = _stamp_and_tag(event)
    return f"audit/{name}/{stamp}-{event.action.value}-{environment}-{tag}.json"


def intent_key(name: str, environment: str, event: PointerEvent) -> str:
    """Where a move writes what it is about to do, before its swap (see move_pointer)."""
    stamp, tag = _stamp_and_tag(event)
    return f"audit/{name}/{stamp}-intent-{environment}-{tag}.json"


def audit_entry(name: str, environment: str, event: PointerEvent) -> bytes:
    return canonical_json({**event.to_json(), "environment": environment, "name": name})


def write_audit(store: Store, name: str, environment: str, event: PointerEvent) -> None:
    # Already written means the same event, the same bytes.
    with contextlib.suppress(ConflictError):
        store.create(audit_key(name, environment, event), audit_entry(name, environment, event))


def began_here(store: Store, name: str, environment: str, event: PointerEvent) -> bool:
    """Whether a move of this tool wrote `event`: it records its intent before its swap. An
    event with neither an intent nor an audit entry was written into the pointer by hand."""
    return store.read(intent_key(name, environment, event)) == \
        audit_entry(name, environment, event)


def lost_moves(store: Store, name: str, environment: str, pointer: Pointer,
               listed: list[str] | None = None) -> list[str]:
    """Audit entries of moves of `environment` (among `listed`, default: the store's now)
    that its pointer's history does not hold: the pointer was rewound (to make a spent
    approval count again, or to undo a rollback) or rewritten. Each move's entry is named
    by the event itself (audit_key). `pointer` must be read after the listing: a move's
    entry is written after its swap, so a pointer read later holds every listed move."""
    # Compared without the tag: a move's entry written by an earlier version of the tool
    # has another tag for the same stamp and action.
    kept = {audit_key(name, environment, event).rpartition("-")[0] for event in pointer.events}
    keys = listed if listed is not None else store.list(f"audit/{name}/")
    return sorted(key for key in keys
                  if _is_move_of(key, environment) and key.rpartition("-")[0] not in kept)


def _is_move_of(key: str, environment: str) -> bool:
    """Whether `key` is `audit/<name>/<stamp>-<action>-<environment>-<tag>.json` (exactly
    this environment: `prod` is not `prod-eu`)."""
    stem = key.rsplit("/", 1)[-1].removesuffix(".json")
    head = stem.rpartition("-")[0]
    return any(head.endswith(f"-{action.value}-{environment}") for action in PointerAction)


def audit_disagreement(store: Store, name: str, environment: str,
                       event: PointerEvent) -> str | None:
    """Why the audit log contradicts `event` (an entry for the same moment and action that
    holds another event: the pointer's record was rewritten), or None. A missing entry is
    not a contradiction (the store failed after the swap: `store verify --repair`)."""
    key = audit_key(name, environment, event)
    found = store.read(key)
    if found is not None:
        if _same_event(found, event):
            return None
        return (f"{environment}'s {event.action.value} at {event.at}: its audit entry {key} "
                "holds another event (the entry was rewritten)")
    prefix = key.rpartition("-")[0]
    for other in store.list(f"audit/{name}/"):
        if other.rpartition("-")[0] != prefix:
            continue
        try:
            body = json.loads(store.read(other) or b"")
        except ValueError:
            return f"{other} is not valid JSON"
        if not isinstance(body, dict):
            return f"{other} is not a JSON object"
        body = {k: v for k, v in body.items() if k not in ("environment", "name")}
        # An entry an earlier version of the tool wrote has another tag for the same event.
        if canonical_json(body) != canonical_json(event.to_json()):
            return (f"{environment}'s {event.action.value} at {event.at} is not the move its "
                    f"audit entry {other} records (the pointer's history was rewritten)")
    return None


def _same_event(data: bytes, event: PointerEvent) -> bool:
    try:
        body = json.loads(data)
    except ValueError:
        return False
    if not isinstance(body, dict):
        return False
    body = {k: v for k, v in body.items() if k not in ("environment", "name")}
    return canonical_json(body) == canonical_json(event.to_json())


def unrecorded(store: Store, name: str, environment: str, event: PointerEvent) -> str | None:
    """Why `event` does not count as a move: its audit entry contradicts it, or there is
    none (a move whose audit write failed counts once `store verify --repair` has written
    it, which it does only for a move this tool began); None when the log records it."""
    contradiction = audit_disagreement(store, name, environment, event)
    if contradiction is not None:
        return contradiction
    key = audit_key(name, environment, event)
    prefix = key.rpartition("-")[0]
    # An entry an earlier version of the tool wrote has another tag for the same event
    # (audit_disagreement found it equal).
    if store.read(key) is not None or any(other.rpartition("-")[0] == prefix
                                          for other in store.list(f"audit/{name}/")):
        return None
    return (f"{environment}'s {event.action.value} of {event.release_id} at {event.at} has "
            "no audit entry, so it does not count (`serve-pipeline store verify --repair` "
            "writes it when the move was this tool's)")


def check_current(pointer: Pointer) -> None:
    """The pointer's `current` is what its last move set: one edited by hand is refused."""
    last = pointer.events[-1].release_id if pointer.events else None
    if pointer.current != last:
        raise StoreError(f"environment {pointer.environment}'s pointer names "
                         f"{pointer.current} as current, but its last move set {last}: the "
                         "pointer was edited; refusing to use it (`serve-pipeline store "
                         "verify` reports it)")


def read_checked_pointer(store: Store, name: str, environment: str) -> Pointer:
    """The pointer, refused when its `current` is not its last move's, or when the audit
    log records moves it no longer holds (rewound to undo a rollback, or rewritten)."""
    check_no_lost_moves(store, name, environment)
    pointer, _ = read_pointer(store, name, environment)
    check_current(pointer)
    return pointer


def check_no_lost_moves(store: Store, name: str, environment: str) -> None:
    # Listed first, the pointer read after: a concurrent move lands in both or in neither.
    listed = store.list(f"audit/{name}/")
    pointer, _ = read_pointer(store, name, environment)
    lost = lost_moves(store, name, environment, pointer, listed)
    if lost:
        raise StoreError(f"the audit log records {len(lost)} moves of {environment} that its "
                         f"pointer does not hold (the latest: {lost[-1]}): the pointer was "
                         "rewound or rewritten; refusing to move it (`serve-pipeline store "
                         "verify` lists them)")


def repair_audit(store: Store, name: str, environment: str, pointer: Pointer) -> None:
    """The pointer is written before its audit entry: after a crash in between, the last
    event's entry is missing. It is rebuilt from the event (it holds nothing else)."""
    if pointer.events:
        last = pointer.events[-1]
        contradiction = audit_disagreement(store, name, environment, last)
        if contradiction is not None:
            raise StoreError(f"{contradiction}; refusing to move it")
        if store.read(audit_key(name, environment, last)) is None:
            if not began_here(store, name, environment, last):
                raise StoreError(f"{environment}'s {last.action.value} at {last.at} has no "
                                 "audit entry and was not begun by this tool (no intent "
                                 "recorded): the pointer was written by hand; refusing to "
                                 "move it")
            write_audit(store, name, environment, last)
