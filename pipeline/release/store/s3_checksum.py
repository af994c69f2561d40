"""The SHA-256 checksum S3 computes for a blob, and the same value computed from local bytes.

S3 validates a SHA-256 sent with every PUT and every part of a multipart upload and
keeps the result: for a single PUT the SHA-256 of the whole object, for a multipart
upload the SHA-256 of the concatenated part SHA-256s, with the part count ("<b64>-N").
A writer cannot make S3 report a value that does not match the bytes it stored, so
comparing S3's answer with the value recorded at publish checks the bytes without
reading them (one HEAD per blob, whatever its size).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from s3transfer.utils import ChunksizeAdjuster

from pipeline.errors import StoreError

MULTIPART_THRESHOLD = 64 * 2**20
PART_SIZE = 8 * 2**20


def b64(digest_hex: str) -> str:
    return base64.b64encode(bytes.fromhex(digest_hex)).decode()


def part_size(size: int) -> int:
    """The part size boto3's transfer manager uses for a file of `size` bytes (it grows the
    configured size when a file would need more than 10,000 parts)."""
    return int(ChunksizeAdjuster().adjust_chunksize(PART_SIZE, size))


def expected_checksum(path: Path, digest: str, size: int) -> str:
    """S3's checksum of `path` as this store uploads it; refuses a file whose bytes are no
    longer `digest` (so the value binds the digest, not merely the file)."""
    if size < MULTIPART_THRESHOLD:
        return b64(digest)
    whole = hashlib.sha256()
    parts: list[bytes] = []
    with path.open("rb") as handle:
        while chunk := handle.read(part_size(size)):
            whole.update(chunk)
            parts.append(hashlib.sha256(chunk).digest())
    if whole.hexdigest() != digest:
        raise StoreError(f"{path} changed while it was published: sha256 "
                         f"{whole.hexdigest()[:12]} is not {digest[:12]}")
    composite = base64.b64encode(hashlib.sha256(b"".join(parts)).digest()).decode()
    return f"{composite}-{len(parts)}"


def store_answer(head: Mapping[str, Any]) -> str | None:
    """The SHA-256 checksum a HEAD (ChecksumMode=ENABLED) reports, as "<b64>" for a whole
    object or "<b64>-N" for a multipart one; None when the store reports none."""
    checksum = head.get("ChecksumSHA256")
    if not checksum:
        return None
    text = str(checksum)
    etag = str(head.get("ETag", "")).strip('"')
    parts = etag.rsplit("-", 1)[1] if "-" in etag else None
    # AWS appends the part count to a composite checksum; some S3 APIs (moto) do not, but
    # the multipart ETag ("<md5>-N", computed by the store) still says how many parts.
    if "-" not in text:
        return f"{text}-{parts}" if parts else text
    # A composite value on an object that was not uploaded in that many parts is a value
    # someone supplied, not one the store computed: no answer (the caller re-hashes).
    return text if parts is not None and text.rsplit("-", 1)[1] == parts else None


def stored_record(head: Mapping[str, Any]) -> dict[str, str]:
    """What the manifest keeps of a blob as the store holds it."""
    record = {"checksum_sha256": store_answer(head) or "", "etag": str(head.get("ETag", ""))}
    if head.get("VersionId"):
        record["version_id"] = str(head["VersionId"])
    return record
