"""Releases of the examples in a local store, published as the publish stage does (artifact,
model, config, spec, verification, attestation) but built without a server or a subprocess:
Triton's model repository is rendered as the build stage renders it; TorchServe's .mar is a
small model archive written here (torch-model-archiver is a subprocess)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from pipeline.digest import canonical_json, sha256_bytes, sha256_file
from pipeline.release.manifest import BlobSource, Manifest, publish_release, utc_now
from pipeline.release.pointer_event import PointerAction
from pipeline.release.pointers import move_pointer
from pipeline.release.serving_layout import PublishedLayout
from pipeline.release.signing.attestation import attestation_blob
from pipeline.release.store.local import LocalStore
from pipeline.servers import server_kind
from pipeline.servers.base import BuiltArtifact
from pipeline.servers.deployment import ReleaseFiles
from pipeline.servers.specs import load_spec
from pipeline.servers.torchserve.artifact import production_config
from pipeline.servers.torchserve.mar import MANIFEST
from pipeline.servers.torchserve.properties import serve_spec
from pipeline.servers.triton.artifact import build_repository
from pipeline.spec.models import LoadedSpec

IMAGE_DIGEST = "sha256:" + hashlib.sha256(b"a serving image").hexdigest()
PINNED_IMAGE: dict[str, Any] = {
    "id": "sha256:" + "1" * 64, "repository": "registry.example/ml/fraud-mlp", "tag": "run",
    "digest": IMAGE_DIGEST, "reference": f"registry.example/ml/fraud-mlp@{IMAGE_DIGEST}",
    "labels": {}, "pushed": True}
UNPUSHED_IMAGE: dict[str, Any] = {"id": "sha256:" + "1" * 64, "reference": None,
                                  "labels": {}, "pushed": False}


@dataclass(frozen=True)
class ExampleRelease:
    loaded: LoadedSpec
    store: LocalStore
    manifest: Manifest

    @property
    def release_id(self) -> str:
        return self.manifest.release_id

    def blob_path(self, role: str) -> Path:
        blob = self.manifest.blob(role)
        assert blob is not None, role
        return self.store.root / "blobs" / "sha256" / blob.digest


def _mar(loaded: LoadedSpec, model_file: Path, folder: Path) -> Path:
    """A model archive as TorchServe loads it: the manifest, the model, serve_spec.json."""
    folder.mkdir(parents=True)
    mar = folder / f"{loaded.spec.name}.mar"
    manifest = {"model": {"modelName": loaded.spec.name, "serializedFile": "model.pt",
                          "handler": "handler.py", "modelVersion": "1.0"},
                "runtime": "python", "archiverVersion": "0.12.0"}
    with zipfile.ZipFile(mar, "w") as archive:
        archive.writestr(MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
        archive.writestr("model.pt", model_file.read_bytes())
        archive.writestr("serve_spec.json", canonical_json(serve_spec(loaded.spec, None)))
    return mar


def built_artifact(loaded: LoadedSpec, scratch: Path) -> BuiltArtifact:
    model_file = loaded.resolve(loaded.spec.model.source.path or "")
    if loaded.spec.server.kind == "triton":
        return build_repository(loaded, model_file, scratch)
    mar = _mar(loaded, model_file, scratch / "torchserve-store")
    config = production_config(loaded.spec)
    return BuiltArtifact("torchserve-mar", mar.parent, mar, sha256_file(mar),
                         "config.properties", config, sha256_bytes(config.encode()),
                         model_file, sha256_file(model_file))


def publish_example(spec_file: Path, store_root: Path, scratch: Path,
                    image: dict[str, Any] | None = PINNED_IMAGE,
                    environment: str | None = "production",
                    attested: bool = True, serving_layout: bool = False) -> ExampleRelease:
    """The example of `spec_file` published to the local store at `store_root`, and the
    pointer of `environment` moved onto it (unless None); with `serving_layout`, its layout
    beside it as the publish stage writes it."""
    loaded = load_spec(spec_file, None)
    spec = loaded.spec
    build = built_artifact(loaded, scratch)
    spec_bytes = loaded.canonical_json().encode()
    verification = canonical_json({"run_id": "example-run", "stages": []})
    files = [
        BlobSource(build.kind, build.archive, None, build.digest),
        BlobSource("model", build.model_file, None, build.model_digest),
        BlobSource(build.config_name, None, build.config_text.encode(), build.config_digest),
        BlobSource("spec", None, spec_bytes, sha256_bytes(spec_bytes)),
        BlobSource("verification", None, verification, sha256_bytes(verification)),
    ]
    draft = Manifest(
        run_id="example-run", created_by="alice", verified_in="staging",
        spec_digest=loaded.digest,
        server={"kind": spec.server.kind, "runtime": spec.server.runtime,
                "backend": spec.server.backend, "device": spec.server.device},
        model={"source": spec.model.source.describe(), "format": spec.model.format,
               "sha256": build.model_digest},
        artifact={"kind": build.kind, "sha256": build.digest},
        config={"file": build.config_name, "sha256": build.config_digest}, image=image)
    store = LocalStore(store_root, f"file://{store_root}")
    with ExitStack() as layouts:
        layout = None
        if serving_layout:
            layout = layouts.enter_context(PublishedLayout(
                server_kind(spec.server.kind),
                ReleaseFiles(spec.name, build.archive, build.config_text.encode(),
                             build.config_name)))
            draft = replace(draft, serving_layout=layout.manifest_entry())
        if attested:
            attestation, draft = attestation_blob(spec.name, files, draft, None)
            files.append(attestation)
        outcome = publish_release(
            store, spec.name, files, draft, utc_now(),
            before_manifest=None if layout is None else partial(layout.write, store,
                                                                 spec.name))
    if environment is not None:
        move_pointer(store, spec.name, environment, outcome.release_id, PointerAction.PROMOTE,
                     "alice")
    return ExampleRelease(loaded, store, outcome.manifest)
