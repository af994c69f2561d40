"""Capacity, the one figure for "how much it can take": the sustainable open-loop rate at
the SLO, with its interval, stated as exact or as a lower bound.

promote (the saturation stage), `tune` (each measured candidate and its baseline) and
`compare` (each server) write it under the same key, `capacity`, in the same shape, so
that one config's figures can be set side by side. The closed-loop knee is a diagnostic
under its own name, never this figure.

The figure is the highest rate that passed a hold: a rate that was run. Its interval is
where the true capacity lies at 90%, from the hold verdict's measured error rates
(benchmarks/calibration_capacity.py), not the search's bracket alone: a hold at 1.1 x
the true capacity passes at most 5% of the time, so the held rate says the capacity is
at least held / 1.1; a hold at 0.8 x passes at least 95% of the time, so the lowest
failing rate above it says the capacity is at most failed / 0.8. The bracket (held,
failed) was read as the interval before; one stochastic verdict at each end covered the
true capacity in too few simulated searches, and on one machine promote and `tune`
stated disjoint brackets for one config minutes apart (6,678-6,956/s against
11,219-12,465/s). A lower bound has no top: no failing rate was found above it, and
`capped_by` says what stopped the search (a time budget, the load generator, a backlog
that did not drain).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from pipeline.statistics.capacity import CapacitySearch

Bound = Literal["exact", "lower_bound"]

# A hold at this multiple of the true capacity passes at most 5% of the time, and one at
# HOLD_FAILS_UNDER at most 5% fails (benchmarks/calibration_capacity.py:
# capacity_pass_above_10pct <= 0.05, capacity_pass_at_0_8 >= 0.95).
HOLD_PASSES_OVER = 1.1
HOLD_FAILS_UNDER = 0.8


@dataclass(frozen=True)
class CapacityFigure:
    rps: float                 # the highest rate that passed a hold
    low_rps: float             # the 90% interval of the true capacity
    high_rps: float | None     # its top; None for a lower bound
    bound: Bound
    capped_by: str             # what kept the figure from going higher
    failed_rps: float | None = None   # the lowest failing rate above the figure

    @classmethod
    def of(cls, search: CapacitySearch) -> CapacityFigure | None:
        """The search's figure; None when no rate was confirmed (unknown, or none met
        the SLO: then there is no figure to state)."""
        confirmed, interval = search.confirmed, search.interval_rps
        if confirmed is None or interval is None:
            return None
        held, failed = interval
        return cls(held, held / HOLD_PASSES_OVER,
                   None if failed is None else failed / HOLD_FAILS_UNDER,
                   "exact" if search.bound == "exact" else "lower_bound", search.limited_by,
                   failed)

    @classmethod
    def from_json(cls, body: Any) -> CapacityFigure | None:
        """A figure as `to_json` wrote it; None for anything else (an older record, or
        no figure)."""
        if not isinstance(body, Mapping):
            return None
        rps, low, high = (_number(body.get(key)) for key in ("rps", "low_rps", "high_rps"))
        bound = body.get("bound")
        if rps is None or low is None or (high is None and body.get("high_rps") is not None) \
                or bound not in ("exact", "lower_bound"):
            return None
        return cls(rps, low, high, "exact" if bound == "exact" else "lower_bound",
                   str(body.get("capped_by") or ""), _number(body.get("failed_rps")))

    def to_json(self) -> dict[str, Any]:
        return {"rps": self.rps, "low_rps": self.low_rps, "high_rps": self.high_rps,
                "bound": self.bound, "capped_by": self.capped_by,
                "failed_rps": self.failed_rps}

    @property
    def top(self) -> float:
        return float("inf") if self.high_rps is None else self.high_rps

    def widened(self, factor: float) -> CapacityFigure:
        """The interval stretched by a factor either way (low / factor, high x factor), for
        what the bracketing does not hold: the machine's drift between two measurements.
        The figure itself and a lower bound's missing top stay as they are."""
        if factor <= 1.0:
            return self
        return replace(self, low_rps=self.low_rps / factor,
                       high_rps=None if self.high_rps is None else self.high_rps * factor)

    def overlaps(self, other: CapacityFigure) -> bool:
        """Whether the two intervals share a rate: neither figure is surely the higher."""
        return max(self.low_rps, other.low_rps) <= min(self.top, other.top)

    def surely_above(self, other: CapacityFigure) -> bool:
        """Whether this capacity is higher than the other's beyond their intervals."""
        return self.low_rps > other.top

    def text(self) -> str:
        """e.g. "capacity 1,200/s (exact: 1,091–1,650/s at 90%)" or "capacity ≥ 1,200/s
        (lower bound: capped by the time budget)"."""
        if self.bound == "lower_bound":
            return f"capacity ≥ {self.rps:,.0f}/s (lower bound: capped by {self.capped_by})"
        return (f"capacity {self.rps:,.0f}/s (exact: {self.low_rps:,.0f}–"
                f"{self.top:,.0f}/s at 90%)")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
