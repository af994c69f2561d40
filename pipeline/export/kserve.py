"""`serve-pipeline export kserve`: a release as KServe objects, a `ServingRuntime` and an
`InferenceService` (serving.kserve.io).

The ServingRuntime runs the release's serving image, pinned by its registry digest, as the
server kind says KServe runs it (pipeline/servers/<kind>/deployment.py); the
InferenceService points `storageUri` at the release as `materialize` writes it, asks for
the resources of the spec the release was verified with, and carries the release id, the
manifest's and the attestation's digests as annotations, so that what the cluster serves
can be traced back to the evidence it was promoted on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from pipeline.errors import StoreError, UsageError
from pipeline.release.manifest import manifest_digest
from pipeline.release.manifest_record import Manifest
from pipeline.release.materialize import release_config, release_kind
from pipeline.release.serving_layout import layout_prefix, layout_problems
from pipeline.release.store.base import Store
from pipeline.servers.deployment import KServeRuntime
from pipeline.servers.specs import validate_spec
from pipeline.spec.models import Spec

API_GROUP = "serving.kserve.io"
INFERENCE_SERVICE_VERSION = f"{API_GROUP}/v1beta1"
SERVING_RUNTIME_VERSION = f"{API_GROUP}/v1alpha1"
ANNOTATION_PREFIX = "serve-pipeline.dev"
CONTAINER_NAME = "kserve-container"     # the name KServe gives the serving container
SERVING_USER_ID = 1000                  # as in the serving images (docker/images.py)
PINNED = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
# KServe names an InferenceService as a DNS-1035 label.
SERVICE_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_LIMIT = 63
# Docker's memory units (server.image.memory_limit) as Kubernetes quantities.
MEMORY_UNITS = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}


@dataclass(frozen=True)
class KServeExport:
    serving_runtime: dict[str, Any]
    inference_service: dict[str, Any]

    def documents(self) -> list[dict[str, Any]]:
        return [self.serving_runtime, self.inference_service]


def pinned_image(manifest: Manifest) -> str:
    """The release's serving image as repository@sha256:<digest>; UsageError otherwise."""
    reference = (manifest.image or {}).get("reference")
    if isinstance(reference, str) and PINNED.match(reference):
        return reference
    shown = f"its image is {reference}" if reference else "it has no pushed serving image"
    raise UsageError(f"release {manifest.release_id} of '{manifest.name}': {shown}, not pinned "
                     "by digest (publish pushes one when server.image sets a base and a "
                     "repository)")


def release_spec(store: Store, manifest: Manifest) -> Spec:
    """The spec the release was verified with (its spec blob, digest checked)."""
    blob = manifest.blob("spec")
    if blob is None:
        raise StoreError(f"release {manifest.release_id}: its manifest names no spec blob")
    try:
        body = json.loads(store.read_blob(blob.digest))
        return validate_spec(body["spec"])
    except StoreError as exc:
        raise StoreError(f"release {manifest.release_id} spec: {exc}") from None
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StoreError(f"release {manifest.release_id}: its spec blob cannot be read: "
                         f"{first}") from None


def memory_quantity(docker: str) -> str:
    """`8g` (docker's --memory, as server.image.memory_limit takes it) as `8Gi`."""
    unit = docker[-1] if docker[-1] in MEMORY_UNITS else ""
    return docker[:len(docker) - len(unit)] + MEMORY_UNITS[unit]


def resources(spec: Spec) -> dict[str, Any]:
    """Limits from the spec: one GPU on device gpu, the serving image's memory limit."""
    limits: dict[str, str] = {}
    if spec.server.device == "gpu":
        limits["nvidia.com/gpu"] = "1"
    image = spec.server.image
    if image is not None and image.memory_limit is not None:
        limits["memory"] = memory_quantity(image.memory_limit)
    return {"limits": limits} if limits else {}


def runtime_name(name: str, release_id: str) -> str:
    suffix = release_id.lower()
    return f"{name[:NAME_LIMIT - len(suffix) - 1].rstrip('-')}-{suffix}"


def release_annotations(manifest: Manifest, manifest_sha256: str) -> dict[str, str]:
    attestation = manifest.attestation_digest
    if attestation is None:
        raise UsageError(f"release {manifest.release_id} of '{manifest.name}' has no "
                         "attestation: what a cluster serves must be traceable to one")
    return {f"{ANNOTATION_PREFIX}/release-id": manifest.release_id,
            f"{ANNOTATION_PREFIX}/manifest-sha256": manifest_sha256,
            f"{ANNOTATION_PREFIX}/attestation-sha256": attestation}


def serving_runtime(name: str, image: str, runtime: KServeRuntime, labels: Mapping[str, str],
                    notes: Mapping[str, str]) -> dict[str, Any]:
    container = {
        "name": CONTAINER_NAME, "image": image, "command": list(runtime.command),
        "args": list(runtime.args),
        "ports": [{"containerPort": runtime.http_port, "name": "http1", "protocol": "TCP"}],
        "securityContext": {"runAsUser": SERVING_USER_ID, "runAsNonRoot": True,
                            "allowPrivilegeEscalation": False, "privileged": False,
                            "capabilities": {"drop": ["ALL"]}},
    }
    return {
        "apiVersion": SERVING_RUNTIME_VERSION, "kind": "ServingRuntime",
        "metadata": {"name": name, "labels": dict(labels), "annotations": dict(notes)},
        "spec": {
            "annotations": {"prometheus.kserve.io/port": str(runtime.metrics_port),
                            "prometheus.kserve.io/path": runtime.metrics_path},
            "supportedModelFormats": [{"name": runtime.model_format,
                                       "version": runtime.model_format_version,
                                       "autoSelect": False}],
            "protocolVersions": list(runtime.protocol_versions),
            "containers": [container],
        },
    }


def inference_service(spec: Spec, runtime_name: str, runtime: KServeRuntime,
                      storage_uri: str, canary_percent: int | None,
                      labels: Mapping[str, str], notes: Mapping[str, str]) -> dict[str, Any]:
    model: dict[str, Any] = {
        "modelFormat": {"name": runtime.model_format, "version": runtime.model_format_version},
        "runtime": runtime_name, "protocolVersion": runtime.protocol_version,
        "storageUri": storage_uri,
    }
    wanted = resources(spec)
    if wanted:
        model["resources"] = wanted
    predictor: dict[str, Any] = {"model": model}
    if canary_percent is not None:
        predictor = {"canaryTrafficPercent": canary_percent, **predictor}
    return {
        "apiVersion": INFERENCE_SERVICE_VERSION, "kind": "InferenceService",
        "metadata": {"name": spec.name, "labels": dict(labels), "annotations": dict(notes)},
        "spec": {"predictor": predictor},
    }


def default_storage_uri(store: Store, manifest: Manifest) -> str:
    """Where publish (`publish.serving_layout`) or `materialize` writes a release for a
    cluster: beside the releases in an S3 store. A local store is not reachable from a
    cluster: --storage-uri then. The layout must be there, and intact where the manifest
    lists it: KServe's storage initializer would otherwise fail only in the cluster."""
    if not store.url.startswith("s3://"):
        raise UsageError(f"the store {store.url} is not reachable from a cluster: materialize "
                         "the release where it is (`materialize ... --to s3://...`) and give "
                         "that as --storage-uri")
    prefix = layout_prefix(manifest.name, manifest.release_id)
    uri = f"{store.url.rstrip('/')}/{prefix}"
    problems = layout_problems(store, manifest)
    if problems:
        raise StoreError(f"release {manifest.release_id} at {uri}: {problems[0]}")
    if not store.list(prefix + "/"):
        raise UsageError(f"nothing is at {uri}, the default storageUri: publish the release "
                         f"with publish.serving_layout, or `serve-pipeline materialize "
                         f"{manifest.release_id} --to {uri}` first, or give --storage-uri")
    return uri


def export_kserve(store: Store, manifest: Manifest, storage_uri: str | None,
                  canary_percent: int | None) -> KServeExport:
    """The ServingRuntime and the InferenceService for `manifest`'s release."""
    if canary_percent is not None and not 0 <= canary_percent <= 100:
        raise UsageError(f"--canary {canary_percent}: a percentage of traffic is 0 to 100")
    uri = storage_uri or default_storage_uri(store, manifest)
    image = pinned_image(manifest)
    spec = release_spec(store, manifest)
    if not SERVICE_NAME.match(spec.name):
        raise UsageError(f"name {spec.name!r} of release {manifest.release_id}: KServe names an "
                         "InferenceService with a lowercase letter first (a DNS-1035 label)")
    digest = manifest_digest(store, manifest.name, manifest.release_id)
    notes = release_annotations(manifest, digest)
    _, config = release_config(store, manifest)
    runtime = release_kind(manifest).kserve_runtime(spec, config)
    labels = {"app.kubernetes.io/name": spec.name,
              "app.kubernetes.io/managed-by": "serve-pipeline"}
    name = runtime_name(spec.name, manifest.release_id)
    return KServeExport(serving_runtime(name, image, runtime, labels, notes),
                        inference_service(spec, name, runtime, uri, canary_percent, labels,
                                          notes))
