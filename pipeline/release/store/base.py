"""The release store: immutable content-addressed blobs, create-only and compare-and-swap keys.

Layout (see shared/design/architecture.md):
    blobs/sha256/<hex>, releases/<name>/<id>.json, environments/<name>/<env>.json,
    audit/<name>/<timestamp>-<event>.json
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pipeline.errors import StoreError

HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Leftover:
    """What an interrupted writer left in the store: never read, never listed, but it takes
    space (a local temp file; an S3 multipart upload never completed, which S3 bills)."""

    what: str            # "temp file .x.json.ab12.tmp", "incomplete upload of blobs/..."
    key: str             # where: a path below the store's root, or the S3 key
    age_s: float
    handle: str = ""     # what removing it needs (the S3 upload id)


class Store(Protocol):
    url: str

    def has_blob(self, digest: str) -> bool: ...
    def put_blob(self, path: Path, digest: str) -> bool: ...
    def put_blob_bytes(self, data: bytes) -> tuple[str, bool]: ...
    def read_blob(self, digest: str) -> bytes: ...
    def fetch_blob(self, digest: str, destination: Path) -> None: ...
    def verify_blob(self, digest: str) -> str | None: ...
    def check_blob(self, digest: str, size: int, recorded: str | None = None) -> str | None: ...
    def blob_record(self, digest: str) -> dict[str, str] | None: ...
    def caller_identity(self) -> dict[str, str] | None: ...
    def create(self, key: str, data: bytes) -> None: ...
    def create_file(self, key: str, path: Path, digest: str) -> dict[str, str] | None:
        """`path` (whose sha256 is `digest`) written create-only under `key`, streamed;
        what the store computed of it to keep (S3's checksum of a large file), or None."""
        ...
    def check_file(self, key: str, digest: str,
                   recorded: dict[str, str] | None = None) -> str | None:
        """What is wrong with a file `create_file` wrote (given what it returned); None
        when it holds `digest`'s bytes."""
        ...
    def read(self, key: str) -> bytes | None: ...
    def read_versioned(self, key: str) -> tuple[bytes, str] | None: ...
    def write_if(self, key: str, data: bytes, expected_etag: str | None) -> None: ...
    def leftovers(self) -> list[Leftover]:
        """What interrupted writers left behind, oldest first."""
        ...
    def remove_leftover(self, leftover: Leftover) -> None: ...
    def list(self, prefix: str) -> list[str]:
        """Every key in the folder `prefix` and below, sorted ("a/b" is the folder "a/b/",
        never "a/bc/..."); "" lists the whole store."""
        ...


def read_verified(store: Store, digest: str) -> bytes:
    """A blob's bytes, refused when missing or not matching its digest."""
    data = store.read(blob_key(digest))
    if data is None:
        raise StoreError(f"store {store.url}: blob {digest[:12]} is missing")
    if hashlib.sha256(data).hexdigest() != digest:
        raise StoreError(f"store {store.url}: blob {digest[:12]} does not match its digest")
    return data


def blob_key(digest: str) -> str:
    if not HEX_DIGEST.match(digest):
        raise StoreError(f"not a sha256 digest: {digest!r}")
    return f"blobs/sha256/{digest}"
