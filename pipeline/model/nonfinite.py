"""NaN and Inf in a model's outputs, counted per output, served and in the reference.

A NaN equals nothing, so an element-wise comparison reports a NaN-everywhere model as
"mismatched elements" when it reports it at all (server and reference agree on their
NaN). `parity.finite_outputs` names the output and the counts instead, unless the spec
allows non-finite values for that output (`allow_nonfinite: true`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.model.tensors import Array
from pipeline.spec.models import OutputSpec
from pipeline.stage_result import Gate

GATE = "parity.finite_outputs"


@dataclass
class NonFinite:
    """How many of an output's values were NaN, +Inf and -Inf."""

    values: int = 0
    nan: int = 0
    pos_inf: int = 0
    neg_inf: int = 0

    def add(self, array: Array) -> None:
        self.values += int(array.size)
        if not np.issubdtype(array.dtype, np.inexact):
            return                          # integers and bools are always finite
        floats = np.asarray(array, dtype=np.float64)   # the spec's dtypes are all real
        self.nan += int(np.count_nonzero(np.isnan(floats)))
        self.pos_inf += int(np.count_nonzero(np.isposinf(floats)))
        self.neg_inf += int(np.count_nonzero(np.isneginf(floats)))

    @property
    def total(self) -> int:
        return self.nan + self.pos_inf + self.neg_inf

    def describe(self) -> str:
        kinds = [f"{count} {kind}" for count, kind in
                 ((self.nan, "NaN"), (self.pos_inf, "+Inf"), (self.neg_inf, "-Inf")) if count]
        return f"{', '.join(kinds)} of {self.values} values"


@dataclass
class FiniteCheck:
    """Non-finite values of every declared output, by side ("served", "reference")."""

    outputs: Sequence[OutputSpec]
    counts: dict[tuple[str, str], NonFinite] = field(default_factory=dict)

    def check(self, side: str, arrays: Mapping[str, Array]) -> None:
        for tensor in self.outputs:
            if tensor.name in arrays:
                self.counts.setdefault((tensor.name, side), NonFinite()).add(
                    arrays[tensor.name])

    def refused(self) -> list[tuple[str, str, NonFinite]]:
        """(output, side, counts) with non-finite values the spec does not allow."""
        allowed = {tensor.name for tensor in self.outputs if tensor.allow_nonfinite}
        return [(name, side, count) for (name, side), count in self.counts.items()
                if count.total and name not in allowed]

    def details(self) -> dict[str, dict[str, int]]:
        return {f"{name} {side}": {"values": c.values, "nan": c.nan, "pos_inf": c.pos_inf,
                                   "neg_inf": c.neg_inf}
                for (name, side), c in self.counts.items()}

    def gate(self) -> Gate:
        if not any(count.values for count in self.counts.values()):
            return Gate(GATE, "not evaluated: no output values to check", "no NaN or Inf",
                        False)
        refused = self.refused()
        reason = "; ".join(f"{name}: {count.describe()} "
                           f"{'served' if side == 'served' else 'in the reference'}"
                           for name, side, count in refused)
        total = float(sum(count.total for _, _, count in refused))
        return Gate(GATE, total, 0.0, total == 0, "<=", reason=reason)
