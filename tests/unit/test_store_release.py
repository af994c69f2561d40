from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pipeline.digest import deterministic_tar, sha256_bytes
from pipeline.errors import ConflictError, StoreError, UsageError
from pipeline.release.manifest import BlobSource, publish_release, read_manifest, utc_now
from pipeline.release.pointers import move_pointer, read_pointer, rollback
from pipeline.release.store import open_store
from pipeline.release.store.local import LocalStore


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    opened = open_store("file://store", tmp_path)
    assert isinstance(opened, LocalStore)
    return opened


def release(store: LocalStore, payload: bytes, run_id: str = "r") -> str:
    source = BlobSource("model", None, payload, sha256_bytes(payload))
    return publish_release(store, "demo", [source], {"run_id": run_id}, utc_now()).release_id


def test_blobs_are_content_addressed_and_written_once(store: LocalStore, tmp_path: Path) -> None:
    digest, wrote = store.put_blob_bytes(b"abc")
    assert wrote and digest == sha256_bytes(b"abc")
    assert store.put_blob_bytes(b"abc") == (digest, False)
    source = tmp_path / "file.bin"
    source.write_bytes(b"abc")
    assert store.put_blob(source, digest) is False
    assert store.read_blob(digest) == b"abc"
    with pytest.raises(StoreError):
        store.put_blob(source, sha256_bytes(b"other"))


def test_manifests_are_create_only(store: LocalStore) -> None:
    store.create("releases/demo/x.json", b"{}")
    with pytest.raises(ConflictError):
        store.create("releases/demo/x.json", b"{}")
    assert store.read("releases/demo/x.json") == b"{}"


def test_compare_and_swap_has_exactly_one_winner(store: LocalStore) -> None:
    store.write_if("environments/demo/staging.json", b"start", None)
    # (Content-addressed etags: a contender writing the same bytes would keep the etag, and
    # rightly so; every contender here writes something new.)
    _, etag = store.read_versioned("environments/demo/staging.json") or (b"", "")
    winners: list[int] = []
    losers: list[int] = []
    barrier = threading.Barrier(16)

    def contender(number: int) -> None:
        barrier.wait()
        try:
            store.write_if("environments/demo/staging.json", str(number).encode(), etag)
            winners.append(number)
        except ConflictError:
            losers.append(number)

    threads = [threading.Thread(target=contender, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1 and len(losers) == 15
    assert store.read("environments/demo/staging.json") == str(winners[0]).encode()


def test_publish_promote_rollback_history(store: LocalStore) -> None:
    first = release(store, b"model-1", "run-1")
    second = release(store, b"model-2", "run-2")
    assert read_manifest(store, "demo", first)["run_id"] == "run-1"
    move_pointer(store, "demo", "staging", first, "promote", "alice")
    move_pointer(store, "demo", "staging", second, "promote", "bob")
    event = rollback(store, "demo", "staging", None, "carol")
    assert event["release_id"] == first and event["previous_release_id"] == second
    pointer, _ = read_pointer(store, "demo", "staging")
    assert pointer.current == first
    assert [e["action"] for e in pointer.events] == ["promote", "promote", "rollback"]
    assert len(store.list("audit/demo/")) == 3


def test_rollback_refuses_a_release_with_a_corrupt_blob(store: LocalStore) -> None:
    first = release(store, b"model-1")
    second = release(store, b"model-2")
    move_pointer(store, "demo", "staging", first, "promote", "a")
    move_pointer(store, "demo", "staging", second, "promote", "a")
    (store.root / "blobs" / "sha256" / sha256_bytes(b"model-1")).write_bytes(b"tampered")
    with pytest.raises(StoreError, match="corrupt"):
        rollback(store, "demo", "staging", None, "a")
    pointer, _ = read_pointer(store, "demo", "staging")
    assert pointer.current == second


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
    move_pointer(store, "demo", "staging", first, "promote", "a")
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
    move_pointer(store, "demo", "staging", first, "promote", "a")
    move_pointer(store, "demo", "staging", second, "promote", "a")
    path = store.root / "releases" / "demo" / f"{first}.json"
    path.write_text(path.read_text().replace('"run_id": "r"', '"run_id": "forged"'))
    with pytest.raises(StoreError, match="changed since it was promoted"):
        rollback(store, "demo", "staging", None, "a")
    assert read_pointer(store, "demo", "staging")[0].current == second
    assert any("tampered" in p for p in verify_store(store).problems)
