"""Releases: manifests that bind model, config and gates, published blobs first.

Publish uploads every blob first and writes the manifest last and create-only,
so a crash in between leaves no visible release.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pipeline.digest import sha256_bytes
from pipeline.errors import StoreError, UsageError
from pipeline.record import RunRecord, ServerInfo
from pipeline.release.manifest_record import (
    MANIFEST_SCHEMA,
    VERIFICATION_ROLE,
    BlobRef,
    Manifest,
)
from pipeline.release.serving_layout import layout_problems
from pipeline.release.store.base import Store

__all__ = ["MANIFEST_SCHEMA", "VERIFICATION_ROLE", "BlobRef", "Manifest"]

def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_release_id(moment: datetime, seed: str) -> str:
    return f"{moment:%Y%m%dT%H%M%SZ}-{sha256_bytes((seed + secrets.token_hex(8)).encode())[:8]}"


@dataclass(frozen=True)
class PublishOutcome:
    release_id: str
    manifest: Manifest
    uploaded_blobs: int
    uploaded_bytes: int
    skipped_blobs: int


@dataclass(frozen=True)
class BlobSource:
    role: str
    path: Path | None
    data: bytes | None
    digest: str


def publish_release(store: Store, name: str, files: list[BlobSource], draft: Manifest,
                    moment: datetime,
                    progress: Callable[[int, int], None] | None = None,
                    before_manifest: Callable[[str, Manifest], Manifest] | None = None
                    ) -> PublishOutcome:
    """Upload blobs (skipping those present), then create the manifest.

    `progress(done_bytes, total_bytes)` is called after each blob; `before_manifest(release
    id, draft)` after the blobs, before the manifest, and returns the draft with what it
    wrote recorded (the serving layout is written there)."""
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
    release_id = draft.release_id or new_release_id(moment, name + (draft.run_id or ""))
    if before_manifest is not None:
        draft = before_manifest(release_id, draft)
    manifest = draft.published(name, release_id, iso(moment), tuple(refs))
    store.create(manifest_key(name, release_id),
                 json.dumps(manifest.to_json(), indent=2).encode())
    return PublishOutcome(release_id, manifest, uploaded, uploaded_bytes, skipped)


def manifest_key(name: str, release_id: str) -> str:
    return f"releases/{name}/{release_id}.json"


def read_manifest(store: Store, name: str, release_id: str) -> Manifest:
    if "/" in release_id or release_id.startswith("."):
        raise UsageError(f"invalid release id {release_id!r}")
    data = store.read(manifest_key(name, release_id))
    if data is None:
        raise UsageError(f"no release {release_id} of '{name}' in {store.url}")
    try:
        body = json.loads(data)
    except ValueError:
        raise StoreError(f"release {release_id}: manifest is not valid JSON") from None
    if not isinstance(body, dict):
        raise StoreError(f"release {release_id}: manifest is not a JSON object")
    manifest = Manifest.from_json(body, f"release {release_id}: manifest")
    if manifest.release_id != release_id:
        # A manifest copied or renamed under releases/ would bring another release's
        # evidence (and withdrawals) under a fresh id.
        raise StoreError(f"release {release_id}: its manifest names release "
                         f"{manifest.release_id!r} (copied or renamed under releases/)")
    return manifest


def list_releases(store: Store, name: str) -> list[str]:
    prefix = f"releases/{name}/"
    return sorted(key.removeprefix(prefix).removesuffix(".json")
                  for key in store.list(prefix) if key.endswith(".json"))


def verify_release(store: Store, manifest: Manifest) -> list[str]:
    """Problems with a release's blobs (missing, corrupt); empty when all are intact.

    This is the check before a pointer moves, as strong as publish's: the local store
    re-hashes; S3 compares its own checksum with the one recorded at publish (and
    re-hashes where it has none). `store verify` re-hashes everything. The serving layout
    published beside a release (pipeline.release.serving_layout) is re-hashed file by file:
    it is what a cluster's `storageUri` reads.
    """
    problems = []
    for blob in manifest.blobs:
        problem = store.check_blob(blob.digest, blob.size, blob.recorded_checksum)
        if problem:
            problems.append(f"{blob.role}: {problem}")
    return problems + layout_problems(store, manifest)


def manifest_digest(store: Store, name: str, release_id: str) -> str:
    data = store.read(manifest_key(name, release_id))
    if data is None:
        raise UsageError(f"no release {release_id} of '{name}' in {store.url}")
    return sha256_bytes(data)


def verification_blob(manifest: Manifest) -> str | None:
    """The digest of the blob holding the run record the release was verified with."""
    found = manifest.blob(VERIFICATION_ROLE)
    return found.digest if found is not None else None


class VerificationUnreadable(StoreError):
    """A release's verification record is missing or cannot be read; says which."""


def read_verification(store: Store, manifest: Manifest, release_id: str) -> RunRecord:
    """The run record a release was verified with, as stored (`run_id` and `stages`), with
    the release id and the server kind from the manifest where the blob does not say them."""
    digest = verification_blob(manifest)
    if digest is None:
        raise VerificationUnreadable("its manifest names no verification blob")
    try:
        body = json.loads(store.read_blob(digest))
    except StoreError as exc:
        raise VerificationUnreadable(f"cannot read its verification blob: {exc}") from None
    except ValueError:
        raise VerificationUnreadable("its verification blob is not JSON") from None
    if not isinstance(body, dict) or not isinstance(body.get("stages"), list):
        raise VerificationUnreadable("its verification blob holds no stage results")
    record = RunRecord.from_json(body)
    record.stages_sorted = True      # stored as canonical JSON
    if "release_id" not in body:
        record.release_id = release_id
        record.with_keys("release_id")
    if "server" not in body:
        record.server = ServerInfo(kind=manifest.server_kind)
        record.with_keys("server")
    return record


def release_record(store: Store, manifest: Manifest, release_id: str) -> RunRecord:
    """What `report <release_id>` shows when the run folder is gone: the verification's
    stages under the manifest's run id, environment and spec digest."""
    verification = read_verification(store, manifest, release_id)
    return RunRecord(run_id=manifest.run_id or "", status="passed",
                     environment=manifest.verified_in,
                     spec_digest=manifest.spec_digest, release_id=release_id,
                     stages=verification.stages,
                     shape=("run_id", "status", "environment", "spec_digest", "release_id",
                            "stages"), stages_sorted=True)
