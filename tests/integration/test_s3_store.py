"""The release store over the S3 API, against a real S3-compatible server (moto)."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from pipeline.digest import sha256_bytes
from pipeline.errors import ConflictError, StoreError
from pipeline.release.manifest import (
    BlobSource,
    publish_release,
    read_manifest,
    utc_now,
    verify_release,
)
from pipeline.release.pointers import move_pointer, read_pointer, rollback
from pipeline.release.store.s3 import S3Store

from .conftest import S3Server

pytestmark = pytest.mark.integration


@pytest.fixture
def store(s3_env: S3Server) -> S3Store:
    return S3Store(f"s3://{s3_env.new_bucket()}/team/fraud")


def test_blobs_are_uploaded_once_and_verified(store: S3Store, tmp_path: Path) -> None:
    digest, wrote = store.put_blob_bytes(b"weights")
    assert wrote and store.put_blob_bytes(b"weights") == (digest, False)
    assert store.read_blob(digest) == b"weights"
    assert store.verify_blob(digest) is None
    assert store.list("blobs/") == [f"blobs/sha256/{digest}"]
    missing = sha256_bytes(b"never uploaded")
    assert store.verify_blob(missing) == f"blob {missing[:12]} is missing"


def test_large_blobs_go_multipart_with_checksums(store: S3Store, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(70 * 2**20))
    digest = hashlib.sha256(big.read_bytes()).hexdigest()
    assert store.put_blob(big, digest) is True
    assert store.put_blob(big, digest) is False
    head = store.client.head_object(Bucket=store.bucket, Key=store._key(f"blobs/sha256/{digest}"))
    assert head["ETag"].strip('"').endswith("-9")     # 70 MiB in 8 MiB parts
    assert head["Metadata"]["sha256"] == digest
    assert store.verify_blob(digest) is None


def test_create_only_and_compare_and_swap(store: S3Store) -> None:
    store.create("releases/demo/a.json", b"{}")
    with pytest.raises(ConflictError):
        store.create("releases/demo/a.json", b"{}")
    store.write_if("environments/demo/staging.json", b"start", None)
    # (Content-addressed etags: a contender writing the same bytes would keep the etag, and
    # rightly so; every contender here writes something new.)
    found = store.read_versioned("environments/demo/staging.json")
    assert found is not None
    _, etag = found
    winners: list[int] = []
    barrier = threading.Barrier(16)

    def contender(number: int) -> None:
        barrier.wait()
        try:
            store.write_if("environments/demo/staging.json", str(number).encode(), etag)
            winners.append(number)
        except ConflictError:
            pass

    threads = [threading.Thread(target=contender, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1
    assert store.read("environments/demo/staging.json") == str(winners[0]).encode()


def test_sixteen_promotions_race_for_one_pointer(store: S3Store) -> None:
    releases = []
    for number in range(16):
        payload = f"model-{number}".encode()
        source = BlobSource("model", None, payload, sha256_bytes(payload))
        releases.append(publish_release(store, "demo", [source], {"run_id": str(number)},
                                        utc_now()).release_id)
    move_pointer(store, "demo", "staging", releases[0], "promote", "seed")
    outcomes: list[str] = []
    barrier = threading.Barrier(16)

    def promote(number: int) -> None:
        barrier.wait()
        try:
            move_pointer(store, "demo", "staging", releases[number], "promote", f"p{number}")
            outcomes.append("won")
        except ConflictError:
            outcomes.append("lost")

    threads = [threading.Thread(target=promote, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Contenders that read the same pointer: exactly one of them wins (a later one
    # that read after a win promotes legitimately on top of it). No event is lost
    # and the history stays a chain.
    winners = outcomes.count("won")
    assert winners >= 1 and outcomes.count("lost") == 16 - winners
    pointer, _ = read_pointer(store, "demo", "staging")
    assert len(pointer.events) == 1 + winners and pointer.events[0]["by"] == "seed"
    for earlier, later in zip(pointer.events, pointer.events[1:], strict=False):
        assert later["previous_release_id"] == earlier["release_id"]
    assert pointer.current == pointer.events[-1]["release_id"]


def test_publish_rollback_and_tamper_detection(store: S3Store) -> None:
    ids = []
    for payload in (b"one", b"two"):
        source = BlobSource("model", None, payload, sha256_bytes(payload))
        ids.append(publish_release(store, "demo", [source], {"run_id": "r"}, utc_now())
                   .release_id)
    move_pointer(store, "demo", "staging", ids[0], "promote", "a")
    move_pointer(store, "demo", "staging", ids[1], "promote", "a")
    assert verify_release(store, read_manifest(store, "demo", ids[0])) == []
    # Same size and a forged digest in the metadata: S3's own checksum still tells.
    digest = sha256_bytes(b"one")
    store.client.put_object(Bucket=store.bucket, Key=store._key(f"blobs/sha256/{digest}"),
                            Body=b"eve", Metadata={"sha256": digest}, ChecksumAlgorithm="SHA256")
    with pytest.raises(StoreError, match="corrupt"):
        rollback(store, "demo", "staging", None, "a")
    assert read_pointer(store, "demo", "staging")[0].current == ids[1]


def test_unreachable_endpoint_and_missing_bucket_are_one_line_errors(s3_env: S3Server) -> None:
    store = S3Store("s3://no-such-bucket-here/x")
    with pytest.raises(StoreError, match="NoSuchBucket"):
        store.put_blob_bytes(b"x")
    dead = S3Store("s3://bucket/x", endpoint_url="http://127.0.0.1:9", attempts=1)
    with pytest.raises(StoreError, match="cannot"):
        dead.read("environments/x/staging.json")
