"""A release's serving layout, published beside it: the files `materialize` would write (a
Triton model repository, TorchServe's model store with its config), under
`serving/<name>/<release id>/` in the store, where `export kserve` points `storageUri` by
default.

Publish lays the release out from the very bytes it uploads as blobs, lists every file's
sha256 in the manifest (`serving_layout.files`), and so in the attestation's subjects
(`<name>/serving/<path>`), then writes the files create-only after the blobs and before the
manifest: a crash leaves no visible release, only unreferenced objects under a release id
nothing names. Nothing under a release id is ever overwritten. Moving a pointer checks the
layout's bytes against the manifest, as it checks the blobs (pipeline.release.manifest.
verify_release), so a cluster reading `storageUri` reads what was verified.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from pipeline.release.manifest_record import Manifest
from pipeline.release.store.base import Store
from pipeline.servers.base import ServerKind
from pipeline.servers.deployment import ReleaseFiles

SUBJECT_PREFIX = "serving/"


def layout_prefix(name: str, release_id: str) -> str:
    """The store key every file of a release's layout is under."""
    return f"serving/{name}/{release_id}"


def file_digests(root: Path) -> dict[str, str]:
    """Every file under `root` by its relative path, with its sha256."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            hasher = hashlib.sha256()
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    hasher.update(chunk)
            found[path.relative_to(root).as_posix()] = hasher.hexdigest()
    return found


class PublishedLayout:
    """The layout of the files publish is about to upload, built in a scratch folder that
    lives as long as this value (use it as a context manager)."""

    def __init__(self, kind: ServerKind, files: ReleaseFiles) -> None:
        self._scratch = tempfile.TemporaryDirectory(prefix="serving-layout.")
        self.root = Path(self._scratch.name) / "layout"
        self.root.mkdir()
        try:
            kind.lay_out(files, self.root)
        except BaseException:
            self._scratch.cleanup()
            raise
        self.digests = file_digests(self.root)

    def __enter__(self) -> PublishedLayout:
        return self

    def __exit__(self, *_: object) -> None:
        self._scratch.cleanup()

    def manifest_entry(self, stored: Mapping[str, Mapping[str, str]] | None = None
                       ) -> dict[str, object]:
        """`files` (path: sha256), and `stored`: what the store computed of each file as
        `write` wrote it (S3's checksum of a large file), only where it computed any."""
        entry: dict[str, object] = {"files": dict(self.digests)}
        if stored:
            entry["stored"] = {path: dict(record) for path, record in sorted(stored.items())}
        return entry

    def write(self, store: Store, name: str, release_id: str, draft: Manifest) -> Manifest:
        """Every file create-only under the release's prefix, streamed; `draft` with the
        layout's entry and what the store computed of each file (publish_release's
        `before_manifest`)."""
        prefix = layout_prefix(name, release_id)
        stored = {}
        for path, digest in self.digests.items():
            record = store.create_file(f"{prefix}/{path}", self.root / path, digest)
            if record:
                stored[path] = record
        return replace(draft, serving_layout=self.manifest_entry(stored))


def layout_files(manifest: Manifest) -> dict[str, str]:
    """The layout's files (path: sha256) the manifest lists; empty when it has none."""
    files = (manifest.serving_layout or {}).get("files")
    if not isinstance(files, Mapping):
        return {}
    return {str(path): str(digest) for path, digest in files.items()}


def layout_subjects(name: str, files: Mapping[str, str]) -> list[dict[str, object]]:
    return [{"name": f"{name}/{SUBJECT_PREFIX}{path}", "digest": {"sha256": digest}}
            for path, digest in sorted(files.items())]


def layout_problems(store: Store, manifest: Manifest) -> list[str]:
    """Files of the published layout that are missing or differ from the manifest: each
    re-hashed (streamed), or, where publish kept S3's checksum of a large file, checked
    with one HEAD against it, as blobs are."""
    problems = []
    prefix = layout_prefix(manifest.name, manifest.release_id)
    stored = (manifest.serving_layout or {}).get("stored")
    records = stored if isinstance(stored, Mapping) else {}
    for path, digest in layout_files(manifest).items():
        record = records.get(path)
        recorded = {str(k): str(v) for k, v in record.items()} \
            if isinstance(record, Mapping) else None
        problem = store.check_file(f"{prefix}/{path}", digest, recorded)
        if problem:
            problems.append(f"serving layout: {problem}")
    return problems
