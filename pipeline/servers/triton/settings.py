"""`server.triton:`, the block only Triton reads: config.pbtxt fields the spec does not
model, and the size of the response cache they may turn on."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from pipeline.spec.models import Spec
from pipeline.spec.strict import StrictModel
from pipeline.spec.units import ByteSize, SizeField

KIND_NAME = "triton"


class TritonSettings(StrictModel):
    """`server.triton`: read when Triton serves the spec."""

    config: dict[str, Any] = Field(default_factory=dict, description=(
        "config.pbtxt fields the spec does not model (response_cache, model_warmup, "
        "rate_limiter, optimization, dynamic_batching.priority_levels, ...), written as "
        "YAML in the shape of Triton's ModelConfig; merged into the rendered config.pbtxt. "
        "Checked against Triton's own ModelConfig protobuf; fields the spec sets "
        "(max_batch_size, input, output, instance_group, "
        "dynamic_batching.max_queue_delay_microseconds, ...) are refused here."))
    cache_size: SizeField = Field(default=ByteSize(64 * 2**20, "64MiB"), description=(
        "Size of tritonserver's local response cache (--cache-config local,size=...), "
        "started only when config enables response_cache."))


def triton_settings(spec: Spec) -> TritonSettings:
    """The spec's `server.triton` block; the defaults where it has none."""
    section = spec.server.section(KIND_NAME)
    return section if isinstance(section, TritonSettings) else TritonSettings()
