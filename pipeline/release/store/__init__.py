"""Store backends: the protocol (base), a local directory (local), S3 (s3), and the one
place that picks a backend from a store URL."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from pipeline.errors import StoreError
from pipeline.release.store.base import Store
from pipeline.release.store.local import LocalStore
from pipeline.spec.models import LoadedSpec


def open_store(url: str, workspace: Path, endpoint_url: str | None = None) -> Store:
    if url.startswith("file://"):
        location = Path(url.removeprefix("file://"))
        root = location if location.is_absolute() else workspace / location
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"store {url}: cannot create {root}: {exc.strerror}") from None
        if not os.access(root, os.W_OK):
            raise StoreError(f"store {url}: {root} is not writable ({errno.errorcode[13]})")
        return LocalStore(root, url)
    if url.startswith("s3://"):
        from pipeline.release.store.s3 import S3Store

        return S3Store(url, endpoint_url)
    raise StoreError(f"store {url}: unknown scheme (expected file:// or s3://)")


def store_for(loaded: LoadedSpec) -> Store:
    """The store a spec publishes to (after its environment overlay)."""
    publish = loaded.spec.publish
    return open_store(publish.store, loaded.workspace, publish.endpoint_url)
