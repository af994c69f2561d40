"""TorchServe's config.properties rendered from the spec (batching in milliseconds, token
auth on, the management API on loopback) and serve_spec.json for the handler."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pipeline.errors import PipelineError
from pipeline.servers.torchserve.passthrough import model_settings, property_lines
from pipeline.spec.models import Spec

MODEL_VERSION = "1.0"


RESPONSE_TIMEOUT_S = 120


def max_batch_delay_ms(spec: Spec) -> int:
    wanted = spec.server.batching.max_queue_delay
    delay = wanted.exact_in("ms")
    if delay is None:
        raise PipelineError(f"server.batching.max_queue_delay {wanted} is not a whole number "
                            "of milliseconds (TorchServe's maxBatchDelay)")
    return delay


def models_entry(spec: Spec) -> dict[str, Any]:
    """The model's entry in models=, with `server.torchserve.model` merged in."""
    return {spec.name: {MODEL_VERSION: model_entry(spec)}}


def model_entry(spec: Spec) -> dict[str, Any]:
    workers = spec.server.instances
    return {"defaultVersion": True, "marName": f"{spec.name}.mar",
            "minWorkers": workers, "maxWorkers": workers,
            "batchSize": spec.server.batching.max_batch_size,
            "maxBatchDelay": max_batch_delay_ms(spec),
            "responseTimeout": RESPONSE_TIMEOUT_S, **model_settings(spec)}


def render_properties(spec: Spec, ports: Mapping[str, int], model_store: str,
                      loopback_only: bool) -> str:
    """config.properties, then the keys of `server.torchserve.config`. Production binds the
    management API to loopback only; a run binds everything to loopback."""
    public = "127.0.0.1" if loopback_only else "0.0.0.0"
    lines = [
        "# Rendered by serve-pipeline from serve.yaml; do not edit by hand.",
        f"inference_address=http://{public}:{ports['inference']}",
        f"management_address=http://127.0.0.1:{ports['management']}",
        f"metrics_address=http://{public}:{ports['metrics']}",
        f"grpc_inference_address={public}",
        f"grpc_inference_port={ports['grpc_inference']}",
        "grpc_management_address=127.0.0.1",
        f"grpc_management_port={ports['grpc_management']}",
        f"model_store={model_store}",
        f"load_models={spec.name}.mar",
        f"default_workers_per_model={spec.server.instances}",
        "models=" + json.dumps(models_entry(spec), sort_keys=True),
        "metrics_mode=prometheus",
        "model_metrics_auto_detect=true",
        "disable_token_authorization=false",
        f"enable_model_api={'true' if spec.server.model_api else 'false'}",
        "install_py_dep_per_model=false",
        *property_lines(spec),
    ]
    return "\n".join(lines) + "\n"


def parse_properties(text: str) -> dict[str, str]:
    properties = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            properties[key.strip()] = value.strip()
    return properties


def check_properties(text: str, spec: Spec) -> list[str]:
    """Parse config.properties back and compare what TorchServe will read with the spec."""
    properties = parse_properties(text)
    problems = []
    try:
        models = json.loads(properties.get("models", ""))
    except ValueError:
        return ["models= is not valid JSON"]
    if models != models_entry(spec):
        problems.append(f"models= {models} differs from the spec {models_entry(spec)}")
    if properties.get("disable_token_authorization") != "false":
        problems.append("token authorization must stay on")
    if properties.get("metrics_mode") != "prometheus":
        problems.append("metrics_mode must be prometheus")
    if "127.0.0.1" not in properties.get("management_address", ""):
        problems.append("the management API must listen on loopback only")
    for line in property_lines(spec):
        key, _, value = line.partition("=")
        if properties.get(key) != value:
            problems.append(f"{key}= is not {value} (server.torchserve.config)")
    return problems


def serve_spec(spec: Spec, entrypoint_file: str | None) -> dict[str, Any]:
    """What the handler needs to know, packed into the archive as serve_spec.json."""
    packed: dict[str, Any] = {
        "format": spec.model.format,
        "inputs": [{"name": t.name, "dtype": t.dtype, "shape": t.shape} for t in spec.model.inputs],
        "outputs": [{"name": t.name, "dtype": t.dtype, "shape": t.shape}
                    for t in spec.model.outputs],
        "max_items": spec.server.batching.max_batch_size,
        "entrypoint": entrypoint_file,
        "trusted": spec.model.trusted,
    }
    if spec.model.sizes is not None:    # the handler warms its model at these
        packed["sizes"] = spec.model.sizes.parity_sizes()
    return packed
