"""A large file written create-only to S3 in parts, each with the SHA-256 S3 checks.

boto3's transfer manager uploads in parallel parts but cannot make the upload
create-only (`If-None-Match` is not among its arguments), so a key that must never be
overwritten (a file of a release's serving layout) is uploaded here part by part, in the
transfer manager's part size, and completed with `If-None-Match: *`: a key that exists
already fails the completion and nothing is replaced. A failed upload is aborted, so no
parts are left billed in the bucket.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import StoreError
from pipeline.release.store.s3_checksum import b64, part_size

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client


def upload_create_only(client: S3Client, bucket: str, key: str, path: Path,
                       digest: str) -> None:
    """Upload `path` to `key` unless the key exists; refuses a file whose bytes are no
    longer `digest`. Raises botocore's errors as they come (the caller names the store)."""
    size = path.stat().st_size
    started = client.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256",
                                             Metadata={"sha256": digest})
    upload_id = started["UploadId"]
    try:
        parts: list[dict[str, Any]] = []
        whole = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(part_size(size)):
                whole.update(chunk)
                checksum = b64(hashlib.sha256(chunk).hexdigest())
                sent = client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id,
                                          PartNumber=len(parts) + 1, Body=chunk,
                                          ChecksumAlgorithm="SHA256", ChecksumSHA256=checksum)
                parts.append({"PartNumber": len(parts) + 1, "ETag": sent["ETag"],
                              "ChecksumSHA256": checksum})
        if whole.hexdigest() != digest:
            raise StoreError(f"{path} changed while it was published: sha256 "
                             f"{whole.hexdigest()[:12]} is not {digest[:12]}")
        client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                         MultipartUpload={"Parts": parts},  # type: ignore[typeddict-item]
                                         IfNoneMatch="*")
    except BaseException:
        with contextlib.suppress(Exception):   # the upload's own error is the one to report
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        raise
