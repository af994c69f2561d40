"""`server.torchserve:`, the block only TorchServe reads: config.properties keys and
model-level settings the spec does not model."""

from __future__ import annotations

from pydantic import Field

from pipeline.spec.models import Spec
from pipeline.spec.strict import StrictModel

KIND_NAME = "torchserve"

PropertyValue = str | int | float | bool


class TorchServeSettings(StrictModel):
    """`server.torchserve`: read when TorchServe serves the spec."""

    config: dict[str, PropertyValue] = Field(default_factory=dict, description=(
        "config.properties keys the spec does not model (job_queue_size, "
        "number_of_netty_threads, max_request_size, default_response_timeout, ...), written "
        "after the rendered ones. Checked against TorchServe's own keys; those the spec or "
        "serve-pipeline sets (addresses and ports, model_store, load_models, models, "
        "default_workers_per_model, metrics_mode, token authorization, enable_model_api) "
        "are refused here."))
    model: dict[str, PropertyValue] = Field(default_factory=dict, description=(
        "Model-level settings of the model's entry in config.properties' models= "
        "(responseTimeout, startupTimeout, parallelLevel, runtimeType); minWorkers, "
        "maxWorkers, batchSize and maxBatchDelay come from server.instances and "
        "server.batching and are refused here."))


def torchserve_settings(spec: Spec) -> TorchServeSettings:
    """The spec's `server.torchserve` block; the defaults where it has none."""
    section = spec.server.section(KIND_NAME)
    return section if isinstance(section, TorchServeSettings) else TorchServeSettings()
