from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.digest import sha256_bytes
from pipeline.errors import PolicyError, StoreError, UsageError
from pipeline.release.manifest import BlobSource, publish_release, utc_now
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer, read_pointer
from pipeline.release.policy import promote_existing
from pipeline.release.store import open_store
from pipeline.release.store.local import LocalStore
from pipeline.servers.specs import load_spec
from tests.support.policy import sign_approval, trust_rita
from tests.support.recorded import recorded


def publish(store: LocalStore, payload: bytes) -> str:
    source = BlobSource("model", None, payload, sha256_bytes(payload))
    return publish_release(store, "fraud-mlp", [source],
                           Manifest.from_json({"run_id": "r", **recorded()}), utc_now()).release_id


@pytest.fixture
def store(project: Path) -> LocalStore:
    trust_rita(project)
    opened = open_store("file://.serve-pipeline/store", project)
    assert isinstance(opened, LocalStore)
    return opened


def test_production_takes_the_staging_release_only_with_an_approval(project: Path,
                                                                    store: LocalStore) -> None:
    production = load_spec(project / "serve.yaml", "production")
    release = publish(store, b"model")
    with pytest.raises(PolicyError, match="promote to staging first"):
        promote_existing(store, production, "production", None, "ci")
    move_pointer(store, "fraud-mlp", "staging", release, PointerAction.PROMOTE, "ci")

    with pytest.raises(PolicyError, match="needs a signed approval"):
        promote_existing(store, production, "production", None, "ci")
    pointer, _ = read_pointer(store, "fraud-mlp", "production")
    assert pointer.current is None and pointer.events == []

    sign_approval(store, project, release)
    event = promote_existing(store, production, "production", None, "ci").event
    assert event.release_id == release and event.approved_by == ("rita",)
    assert read_pointer(store, "fraud-mlp", "production")[0].current == release


def test_approved_by_is_refused(project: Path, store: LocalStore) -> None:
    production = load_spec(project / "serve.yaml", "production")
    release = publish(store, b"model")
    move_pointer(store, "fraud-mlp", "staging", release, PointerAction.PROMOTE, "ci")
    with pytest.raises(UsageError, match="a typed name is not an approval"):
        promote_existing(store, production, "production", None, "ci", approved_by="rita")


def test_a_release_that_never_passed_staging_is_refused(project: Path, store: LocalStore) -> None:
    production = load_spec(project / "serve.yaml", "production")
    passed = publish(store, b"model-1")
    other = publish(store, b"model-2")
    move_pointer(store, "fraud-mlp", "staging", passed, PointerAction.PROMOTE, "ci")
    with pytest.raises(PolicyError, match="has not passed staging"):
        promote_existing(store, production, "production", other, "ci")


def test_a_tampered_release_is_refused_before_the_pointer_moves(project: Path,
                                                                store: LocalStore) -> None:
    production = load_spec(project / "serve.yaml", "production")
    release = publish(store, b"model")
    move_pointer(store, "fraud-mlp", "staging", release, PointerAction.PROMOTE, "ci")
    (store.root / "blobs" / "sha256" / sha256_bytes(b"model")).write_bytes(b"evil")
    with pytest.raises(StoreError, match="corrupt"):
        promote_existing(store, production, "production", None, "ci")
    assert read_pointer(store, "fraud-mlp", "production")[0].current is None


def test_a_manifest_edited_after_its_approval_is_tampered_evidence(project: Path,
                                                                   store: LocalStore) -> None:
    """An approved release whose manifest was rewritten in the store since it passed
    staging exits as tampered evidence (3), not as a policy refusal (5): the edit, not a
    missing approval, is what the operator must hear about."""
    production = load_spec(project / "serve.yaml", "production")
    release = publish(store, b"model")
    move_pointer(store, "fraud-mlp", "staging", release, PointerAction.PROMOTE, "ci")
    sign_approval(store, project, release)
    manifest = store.root / "releases" / "fraud-mlp" / f"{release}.json"
    manifest.write_text(manifest.read_text().replace('"run_id": "r"', '"run_id": "x"'))
    with pytest.raises(StoreError, match="changed since it was promoted") as refused:
        promote_existing(store, production, "production", None, "ci")
    assert refused.value.exit_code == 3
    assert read_pointer(store, "fraud-mlp", "production")[0].current is None
