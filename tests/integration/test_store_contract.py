"""What every release store promises (`Store` in pipeline/release/store/base.py), checked
against each backend: a local directory, and S3 over HTTP (moto in server mode).

Create-only writes refuse an overwrite, compare-and-swap updates have one winner and
lose cleanly, reads of a blob check its digest, listing returns keys under a prefix.
What only one backend does (S3's multipart checksums, moto's faults, a local file's
flock) is tested beside that backend: test_s3_store.py, tests/reliability/,
tests/unit/test_store_release.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.digest import sha256_bytes
from pipeline.errors import ConflictError, StoreError, UsageError
from pipeline.release.manifest import BlobSource, publish_release, read_manifest, utc_now
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer, read_pointer
from pipeline.release.policy import rollback
from pipeline.release.store import open_store
from pipeline.release.store.base import Store, blob_key
from pipeline.release.store.local import LocalStore
from pipeline.release.store.s3 import S3Store
from tests.support.moto_s3 import S3Server

pytestmark = pytest.mark.integration

POINTER = "environments/demo/staging.json"
CONTENDERS = 16


@dataclass(frozen=True)
class Backend:
    """A store, and a way around it to change its bytes (as a person with bucket or disk
    access could), for the tests of what its reads detect."""

    store: Store
    overwrite: Callable[[str, bytes], object]


def local_backend(tmp_path: Path) -> Backend:
    store = open_store("file://store", tmp_path)
    assert isinstance(store, LocalStore)
    return Backend(store, lambda key, data: (store.root / key).write_bytes(data))


def s3_backend(server: S3Server, tmp_path: Path) -> Backend:
    store = open_store(f"s3://{server.new_bucket()}/team/fraud", tmp_path)
    assert isinstance(store, S3Store)

    def overwrite(key: str, data: bytes) -> None:
        store.client.put_object(Bucket=store.bucket, Key=store._key(key), Body=data)

    return Backend(store, overwrite)


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "local":
        return local_backend(tmp_path)
    return s3_backend(request.getfixturevalue("s3_env"), tmp_path)


@pytest.fixture
def store(backend: Backend) -> Store:
    return backend.store


def release(store: Store, payload: bytes, run_id: str = "r") -> str:
    source = BlobSource("model", None, payload, sha256_bytes(payload))
    return publish_release(store, "demo", [source], Manifest.from_json({"run_id": run_id}),
                           utc_now()).release_id


def race(contenders: int, attempt: Callable[[int], object]) -> tuple[list[int], list[int]]:
    """Run `attempt(n)` for every contender at once; who won and who lost (ConflictError)."""
    winners: list[int] = []
    losers: list[int] = []
    barrier = threading.Barrier(contenders)

    def contend(number: int) -> None:
        barrier.wait()
        try:
            attempt(number)
            winners.append(number)
        except ConflictError:
            losers.append(number)

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return winners, losers


# ------------------------------------------------------------------ blobs


def test_blobs_are_content_addressed_and_written_once(store: Store, tmp_path: Path) -> None:
    digest, wrote = store.put_blob_bytes(b"weights")
    assert wrote and digest == sha256_bytes(b"weights")
    assert store.put_blob_bytes(b"weights") == (digest, False)
    source = tmp_path / "weights.bin"
    source.write_bytes(b"weights")
    assert store.put_blob(source, digest) is False
    assert store.has_blob(digest) and store.read_blob(digest) == b"weights"
    assert store.verify_blob(digest) is None
    assert store.check_blob(digest, len(b"weights")) is None
    assert store.list("blobs/") == [blob_key(digest)]


def test_a_file_that_is_not_its_digest_is_not_stored(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "weights.bin"
    source.write_bytes(b"weights")
    claimed = sha256_bytes(b"other weights")
    with pytest.raises(StoreError, match="changed while it was published"):
        store.put_blob(source, claimed)
    assert not store.has_blob(claimed) and store.list("blobs/") == []


def test_a_missing_blob_is_reported_not_invented(store: Store, tmp_path: Path) -> None:
    missing = sha256_bytes(b"never uploaded")
    assert not store.has_blob(missing)
    assert store.verify_blob(missing) == f"blob {missing[:12]} is missing"
    with pytest.raises(StoreError, match="is missing"):
        store.read_blob(missing)
    destination = tmp_path / "out.bin"
    with pytest.raises(StoreError, match="is missing"):
        store.fetch_blob(missing, destination)
    assert not destination.exists()
    with pytest.raises(StoreError, match="not a sha256 digest"):
        store.has_blob("../../etc/passwd")


def test_reads_detect_a_blob_changed_behind_the_store(backend: Backend, tmp_path: Path) -> None:
    store = backend.store
    digest, _ = store.put_blob_bytes(b"weights")
    destination = tmp_path / "out.bin"
    store.fetch_blob(digest, destination)
    assert destination.read_bytes() == b"weights"
    backend.overwrite(blob_key(digest), b"tampered")
    assert "is corrupt" in (store.verify_blob(digest) or "")
    assert "is corrupt" in (store.check_blob(digest, len(b"weights")) or "")
    with pytest.raises(StoreError, match="does not match its digest"):
        store.read_blob(digest)
    with pytest.raises(StoreError, match="does not match its digest"):
        store.fetch_blob(digest, destination)
    assert not destination.exists()


# ------------------------------------------------------------------ keys


def test_create_refuses_to_overwrite(store: Store) -> None:
    assert store.read("releases/demo/a.json") is None
    store.create("releases/demo/a.json", b"{}")
    with pytest.raises(ConflictError, match="already exists"):
        store.create("releases/demo/a.json", b"{changed}")
    assert store.read("releases/demo/a.json") == b"{}"


def test_compare_and_swap_loses_cleanly(store: Store) -> None:
    assert store.read_versioned(POINTER) is None
    with pytest.raises(ConflictError):
        store.write_if(POINTER, b"from nowhere", "an-etag-never-seen")
    store.write_if(POINTER, b"start", None)
    with pytest.raises(ConflictError, match="nothing was changed"):
        store.write_if(POINTER, b"again from absent", None)
    found = store.read_versioned(POINTER)
    assert found is not None and found[0] == b"start"
    store.write_if(POINTER, b"second", found[1])
    with pytest.raises(ConflictError, match="nothing was changed"):
        store.write_if(POINTER, b"from a stale read", found[1])
    assert store.read(POINTER) == b"second"


def test_compare_and_swap_has_exactly_one_winner(store: Store) -> None:
    store.write_if(POINTER, b"start", None)
    found = store.read_versioned(POINTER)
    assert found is not None
    # Every contender writes something new: with content-addressed etags, one writing the
    # same bytes would keep the etag, and rightly so.
    winners, losers = race(CONTENDERS, lambda n: store.write_if(POINTER, str(n).encode(),
                                                                found[1]))
    assert len(winners) == 1 and len(losers) == CONTENDERS - 1
    assert store.read(POINTER) == str(winners[0]).encode()


def test_list_returns_the_keys_under_a_prefix(store: Store) -> None:
    assert store.list("releases/") == []
    for key in ("releases/demo/b.json", "releases/demo/a.json", "releases/other/c.json",
                "releases/demo2/d.json"):
        store.create(key, b"{}")
    store.write_if(POINTER, b"start", None)
    assert store.list("releases/demo/") == ["releases/demo/a.json", "releases/demo/b.json"]
    # A prefix is a folder, with or without its slash: "demo" never lists "demo2".
    assert store.list("releases/demo") == store.list("releases/demo/")
    assert store.list("releases/") == ["releases/demo/a.json", "releases/demo/b.json",
                                       "releases/demo2/d.json", "releases/other/c.json"]
    assert store.list("environments/") == [POINTER]
    assert store.list("") == sorted([*store.list("releases/"), POINTER])


def test_keys_stay_inside_the_store(store: Store) -> None:
    for key in ("../outside.json", "/etc/passwd", "releases/../../outside.json"):
        with pytest.raises(StoreError, match="invalid store key"):
            store.create(key, b"{}")
        with pytest.raises(StoreError, match="invalid store key"):
            store.read(key)


# ------------------------------------------------------------------ releases on top


def test_publish_promote_rollback_history(store: Store) -> None:
    first = release(store, b"model-1", "run-1")
    second = release(store, b"model-2", "run-2")
    assert read_manifest(store, "demo", first).run_id == "run-1"
    move_pointer(store, "demo", "staging", first, PointerAction.PROMOTE, "alice")
    move_pointer(store, "demo", "staging", second, PointerAction.PROMOTE, "bob")
    event = rollback(store, "demo", "staging", None, "carol").event
    assert event.release_id == first and event.previous_release_id == second
    pointer, _ = read_pointer(store, "demo", "staging")
    assert pointer.current == first
    assert [e.action for e in pointer.events] == ["promote", "promote", "rollback"]
    entries = store.list("audit/demo/")
    assert len([key for key in entries if "-intent-" not in key]) == 3
    assert len([key for key in entries if "-intent-" in key]) == 3   # each before its swap
    with pytest.raises(UsageError):
        rollback(store, "demo", "production", None, "a")


def test_rollback_refuses_a_release_with_a_corrupt_blob(backend: Backend) -> None:
    store = backend.store
    first = release(store, b"model-1")
    second = release(store, b"model-2")
    move_pointer(store, "demo", "staging", first, PointerAction.PROMOTE, "a")
    move_pointer(store, "demo", "staging", second, PointerAction.PROMOTE, "a")
    backend.overwrite(blob_key(sha256_bytes(b"model-1")), b"tampered")
    with pytest.raises(StoreError, match="corrupt"):
        rollback(store, "demo", "staging", None, "a")
    assert read_pointer(store, "demo", "staging")[0].current == second


def test_sixteen_promotions_race_for_one_pointer(store: Store) -> None:
    releases = [release(store, f"model-{n}".encode(), str(n)) for n in range(CONTENDERS)]
    move_pointer(store, "demo", "staging", releases[0], PointerAction.PROMOTE, "seed")
    winners, losers = race(CONTENDERS, lambda n: move_pointer(
        store, "demo", "staging", releases[n], PointerAction.PROMOTE, f"p{n}"))
    # Contenders that read the same pointer: exactly one of them wins (a later one that
    # read after a win promotes legitimately on top of it). No event is lost and the
    # history stays a chain.
    assert winners and len(losers) == CONTENDERS - len(winners)
    pointer, _ = read_pointer(store, "demo", "staging")
    assert len(pointer.events) == 1 + len(winners) and pointer.events[0].by == "seed"
    for earlier, later in zip(pointer.events, pointer.events[1:], strict=False):
        assert later.previous_release_id == earlier.release_id
    assert pointer.current == pointer.events[-1].release_id
