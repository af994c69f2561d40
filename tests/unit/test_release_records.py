"""The typed release records (manifest, pointer event, approval) read every store the tool
wrote and write back exactly the bytes it read.

`data/release_store/` is a local store written by earlier versions of the tool, never by
these records: the first release and its staging promotion by the version from before
pointer events recorded the manifest digest and releases were attested (its manifest has
no `attestation`, `created_by_actor` or `git`, its event no `manifest_sha256` or `actor`);
then, by the version before the records were typed, a signed release with a full manifest,
a release published with only a run id, promotions, a rollback with a note, a signed
approval for production and the production promotion it allowed. `data/release_keys/`
holds the public keys of its signers (ci signed the attestation, rita the approval).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pipeline.digest import canonical_json, sha256_bytes
from pipeline.errors import StoreError
from pipeline.release.chain import verify_offline
from pipeline.release.manifest import list_releases, read_manifest
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction, PointerEvent
from pipeline.release.pointers import audit_key, pointer_key, read_pointer
from pipeline.release.signing.approval_record import Approval, ApprovalPredicate
from pipeline.release.signing.approvals import approval_keys
from pipeline.release.signing.dsse import Envelope
from pipeline.release.signing.keys import TrustedKey, load_public_key
from pipeline.release.store.local import LocalStore
from pipeline.release.verify import verify_store

DATA = Path(__file__).resolve().parent / "data"
NAME = "fraud-mlp"
OLDEST, SIGNED, BARE = ("20261120T090000Z-16debe03", "20261130T120000Z-91e4424b",
                        "20261130T120100Z-6c121d3e")


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    root = tmp_path / "store"
    shutil.copytree(DATA / "release_store", root)
    return LocalStore(root, f"file://{root}")


def key(name: str) -> TrustedKey:
    public = (DATA / "release_keys" / f"{name}.pub").read_text()
    return TrustedKey(name, load_public_key(public, DATA, name))


def stored(store: LocalStore, key_name: str) -> bytes:
    data = store.read(key_name)
    assert data is not None, key_name
    return data


def test_every_stored_manifest_is_written_back_byte_for_byte(store: LocalStore) -> None:
    assert list_releases(store, NAME) == [OLDEST, SIGNED, BARE]
    for release_id in (OLDEST, SIGNED, BARE):
        data = stored(store, f"releases/{NAME}/{release_id}.json")
        manifest = Manifest.from_json(json.loads(data))
        assert json.dumps(manifest.to_json(), indent=2).encode() == data
        assert read_manifest(store, NAME, release_id) == manifest


def test_an_older_manifest_reads_without_the_keys_it_lacks(store: LocalStore) -> None:
    oldest = read_manifest(store, NAME, OLDEST)
    assert oldest.attestation is None and oldest.created_by_actor is None and oldest.git is None
    assert {"attestation", "created_by_actor", "git"}.isdisjoint(oldest.to_json())
    assert oldest.blob("verification") is not None and oldest.server_kind == "triton"
    assert all(blob.stored is None and blob.recorded_checksum is None for blob in oldest.blobs)
    bare = read_manifest(store, NAME, BARE)
    assert list(bare.to_json()) == ["schema", "name", "release_id", "created_at", "run_id",
                                    "created_by", "blobs"]
    assert bare.run_id == "older-run" and bare.gates == () and bare.model_sha256 is None
    signed = read_manifest(store, NAME, SIGNED)
    assert signed.attestation_digest is not None and signed.creator["user"] == "alice@build"
    assert signed.stage_metrics("latency") == {"p99_ms": 12.5}


def test_every_pointer_and_its_events_are_written_back_byte_for_byte(store: LocalStore) -> None:
    for environment in ("staging", "production"):
        pointer, _ = read_pointer(store, NAME, environment)
        data = stored(store, pointer_key(NAME, environment))
        assert json.dumps(pointer.to_json(), indent=2).encode() == data
        for event in pointer.events:
            # The audit entry is named by the event's own JSON: an event that read back
            # differently would name another entry.
            entry = stored(store, audit_key(NAME, environment, event))
            assert entry == canonical_json({**event.to_json(), "environment": environment,
                                            "name": NAME})


def test_records_built_by_this_version_write_what_the_earlier_ones_wrote(
        store: LocalStore) -> None:
    """Without a shape (a record publish, a move or an approval builds now) the records
    write the keys in the order the versions before them did."""
    data = stored(store, f"releases/{NAME}/{SIGNED}.json")
    read = Manifest.from_json(json.loads(data))
    draft = replace(read, name="", release_id="", created_at=None, blobs=(), shape=None)
    assert read.created_at is not None
    published = draft.published(NAME, SIGNED, read.created_at, read.blobs)
    assert json.dumps(published.to_json(), indent=2).encode() == data
    for environment in ("staging", "production"):
        pointer, _ = read_pointer(store, NAME, environment)
        for event in pointer.events:
            assert replace(event, shape=None).to_json() == event.to_json()
    [found] = approval_keys(store, NAME, "production")
    approval = Approval.from_json(json.loads(stored(store, found)))
    assert canonical_json(replace(approval, shape=None).to_json()) == stored(store, found)


def test_pointer_events_are_typed(store: LocalStore) -> None:
    staging, _ = read_pointer(store, NAME, "staging")
    assert [event.action for event in staging.events] == [
        PointerAction.PROMOTE, PointerAction.PROMOTE, PointerAction.PROMOTE,
        PointerAction.ROLLBACK]
    oldest, *_, back = staging.events
    assert oldest.manifest_sha256 is None and oldest.actor is None and oldest.note is None
    assert "manifest_sha256" not in oldest.to_json()
    assert back.withdraws(BARE) and back.note == "p99 doubled [INC-42]"
    assert back.manifest_sha256 == sha256_bytes(stored(store, f"releases/{NAME}/{SIGNED}.json"))
    production, _ = read_pointer(store, NAME, "production")
    [promoted] = production.events
    assert promoted.approved_by == ("rita",) and promoted.previous_release_id is None


def test_a_stored_approval_is_written_back_byte_for_byte(store: LocalStore) -> None:
    [found] = approval_keys(store, NAME, "production")
    data = stored(store, found)
    approval = Approval.from_json(json.loads(data))
    assert canonical_json(approval.to_json()) == data
    assert (approval.release_id, approval.by, approval.note) == (SIGNED, "rita", "looks good")
    statement = json.loads(Envelope.from_json(approval.envelope).payload)
    predicate = ApprovalPredicate.from_json(statement["predicate"])
    assert predicate.to_json() == statement["predicate"]
    assert predicate.environment_head == {"events": 0, "last_at": None, "current": None}


def test_an_old_store_still_verifies(store: LocalStore) -> None:
    check = verify_store(store)
    assert check.problems == [] and (check.manifests, check.pointers) == (3, 2)
    chain = verify_offline(store, NAME, SIGNED, [key("ci")], lambda _: [key("rita")])
    assert chain.problems == () and chain.attestation.signer == "ci"
    assert chain.approvers == ["rita"]
    unsigned = verify_offline(store, NAME, OLDEST, [key("ci")], lambda _: [key("rita")])
    assert unsigned.problems == ("the release is unsigned (no signed attestation)",)


def test_an_edited_manifest_no_longer_verifies(store: LocalStore) -> None:
    path = store.root / "releases" / NAME / f"{SIGNED}.json"
    body = json.loads(path.read_text())
    body["gates"][0]["observed"] = 1.0
    path.write_text(json.dumps(body, indent=2))
    chain = verify_offline(store, NAME, SIGNED, [key("ci")], lambda _: [key("rita")])
    assert "the manifest's gates differ from the attested gate results" in " ".join(
        chain.problems)
    assert any("rewritten after approval" in problem for problem in chain.problems)


@pytest.mark.parametrize("event", [
    {"action": "promote", "release_id": "r", "at": "t"},
    {"action": "approve", "release_id": "r", "previous_release_id": None, "at": "t", "by": "x"},
    "promote",
])
def test_an_event_the_tool_cannot_have_written_is_refused(event: Any) -> None:
    with pytest.raises(StoreError, match="pointer event"):
        PointerEvent.from_json(event)


def test_a_manifest_whose_blobs_cannot_be_read_is_refused() -> None:
    with pytest.raises(StoreError, match="a blob entry needs a role, a digest and a size"):
        Manifest.from_json({"blobs": [{"role": "model"}]})
    with pytest.raises(StoreError, match="blobs is not a list of JSON objects"):
        Manifest.from_json({"blobs": {"model": "abc"}})


def test_a_fact_of_an_unreadable_shape_is_kept_as_stored() -> None:
    body = {"run_id": "r", "gates": {"parity": "passed"}, "model": "m.pt", "later_key": [1]}
    manifest = Manifest.from_json(body)
    assert manifest.gates == () and manifest.model is None
    assert manifest.to_json() == body
