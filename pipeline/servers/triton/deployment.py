"""Triton's release laid out for a deployment: the model repository as published (model
folder, version folder, config.pbtxt), and Triton as KServe runs it."""

from __future__ import annotations

import tarfile
from pathlib import Path

from pipeline.errors import StoreError
from pipeline.servers.deployment import KSERVE_MODEL_ROOT, KServeRuntime, ReleaseFiles
from pipeline.servers.triton.config import MODEL_VERSION
from pipeline.spec.models import Spec

# KServe's ports for Triton (its own kserve-tritonserver runtime uses them).
KSERVE_HTTP_PORT = 8080
KSERVE_GRPC_PORT = 9000
METRICS_PORT = 8002


def lay_out_repository(files: ReleaseFiles, destination: Path) -> None:
    """The published model repository tar unpacked into `destination`; its config.pbtxt
    must be the release's config blob, byte for byte."""
    try:
        with tarfile.open(files.artifact) as bundle:
            bundle.extractall(destination, filter="data")
    except tarfile.TarError as exc:
        raise StoreError(f"the release's model repository cannot be unpacked: {exc}") from None
    config = destination / files.name / files.config_name
    if not (destination / files.name / MODEL_VERSION).is_dir() or not config.is_file():
        raise StoreError(f"the release's model repository has no {files.name}/{MODEL_VERSION}/ "
                         f"and {files.name}/{files.config_name}")
    if config.read_bytes() != files.config:
        raise StoreError(f"the release's model repository holds a {files.config_name} other "
                         f"than the release's {files.config_name} blob")


def kserve_runtime(spec: Spec) -> KServeRuntime:
    """tritonserver on the model repository KServe downloads, with the production flags of
    the serving image (the repository API off, strict readiness)."""
    gpu = "true" if spec.server.device == "gpu" else "false"
    return KServeRuntime(
        model_format="triton", model_format_version="2", protocol_versions=("v2", "grpc-v2"),
        protocol_version="v2", command=("tritonserver",),
        args=(f"--model-repository={KSERVE_MODEL_ROOT}", f"--http-port={KSERVE_HTTP_PORT}",
              f"--grpc-port={KSERVE_GRPC_PORT}", f"--metrics-port={METRICS_PORT}",
              "--allow-http=true", "--allow-grpc=true", "--model-control-mode=none",
              "--strict-readiness=true", "--exit-on-error=true", f"--allow-gpu-metrics={gpu}",
              "--allow-sagemaker=false", "--allow-vertex-ai=false"),
        http_port=KSERVE_HTTP_PORT, metrics_port=METRICS_PORT)
