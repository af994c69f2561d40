"""Store backends: the protocol (base), a local directory (local), S3 (s3), and the one
place that picks a backend from a store URL."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.errors import StoreError
from pipeline.release.store.base import Store
from pipeline.release.store.local import LocalStore, unwritable_reason
from pipeline.spec.models import LoadedSpec


def open_store(url: str, workspace: Path, endpoint_url: str | None = None,
               create: bool = True) -> Store:
    """`create`: a local store's folder is made (and checked writable) now, so that a run
    that will publish fails before it starts; a command that only reads (history, releases,
    report) passes False and leaves no empty store behind."""
    if url.startswith("file://"):
        location = Path(url.removeprefix("file://"))
        root = location if location.is_absolute() else workspace / location
        if not create:
            existing = next(path for path in (root, *root.parents) if path.exists())
            if not existing.is_dir():
                raise StoreError(f"store {url}: {existing} is not a directory")
            return LocalStore(root, url)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"store {url}: cannot create {root}: {exc.strerror}") from None
        if not os.access(root, os.W_OK):
            raise StoreError(f"store {url}: {root} {unwritable_reason(root)}")
        return LocalStore(root, url)
    if url.startswith("s3://"):
        from pipeline.release.store.s3 import S3Store

        return S3Store(url, endpoint_url)
    raise StoreError(f"store {url}: unknown scheme (expected file:// or s3://)")


def store_for(loaded: LoadedSpec, create: bool = True) -> Store:
    """The store a spec publishes to (after its environment overlay); `create` as in
    open_store."""
    publish = loaded.spec.publish
    return open_store(publish.store, loaded.workspace, publish.endpoint_url, create)
