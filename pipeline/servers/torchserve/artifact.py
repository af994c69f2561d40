"""TorchServe's artifact: a reproducible .mar with a batching handler and the production
config.properties, or a published .mar checked against the spec."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from pipeline.digest import canonical_json, sha256_bytes, sha256_file
from pipeline.errors import PipelineError
from pipeline.servers.base import ASSETS, RUNTIME_MODULE, BuiltArtifact
from pipeline.servers.torchserve.mar import build_mar, read_member
from pipeline.servers.torchserve.properties import (
    MODEL_VERSION,
    check_properties,
    render_properties,
    serve_spec,
)
from pipeline.servers.torchserve.spec import TORCHSERVE_SPEC
from pipeline.spec.models import LoadedSpec, Spec


def production_config(spec: Spec) -> str:
    ports = {**TORCHSERVE_SPEC.production_ports, **spec.server.ports}
    return render_properties(spec, ports, "model-store", loopback_only=False)


def build_archive(loaded: LoadedSpec, model_file: Path, destination: Path) -> BuiltArtifact:
    spec = loaded.spec
    source = destination / "mar-source"
    source.mkdir(parents=True)
    stored = source / {"torchscript": "model.pt", "eager": "weights.pt",
                       "onnx": "model.onnx"}[spec.model.format]
    shutil.copyfile(model_file, stored)
    extras = [source / "model_runtime.py", source / "serve_spec.json"]
    shutil.copyfile(RUNTIME_MODULE, extras[0])
    entrypoint_file = None
    if spec.model.entrypoint is not None:
        file_part, _, attribute = spec.model.entrypoint.rpartition(":")
        shutil.copyfile(loaded.resolve(file_part), source / "entrypoint.py")
        extras.append(source / "entrypoint.py")
        entrypoint_file = f"entrypoint.py:{attribute}"
    extras[1].write_bytes(canonical_json(serve_spec(spec, entrypoint_file)))
    handler = source / "handler.py"
    shutil.copyfile(ASSETS / "torchserve_handler.py", handler)
    store = destination / "torchserve-store"
    mar = build_mar(spec.name, MODEL_VERSION, stored, handler, extras, store,
                    destination / "archiver-tmp", os.environ)
    config = production_config(spec)
    problems = check_properties(config, spec)
    if problems:
        raise PipelineError("config.properties check failed: " + "; ".join(problems))
    return BuiltArtifact("torchserve-mar", store, mar, sha256_file(mar), "config.properties",
                         config, sha256_bytes(config.encode()), model_file,
                         sha256_file(model_file))


def restore_archive(loaded: LoadedSpec, archive: Path, digest: str, model_file: Path,
                    destination: Path) -> BuiltArtifact:
    spec = loaded.spec
    store = destination / "torchserve-store"
    store.mkdir(parents=True)
    mar = store / f"{spec.name}.mar"
    shutil.copyfile(archive, mar)
    try:
        packed = json.loads(read_member(mar, "serve_spec.json"))
    except (KeyError, ValueError, OSError):
        raise PipelineError("the release's .mar has no readable serve_spec.json") from None
    entrypoint = packed.get("entrypoint")
    if packed != serve_spec(spec, entrypoint):
        raise PipelineError("the release's .mar was built for other tensors or batching than "
                            "this environment's spec: a promotion never rebuilds; change "
                            "serve.yaml and promote through the required environments")
    config = production_config(spec)
    return BuiltArtifact("torchserve-mar", store, mar, digest, "config.properties", config,
                         sha256_bytes(config.encode()), model_file, sha256_file(model_file))
