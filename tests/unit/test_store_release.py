from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.digest import deterministic_tar, sha256_bytes
from pipeline.errors import StoreError, UsageError
from pipeline.release.manifest import BlobSource, publish_release, read_manifest, utc_now
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer, read_checked_pointer, read_pointer
from pipeline.release.policy import rollback
from pipeline.release.store import open_store
from pipeline.release.store.local import LocalStore
from pipeline.release.verify import verify_store


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    opened = open_store("file://store", tmp_path)
    assert isinstance(opened, LocalStore)
    return opened


def release(store: LocalStore, payload: bytes, run_id: str = "r") -> str:
    source = BlobSource("model", None, payload, sha256_bytes(payload))
    return publish_release(store, "demo", [source], Manifest.from_json({"run_id": run_id}),
                           utc_now()).release_id


def test_rollback_without_history_is_a_usage_error(store: LocalStore) -> None:
    with pytest.raises(UsageError):
        rollback(store, "demo", "staging", None, "a")
    with pytest.raises(UsageError):
        read_manifest(store, "demo", "../../etc")


def test_deterministic_tar(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "m" / "1").mkdir(parents=True)
    (tree / "m" / "1" / "model.py").write_text("x = 1\n")
    (tree / "m" / "config.pbtxt").write_text("name: 'm'\n")
    first = deterministic_tar(tree, tmp_path / "a.tar")
    (tree / "m" / "1" / "__pycache__").mkdir()
    (tree / "m" / "1" / "__pycache__" / "model.pyc").write_bytes(b"junk")
    second = deterministic_tar(tree, tmp_path / "b.tar")
    assert first == second
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


def test_store_verify_finds_corrupt_blobs_and_dangling_pointers(store: LocalStore) -> None:
    from pipeline.release.verify import verify_store

    first = release(store, b"model-1")
    move_pointer(store, "demo", "staging", first, PointerAction.PROMOTE, "a")
    clean = verify_store(store)
    assert clean.problems == [] and clean.manifests == 1 and clean.pointers == 1
    (store.root / "blobs" / "sha256" / sha256_bytes(b"model-1")).write_bytes(b"bad")
    store.write_if("environments/demo/prod.json",
                   b'{"current": "nope", "events": [{"release_id": "nope"}]}', None)
    problems = verify_store(store).problems
    assert any("corrupt" in p for p in problems)
    assert any("prod: current release nope has no manifest" in p for p in problems)


def test_a_manifest_edited_after_promotion_is_refused(store: LocalStore) -> None:
    from pipeline.release.verify import verify_store

    first = release(store, b"model-1")
    second = release(store, b"model-2")
    move_pointer(store, "demo", "staging", first, PointerAction.PROMOTE, "a")
    move_pointer(store, "demo", "staging", second, PointerAction.PROMOTE, "a")
    path = store.root / "releases" / "demo" / f"{first}.json"
    path.write_text(path.read_text().replace('"run_id": "r"', '"run_id": "forged"'))
    with pytest.raises(StoreError, match="changed since it was promoted"):
        rollback(store, "demo", "staging", None, "a")
    assert read_pointer(store, "demo", "staging")[0].current == second
    assert any("tampered" in p for p in verify_store(store).problems)


class _MovesWhilePointerIsRead(LocalStore):
    """A promotion of `release_id` lands just after verify's first read of the pointer:
    the concurrent move of a busy store, timed where it once raised a false alarm."""

    release_id = ""

    def read(self, key: str) -> bytes | None:
        data = super().read(key)
        if key.startswith("environments/") and self.release_id:
            release_id, self.release_id = self.release_id, ""
            move_pointer(self, "demo", "staging", release_id, PointerAction.PROMOTE, "b")
        return data


def test_store_verify_takes_no_concurrent_move_for_a_lost_one(tmp_path: Path) -> None:
    from pipeline.release.verify import verify_store

    store = _MovesWhilePointerIsRead(tmp_path / "store", "file://store")
    move_pointer(store, "demo", "staging", release(store, b"model-1"), PointerAction.PROMOTE,
                 "a")
    second = store.release_id = release(store, b"model-2")
    assert verify_store(store).problems == []
    assert read_pointer(store, "demo", "staging")[0].current == second   # it did move
    assert verify_store(store).problems == []


def test_an_event_written_by_hand_is_never_laundered_into_the_audit_log(
        store: LocalStore) -> None:
    """A move whose audit write failed is repaired from its intent; an event added to the
    pointer by hand has none, so neither the next move nor `--repair` writes its entry."""
    first, second = release(store, b"one"), release(store, b"two", run_id="r2")
    move_pointer(store, "demo", "staging", first, PointerAction.PROMOTE, "ci")
    path = store.root / "environments" / "demo" / "staging.json"
    body = json.loads(path.read_text())
    forged = dict(body["events"][-1], release_id=second, previous_release_id=first,
                  at="2026-01-01T00:00:00.000000Z")
    body["events"].append(forged)
    body["current"] = second
    path.write_text(json.dumps(body))
    with pytest.raises(StoreError, match="was not begun by this tool"):
        move_pointer(store, "demo", "staging", first, PointerAction.ROLLBACK, "ci")
    check = verify_store(store, repair=True)
    assert check.repaired == []
    assert any("no intent recorded" in problem for problem in check.problems), check.problems
    assert not [key for key in store.list("audit/demo/") if "20260101" in key]


def test_a_current_edited_by_hand_is_refused(store: LocalStore) -> None:
    first, second = release(store, b"one"), release(store, b"two", run_id="r2")
    move_pointer(store, "demo", "production", first, PointerAction.PROMOTE, "ci")
    path = store.root / "environments" / "demo" / "production.json"
    path.write_text(path.read_text().replace(f'"current": "{first}"', f'"current": "{second}"'))
    with pytest.raises(StoreError, match="its last move set"):
        read_checked_pointer(store, "demo", "production")
    with pytest.raises(StoreError, match="the pointer was edited"):
        move_pointer(store, "demo", "production", first, PointerAction.ROLLBACK, "ci")
