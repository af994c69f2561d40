"""The sizes a variable dimension (-1) takes: the distribution load draws from, and the
sizes parity and the failure probes send."""

from __future__ import annotations

from itertools import pairwise

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from pipeline.spec.strict import StrictModel

VARIABLE = -1
"""A per-item dimension whose size each request sets (Triton's -1 in `dims`)."""

SIZES_DESCRIPTION = (
    "Required when an input has a variable dimension (-1), refused otherwise: the sizes a "
    "request gives its -1 dimensions. One size fills every -1 of every input of a request "
    "(a token sequence and its mask have one length). Load draws each request's size from "
    "`values` with `weights`; parity and the failure probes send the smallest, the "
    "largest and the middle one; the latency report shows p50/p99 per size next to the "
    "overall figures. A data file (stages.latency.data) sends its own sizes instead.")


class SizesSpec(StrictModel):
    values: list[int] = Field(min_length=1, max_length=64, description=(
        "The sizes, each at least 1, in increasing order."))
    weights: list[float] | None = Field(default=None, description=(
        "How often load sends each size, relative to each other (default: equally often); "
        "one positive number per value."))

    @field_validator("values")
    @classmethod
    def _increasing(cls, values: list[int]) -> list[int]:
        if any(size < 1 for size in values):
            raise PydanticCustomError("sizes", "every size must be at least 1, got {values}",
                                      {"values": values})
        if any(later <= earlier for earlier, later in pairwise(values)):
            raise PydanticCustomError("sizes", "sizes must be increasing and distinct, got "
                                      "{values}", {"values": values})
        return values

    @model_validator(mode="after")
    def _one_weight_per_value(self) -> SizesSpec:
        weights = self.weights
        if weights is None:
            return self
        if len(weights) != len(self.values):
            raise PydanticCustomError(
                "weights", "{weights} weights for {values} sizes: give one per size",
                {"weights": len(weights), "values": len(self.values)})
        if any(weight <= 0 for weight in weights):
            raise PydanticCustomError("weights", "weights must be positive, got {weights}",
                                      {"weights": weights})
        return self

    def probabilities(self) -> list[float]:
        """How often load sends each of `values`, summing to 1."""
        weights = self.weights or [1.0] * len(self.values)
        total = sum(weights)
        return [weight / total for weight in weights]

    def parity_sizes(self) -> list[int]:
        """The smallest, the middle and the largest size (fewer when there are fewer)."""
        values = self.values
        return sorted({values[0], values[len(values) // 2], values[-1]})
