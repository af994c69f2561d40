"""Whether an item's answer depends on the other items batched with it.

Dynamic batching puts the requests of different clients into one batch. A model whose
answer for an item depends on its neighbours (a batch norm left in training mode, a
normalisation over the batch axis) then gives each client an answer that depends on who
else was served at that moment. Parity's element-wise comparison cannot see it: the
reference and the server run the same model on the same batch and agree. So the served
answer of each item sent alone is held to the same item's row of the served batches it was
part of, within parity's tolerance (`parity.batch_invariant`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.model.tensors import Array
from pipeline.spec.strings import is_string
from pipeline.stage_result import Gate

GATE = "parity.batch_invariant"


@dataclass
class BatchInvariance:
    """Served answers by sample: each sample's alone, and its rows in larger batches."""

    atol: float
    rtol: float
    alone: dict[tuple[int | None, int], dict[str, Array]] = field(default_factory=dict)
    compared: int = 0            # output values of batch rows held to an answer alone
    differing: int = 0
    first: str | None = None     # the first difference, as the message names it

    def single(self, size: int | None, sample: int, served: dict[str, Array]) -> None:
        self.alone[(size, sample)] = served

    def batch(self, size: int | None, samples: list[int], served: dict[str, Array],
              label: str) -> None:
        """`served` answered a batch whose row j is sample `samples[j]`."""
        if len(samples) < 2:
            return
        for row, sample in enumerate(samples):
            single = self.alone.get((size, sample))
            if single is None:
                continue
            for name, alone in single.items():
                batched = served.get(name)
                if batched is None or batched.shape[1:] != alone.shape[1:] \
                        or batched.shape[0] <= row or alone.shape[0] != 1:
                    continue        # the contract gates name a missing or misshapen output
                self._compare(batched[row], alone[0], f"{label} {name} row {row + 1}")

    def _compare(self, batched: Array, alone: Array, where: str) -> None:
        self.compared += int(alone.size)
        if is_string(alone) or is_string(batched):
            differing = sum(1 for a, b in zip(batched.reshape(-1).tolist(),
                                              alone.reshape(-1).tolist(), strict=True) if a != b)
            gap = float("nan")
        else:
            got, want = batched.astype(np.float64), alone.astype(np.float64)
            close = np.isclose(got, want, atol=self.atol, rtol=self.rtol, equal_nan=True)
            differing = int(np.count_nonzero(~close))
            with np.errstate(invalid="ignore"):
                gap = float(np.nanmax(np.abs(got - want)[~close])) if differing else 0.0
        if differing:
            self.differing += differing
            if self.first is None:
                self.first = where + ("" if not np.isfinite(gap) else f" (|Δ| {gap:.3g})")

    def gate(self) -> Gate:
        if self.compared == 0:
            return Gate(GATE, "no batch of more than one item to compare", "0 values differ",
                        True)
        if not self.differing:
            return Gate.at_most(GATE, 0.0, 0.0)
        return Gate(GATE, float(self.differing), 0.0, False, "<=", reason=(
            f"{self.differing} of {self.compared} values of items served in a batch differ "
            f"from the same item served alone, the first in {self.first}: the model's answer "
            "depends on the other items in its batch (a batch norm or dropout in training "
            "mode, a statistic over the batch axis), so under dynamic batching each client's "
            "answer would depend on its neighbours"))
