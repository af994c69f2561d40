"""Releases: manifests that bind model, config and gates; environment pointers; history.

Publish uploads every blob first and writes the manifest last and create-only,
so a crash in between leaves no visible release. Pointers move only by
compare-and-swap and keep their whole history.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeline.digest import canonical_json, sha256_bytes
from pipeline.errors import ConflictError, StoreError, UsageError
from pipeline.release.store.base import Store

MANIFEST_SCHEMA = 1


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_release_id(moment: datetime, seed: str) -> str:
    return f"{moment:%Y%m%dT%H%M%SZ}-{sha256_bytes((seed + secrets.token_hex(8)).encode())[:8]}"


@dataclass(frozen=True)
class BlobRef:
    role: str
    digest: str
    size: int
    stored: dict[str, str] | None = None   # the store's own checksum, ETag, version

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"role": self.role, "digest": self.digest, "size": self.size}
        if self.stored is not None:
            body["stored"] = self.stored
        return body


@dataclass(frozen=True)
class PublishOutcome:
    release_id: str
    manifest: dict[str, Any]
    uploaded_blobs: int
    uploaded_bytes: int
    skipped_blobs: int


@dataclass(frozen=True)
class BlobSource:
    role: str
    path: Path | None
    data: bytes | None
    digest: str


def publish_release(store: Store, name: str, files: list[BlobSource],
                    manifest_body: dict[str, Any], moment: datetime,
                    progress: Callable[[int, int], None] | None = None) -> PublishOutcome:
    """Upload blobs (skipping those present), then create the manifest.

    `progress(done_bytes, total_bytes)` is called after each blob."""
    uploaded = skipped = uploaded_bytes = 0
    refs = []
    total = sum(s.path.stat().st_size if s.path is not None else len(s.data or b"")
                for s in files)
    done = 0
    for source in files:
        if source.path is not None:
            wrote = store.put_blob(source.path, source.digest)
            size = source.path.stat().st_size
        else:
            assert source.data is not None
            digest, wrote = store.put_blob_bytes(source.data)
            if digest != source.digest:
                raise StoreError(f"blob {source.role}: digest changed while publishing")
            size = len(source.data)
        uploaded += wrote
        skipped += not wrote
        uploaded_bytes += size if wrote else 0
        refs.append(BlobRef(source.role, source.digest, size, store.blob_record(source.digest)))
        done += size
        if progress is not None:
            progress(done, total)
    release_id = new_release_id(moment, name + manifest_body.get("run_id", ""))
    manifest = {"schema": MANIFEST_SCHEMA, "name": name, "release_id": release_id,
                "created_at": iso(moment), **manifest_body,
                "blobs": [ref.to_json() for ref in refs]}
    store.create(manifest_key(name, release_id), json.dumps(manifest, indent=2).encode())
    return PublishOutcome(release_id, manifest, uploaded, uploaded_bytes, skipped)


def manifest_key(name: str, release_id: str) -> str:
    return f"releases/{name}/{release_id}.json"


def pointer_key(name: str, environment: str) -> str:
    return f"environments/{name}/{environment}.json"


def read_manifest(store: Store, name: str, release_id: str) -> dict[str, Any]:
    if "/" in release_id or release_id.startswith("."):
        raise UsageError(f"invalid release id {release_id!r}")
    data = store.read(manifest_key(name, release_id))
    if data is None:
        raise UsageError(f"no release {release_id} of '{name}' in {store.url}")
    try:
        manifest: dict[str, Any] = json.loads(data)
    except ValueError:
        raise StoreError(f"release {release_id}: manifest is not valid JSON") from None
    return manifest


def list_releases(store: Store, name: str) -> list[str]:
    prefix = f"releases/{name}/"
    return sorted(key.removeprefix(prefix).removesuffix(".json")
                  for key in store.list(prefix) if key.endswith(".json"))


def verify_release(store: Store, manifest: dict[str, Any]) -> list[str]:
    """Problems with a release's blobs (missing, corrupt); empty when all are intact.

    This is the check before a pointer moves, as strong as publish's: the local store
    re-hashes; S3 compares its own checksum with the one recorded at publish (and
    re-hashes where it has none). `store verify` re-hashes everything.
    """
    problems = []
    for blob in manifest.get("blobs", []):
        stored = blob.get("stored")
        recorded = str(stored.get("checksum_sha256") or "") if isinstance(stored, dict) else ""
        problem = store.check_blob(blob["digest"], int(blob["size"]), recorded or None)
        if problem:
            problems.append(f"{blob['role']}: {problem}")
    return problems


@dataclass
class Pointer:
    name: str
    environment: str
    current: str | None
    events: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "environment": self.environment, "current": self.current,
                "events": self.events}


def read_pointer(store: Store, name: str, environment: str) -> tuple[Pointer, str | None]:
    found = store.read_versioned(pointer_key(name, environment))
    if found is None:
        return Pointer(name, environment, None, []), None
    data, etag = found
    try:
        body = json.loads(data)
    except ValueError:
        raise StoreError(f"environment pointer {environment} is not valid JSON") from None
    return Pointer(name, environment, body.get("current"), list(body.get("events", []))), etag


def manifest_digest(store: Store, name: str, release_id: str) -> str:
    data = store.read(manifest_key(name, release_id))
    if data is None:
        raise UsageError(f"no release {release_id} of '{name}' in {store.url}")
    return sha256_bytes(data)


def check_manifest_unchanged(pointer: Pointer, release_id: str, digest: str) -> None:
    """A manifest is written once: if it differs from when it was first promoted, someone
    edited it in the store, and nothing it names can be trusted."""
    for event in pointer.events:
        recorded = event.get("manifest_sha256")
        if event.get("release_id") == release_id and recorded and recorded != digest:
            raise StoreError(f"the manifest of release {release_id} changed since it was "
                             f"promoted at {event.get('at')} (sha256 {digest[:12]}, recorded "
                             f"{str(recorded)[:12]}): refusing to point at it")


def move_pointer(store: Store, name: str, environment: str, release_id: str, action: str,
                 by: str, note: str = "", run_id: str | None = None,
                 approved_by: list[str] | None = None,
                 actor: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compare-and-swap the pointer to `release_id`; append the event and an audit entry.

    `approved_by` (the approvals this move relies on) and `actor` (who ran the command,
    pipeline.identity) are part of the event: they are recorded only if the move succeeds."""
    pointer, etag = read_pointer(store, name, environment)
    repair_audit(store, name, environment, pointer)
    digest = manifest_digest(store, name, release_id)
    check_manifest_unchanged(pointer, release_id, digest)
    moment = utc_now()
    event: dict[str, Any] = {"action": action, "release_id": release_id,
                             "previous_release_id": pointer.current, "at": iso(moment),
                             "by": by, "manifest_sha256": digest}
    if note:
        event["note"] = note
    if run_id:
        event["run_id"] = run_id
    if approved_by:
        event["approved_by"] = approved_by
    if actor:
        event["actor"] = actor
    pointer.events.append(event)
    pointer.current = release_id
    store.write_if(pointer_key(name, environment),
                   json.dumps(pointer.to_json(), indent=2).encode(), etag)
    write_audit(store, name, environment, event)
    return event


def audit_key(name: str, environment: str, event: dict[str, Any]) -> str:
    """Named by the event itself, so that writing it again is harmless."""
    stamp = str(event["at"]).replace("-", "").replace(":", "").replace(".", "")
    tag = sha256_bytes(canonical_json(event))[:8]
    return f"audit/{name}/{stamp}-{event['action']}-{environment}-{tag}.json"


def write_audit(store: Store, name: str, environment: str, event: dict[str, Any]) -> None:
    # Already written means the same event, the same bytes.
    with contextlib.suppress(ConflictError):
        store.create(audit_key(name, environment, event),
                     canonical_json({**event, "environment": environment, "name": name}))


def repair_audit(store: Store, name: str, environment: str, pointer: Pointer) -> None:
    """The pointer is written before its audit entry: after a crash in between, the last
    event's entry is missing. It is rebuilt from the event (it holds nothing else)."""
    if pointer.events:
        last = pointer.events[-1]
        if store.read(audit_key(name, environment, last)) is None:
            write_audit(store, name, environment, last)


def rollback_target(pointer: Pointer) -> str:
    """The release that was current before the current one (like `rollout undo`)."""
    if pointer.current is None:
        raise UsageError(f"environment {pointer.environment} has no release to roll back from")
    for event in reversed(pointer.events):
        if event["release_id"] == pointer.current:
            previous = event.get("previous_release_id")
            if previous:
                return str(previous)
            break
    raise UsageError(f"environment {pointer.environment} has no earlier release than "
                     f"{pointer.current}")


def rollback(store: Store, name: str, environment: str, to: str | None,
             by: str, actor: dict[str, Any] | None = None) -> dict[str, Any]:
    pointer, _ = read_pointer(store, name, environment)
    target = to or rollback_target(pointer)
    if target == pointer.current:
        raise UsageError(f"{environment} already points at {target}")
    manifest = read_manifest(store, name, target)
    problems = verify_release(store, manifest)
    if problems:
        raise StoreError(f"release {target} cannot be rolled back to: " + "; ".join(problems))
    return move_pointer(store, name, environment, target, "rollback", by, actor=actor)
