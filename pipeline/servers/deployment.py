"""What a server kind tells a deployment of a release: how the release's files are laid out
for the server to load (`materialize`), and how KServe runs that server (`export kserve`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Where KServe's storage initializer puts what `storageUri` names, in the serving container.
KSERVE_MODEL_ROOT = "/mnt/models"


@dataclass(frozen=True)
class ReleaseFiles:
    """A release's served files, each already checked against the manifest's digest."""

    name: str            # the spec's (and the model's) name
    artifact: Path       # a copy of the artifact blob: a model repository tar, a .mar
    config: bytes        # the rendered production config, as published
    config_name: str     # "config.pbtxt" | "config.properties"


@dataclass(frozen=True)
class KServeRuntime:
    """A kind's serving container under KServe: what its ServingRuntime declares and runs."""

    model_format: str                  # supportedModelFormats[].name, modelFormat.name
    model_format_version: str
    protocol_versions: tuple[str, ...]  # what the runtime serves
    protocol_version: str              # what the InferenceService asks for
    command: tuple[str, ...]
    args: tuple[str, ...]
    http_port: int                     # the container port KServe routes to
    metrics_port: int
    metrics_path: str = "/metrics"
