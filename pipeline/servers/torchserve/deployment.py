"""TorchServe's release laid out for a deployment: KServe's layout for TorchServe
(`model-store/<name>.mar`, `config/config.properties`), and TorchServe as KServe runs it."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

from pipeline.errors import StoreError
from pipeline.servers.deployment import KSERVE_MODEL_ROOT, KServeRuntime, ReleaseFiles
from pipeline.servers.torchserve.mar import MANIFEST
from pipeline.servers.torchserve.properties import parse_properties
from pipeline.spec.models import Spec

MODEL_STORE = "model-store"
CONFIG_FOLDER = "config"


def lay_out_model_store(files: ReleaseFiles, destination: Path) -> None:
    """The published .mar in `model-store/` and the release's config.properties in
    `config/`, both as published."""
    if not zipfile.is_zipfile(files.artifact):
        raise StoreError("the release's artifact is not a model archive (.mar)")
    with zipfile.ZipFile(files.artifact) as archive:
        if MANIFEST not in archive.namelist():
            raise StoreError(f"the release's .mar has no {MANIFEST}")
    store = destination / MODEL_STORE
    store.mkdir(parents=True)
    shutil.copyfile(files.artifact, store / f"{files.name}.mar")
    config = destination / CONFIG_FOLDER
    config.mkdir()
    (config / files.config_name).write_bytes(files.config)


def _port(properties: dict[str, str], key: str) -> int:
    port = urlsplit(properties.get(key, "")).port
    if port is None:
        raise StoreError(f"the release's config.properties gives no port in {key}")
    return port


def kserve_runtime(spec: Spec, config: bytes) -> KServeRuntime:
    """torchserve in the foreground on the model store and config KServe downloads (as
    KServe's own TorchServe runtime starts it), serving on the release's inference port."""
    properties = parse_properties(config.decode())
    root = KSERVE_MODEL_ROOT
    return KServeRuntime(
        model_format="pytorch", model_format_version="1", protocol_versions=("v1",),
        protocol_version="v1", command=("torchserve",),
        args=("--start", "--foreground", "--ncs", f"--model-store={root}/{MODEL_STORE}",
              f"--ts-config={root}/{CONFIG_FOLDER}/config.properties"),
        http_port=_port(properties, "inference_address"),
        metrics_port=_port(properties, "metrics_address"))
