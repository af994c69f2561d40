"""The optional `tune:` block: narrows what `serve-pipeline tune` searches, and its limits.

Every list is a set of choices; unset, the search uses its defaults (see
pipeline/tune/space.py). The block never changes what is served, so it is left out
of the spec's digest (a release does not change identity when its search space does).
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pipeline.spec.units import Duration, DurationField, SizeField


class TuneSpec(BaseModel):
    # Like spec.models.StrictModel (not imported from there: models imports this module).
    model_config = ConfigDict(extra="forbid", frozen=True)

    instances: list[int] | None = Field(default=None, description=(
        "Instance counts to try (Triton instance_group count, per GPU with device gpu; "
        "TorchServe workers). Default: 1 up to the CPU count (at most 4), or 1, 2, 4 per "
        "GPU."))
    max_batch_size: list[int] | None = Field(default=None, description=(
        "max_batch_size values to try. Default: 1, 8, 16, 32, 64 up to the spec's own "
        "value or 64, whichever is larger."))
    max_queue_delay: list[DurationField] | None = Field(default=None, description=(
        "max_queue_delay values to try, each with a unit. Default: 0, 1ms, 2ms, 5ms "
        "(TorchServe: whole milliseconds 1ms, 2ms, 5ms), within the queue budget."))
    preferred_batch_sizes: list[list[int]] | None = Field(default=None, description=(
        "Triton preferred_batch_sizes choices (each a list; sizes over a candidate's "
        "max_batch_size are dropped). Default: the spec's own list, and none."))
    devices: list[Literal["cpu", "gpu"]] | None = Field(default=None, description=(
        "Devices to try. Default: the spec's device; gpu only where NVML sees a GPU."))
    max_memory: SizeField | None = Field(default=None, description=(
        "Ceiling on the server's process-tree RSS after warm traffic: a config over it "
        "cannot win."))
    max_gpu_memory: SizeField | None = Field(default=None, description=(
        "Ceiling on the server's GPU memory (NVML) after warm traffic; where no GPU is "
        "measured, the report says GPU memory was not measured."))
    verify: int = Field(default=3, ge=1, le=32, description=(
        "How many of the model's best candidates are verified with the pipeline's latency "
        "and saturation stages."))
    budget: DurationField | None = Field(default=None, description=(
        "Wall-time budget of a tune run (--budget overrides it). Default 10m."))
    explore_window: DurationField | None = Field(default=None, description=(
        "Length of each exploration window that feeds the performance model. Default 1s."))

    @model_validator(mode="after")
    def _preferred_within_a_batch(self) -> TuneSpec:
        if self.preferred_batch_sizes and self.max_batch_size:
            largest = max(self.max_batch_size)
            for choice in self.preferred_batch_sizes:
                if choice and min(choice) > largest:
                    raise PydanticCustomError(
                        "choices", "preferred_batch_sizes {choice}: every size is over the "
                        "largest max_batch_size choice {largest}, so it would be tried as no "
                        "preferred sizes at all", {"choice": choice, "largest": largest})
        return self

    @field_validator("budget", "explore_window")
    @classmethod
    def _longer_than_zero(cls, value: Duration | None, info: ValidationInfo) -> Duration | None:
        # A zero exploration window measures no request: the model it feeds predicted
        # a billion requests a second from empty observations.
        if value is not None and value.ns <= 0:
            raise PydanticCustomError("duration", f"{info.field_name} must be longer than 0s",
                                      {})
        return value

    @field_validator("instances", "max_batch_size")
    @classmethod
    def _positive(cls, values: list[int] | None) -> list[int] | None:
        if values is not None and (not values or any(v < 1 for v in values)):
            raise PydanticCustomError("choices", "give at least one value, each >= 1", {})
        return values


TUNE_DESCRIPTION = ("What `serve-pipeline tune` searches (server.batching, server.instances, "
                    "device) and its limits; not part of the spec's digest.")
