"""The release store over the S3 API, against a real S3-compatible server (moto)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

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
from pipeline.release.manifest_record import Manifest
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer, read_pointer
from pipeline.release.policy import rollback
from pipeline.release.store.s3 import S3Store
from pipeline.release.verify import verify_store
from tests.support.moto_s3 import S3Server

pytestmark = pytest.mark.integration


@pytest.fixture
def store(s3_env: S3Server) -> S3Store:
    return S3Store(f"s3://{s3_env.new_bucket()}/team/fraud")


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


def test_a_large_layout_file_is_created_once_in_parts_and_checked_by_its_checksum(
        store: S3Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A serving layout's large file: create-only in checksummed parts, S3's composite
    checksum kept, and the check before a pointer moves is one HEAD against it."""
    big = tmp_path / "model.pt"
    big.write_bytes(os.urandom(70 * 2**20))
    digest = hashlib.sha256(big.read_bytes()).hexdigest()
    key = "serving/demo/r1/demo/1/model.pt"
    record = store.create_file(key, big, digest)
    assert record is not None and record["bytes"] == str(70 * 2**20)
    assert record["checksum_sha256"].endswith("-9")          # 70 MiB in 8 MiB parts
    with pytest.raises(ConflictError, match="already exists"):
        store.create_file(key, big, digest)
    assert not store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads")
    reads: list[dict[str, Any]] = []
    real_get = store.client.get_object

    def counted_get(**kwargs: Any) -> Any:
        reads.append(kwargs)
        return real_get(**kwargs)

    monkeypatch.setattr(store.client, "get_object", counted_get)
    assert store.check_file(key, digest, record) is None
    assert reads == []                                      # no byte was downloaded
    # Replaced behind the store, same size, the digest forged in the metadata: S3's own
    # checksum is not the one kept at publish.
    store.client.put_object(Bucket=store.bucket, Key=store._key(key), Body=os.urandom(70 * 2**20),
                            Metadata={"sha256": digest}, ChecksumAlgorithm="SHA256")
    problem = store.check_file(key, digest, record)
    assert problem is not None and "is not the one published" in problem
    # A small file is one PUT, nothing kept: its check re-hashes it.
    small = tmp_path / "config.pbtxt"
    small.write_bytes(b"name: \"demo\"\n")
    small_key = "serving/demo/r1/demo/config.pbtxt"
    assert store.create_file(small_key, small, sha256_bytes(small.read_bytes())) is None
    assert store.check_file(small_key, sha256_bytes(small.read_bytes())) is None
    assert "is corrupt" in (store.check_file(small_key, sha256_bytes(b"other")) or "")


def test_a_same_size_replacement_with_forged_metadata_is_refused(store: S3Store) -> None:
    ids = []
    for payload in (b"one", b"two"):
        source = BlobSource("model", None, payload, sha256_bytes(payload))
        ids.append(publish_release(store, "demo", [source], Manifest.from_json({"run_id": "r"}),
                                   utc_now()).release_id)
    move_pointer(store, "demo", "staging", ids[0], PointerAction.PROMOTE, "a")
    move_pointer(store, "demo", "staging", ids[1], PointerAction.PROMOTE, "a")
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


def test_an_upload_a_killed_writer_left_is_listed_and_can_be_aborted(store: S3Store) -> None:
    key = store._key("blobs/sha256/" + "ab" * 32)
    started = store.client.create_multipart_upload(Bucket=store.bucket, Key=key)
    store.client.upload_part(Bucket=store.bucket, Key=key, UploadId=started["UploadId"],
                             PartNumber=1, Body=b"x" * 1024)
    check = verify_store(store)
    assert check.problems == []
    assert [item.split(": ")[0] for item in check.leftovers] == ["blobs/sha256/" + "ab" * 32]
    assert "incomplete upload of blobs/sha256/" in check.leftovers[0]
    (leftover,) = store.leftovers()
    store.remove_leftover(leftover)
    assert store.leftovers() == []
