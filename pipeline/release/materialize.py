"""`serve-pipeline materialize`: a release written out as its server loads it.

The artifact and the config come out of the store checked against the manifest's digests,
and the server kind lays them out (pipeline/servers/<kind>/deployment.py): a Triton model
repository, or TorchServe's model store with its config (KServe's layout). The layout is
built in a temporary folder beside the destination and renamed into place, so the
destination holds the whole release or nothing. A destination that already holds files is
refused unless they are exactly this release.

An S3 destination (`s3://bucket/prefix`) is written through the store layer, one object
at a time, create-only: S3 has no rename, so an interrupted copy is completed by running
the command again, which checks what is there and adds what is missing.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import StoreError, UsageError
from pipeline.release.manifest_record import Manifest
from pipeline.release.serving_layout import file_digests
from pipeline.release.store import open_store
from pipeline.release.store.base import Store
from pipeline.servers import server_kind
from pipeline.servers.base import ServerKind
from pipeline.servers.deployment import ReleaseFiles


@dataclass(frozen=True)
class Materialized:
    release_id: str
    server_kind: str
    destination: str
    files: tuple[str, ...]       # relative paths, sorted
    written: int                 # files written now; 0 when it already held the release


def release_kind(manifest: Manifest) -> ServerKind:
    try:
        return server_kind(manifest.server_kind or "")
    except ValueError:
        raise StoreError(f"release {manifest.release_id}: its manifest names no server kind "
                         f"this version serves ({manifest.server_kind!r})") from None


def release_config(store: Store, manifest: Manifest) -> tuple[str, bytes]:
    """The release's rendered config (its name and bytes), checked against its digest."""
    name, digest = manifest.config_file, manifest.config_sha256
    if name is None or digest is None:
        raise StoreError(f"release {manifest.release_id}: its manifest names no config")
    try:
        return name, store.read_blob(digest)
    except StoreError as exc:
        raise StoreError(f"release {manifest.release_id} {name}: {exc}") from None


def fetch_release(store: Store, manifest: Manifest, scratch: Path) -> ReleaseFiles:
    """The artifact (copied into `scratch`) and config of a release, each checked against
    the manifest's digest on the way."""
    digest = manifest.artifact_sha256
    if digest is None:
        raise StoreError(f"release {manifest.release_id}: its manifest names no artifact")
    artifact = scratch / "artifact"
    try:
        store.fetch_blob(digest, artifact)
    except StoreError as exc:
        raise StoreError(f"release {manifest.release_id} artifact: {exc}") from None
    config_name, config = release_config(store, manifest)
    return ReleaseFiles(manifest.name, artifact, config, config_name)


def lay_out(store: Store, manifest: Manifest, scratch: Path) -> Path:
    """The release laid out by its kind in `scratch/layout`."""
    kind = release_kind(manifest)
    files = fetch_release(store, manifest, scratch)
    layout = scratch / "layout"
    layout.mkdir()
    try:
        kind.lay_out(files, layout)
    except StoreError as exc:
        raise StoreError(f"release {manifest.release_id} in {store.url}: {exc}") from None
    return layout


def materialize(store: Store, manifest: Manifest, destination: str,
                workspace: Path) -> Materialized:
    """Write `manifest`'s release to `destination`: a folder, or `s3://bucket/prefix`."""
    if destination.startswith("s3://"):
        return _into_store(store, manifest, open_store(destination, workspace))
    folder = Path(destination.removeprefix("file://"))
    return _into_folder(store, manifest, folder if folder.is_absolute() else workspace / folder)


def _refusal(where: str, manifest: Manifest) -> UsageError:
    return UsageError(f"{where} is not empty and does not hold release {manifest.release_id}: "
                      "materialize into an empty or new folder")


def _into_folder(store: Store, manifest: Manifest, folder: Path) -> Materialized:
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} exists and is not a folder")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = tempfile.TemporaryDirectory(prefix=f".{folder.name}.", dir=folder.parent)
    except OSError as exc:
        raise UsageError(f"cannot write into {folder.parent}: {exc.strerror}") from None
    with work as scratch:
        layout = lay_out(store, manifest, Path(scratch))
        wanted = file_digests(layout)
        done = Materialized(manifest.release_id, manifest.server_kind or "", str(folder),
                            tuple(wanted), 0)
        if folder.is_dir() and any(folder.iterdir()):
            if file_digests(folder) == wanted:
                return done
            raise _refusal(str(folder), manifest)
        _sync(layout)
        try:
            # Renames over an empty folder too; a folder filled meanwhile is refused.
            os.rename(layout, folder)
        except OSError:
            raise _refusal(str(folder), manifest) from None
        return Materialized(done.release_id, done.server_kind, done.destination, done.files,
                            len(wanted))


def _sync(root: Path) -> None:
    """Every file of the layout on disk before the rename makes it visible."""
    for path in root.rglob("*"):
        if path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())


def _into_store(store: Store, manifest: Manifest, target: Store) -> Materialized:
    with tempfile.TemporaryDirectory() as scratch:
        layout = lay_out(store, manifest, Path(scratch))
        wanted = file_digests(layout)
        present = target.list("")
        if set(present) - set(wanted):
            raise _refusal(target.url, manifest)
        for key in present:
            data = target.read(key)
            if data is None or hashlib.sha256(data).hexdigest() != wanted[key]:
                raise _refusal(target.url, manifest)
        missing = [key for key in wanted if key not in present]
        for key in missing:
            target.create(key, (layout / key).read_bytes())
        return Materialized(manifest.release_id, manifest.server_kind or "", target.url,
                            tuple(wanted), len(missing))
