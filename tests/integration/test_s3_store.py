"""The release store over the S3 API, against a real S3-compatible server (moto)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from pipeline.digest import sha256_bytes
from pipeline.errors import StoreError
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
