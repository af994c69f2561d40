"""Capacity, the one figure for "how much it can take": the sustainable open-loop rate at
the SLO, with its interval, stated as exact or as a lower bound.

promote (the saturation stage), `tune` (each measured candidate and its baseline) and
`compare` (each server) write it under the same key, `capacity`, in the same shape, so
that one config's figures can be set side by side. The closed-loop knee is a diagnostic
under its own name, never this figure.

The interval is where the true capacity lies: from the highest rate that passed a hold
(the figure itself) to the lowest rate above it that failed. A lower bound has no top:
no failing rate was found above it, and `capped_by` says what stopped the search (a
time budget, the load generator, a backlog that did not drain).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from pipeline.statistics.capacity import CapacitySearch

Bound = Literal["exact", "lower_bound"]


@dataclass(frozen=True)
class CapacityFigure:
    rps: float                 # the highest rate that passed a hold
    low_rps: float
    high_rps: float | None     # the lowest failing rate above it; None for a lower bound
    bound: Bound
    capped_by: str             # what kept the figure from going higher

    @classmethod
    def of(cls, search: CapacitySearch) -> CapacityFigure | None:
        """The search's figure; None when no rate was confirmed (unknown, or none met
        the SLO: then there is no figure to state)."""
        confirmed, interval = search.confirmed, search.interval_rps
        if confirmed is None or interval is None:
            return None
        low, high = interval
        return cls(confirmed.rate_rps, low, high,
                   "exact" if search.bound == "exact" else "lower_bound", search.limited_by)

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
                   str(body.get("capped_by") or ""))

    def to_json(self) -> dict[str, Any]:
        return {"rps": self.rps, "low_rps": self.low_rps, "high_rps": self.high_rps,
                "bound": self.bound, "capped_by": self.capped_by}

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
        """e.g. "capacity 1,200/s (exact: 1,200–1,320/s)" or "capacity ≥ 1,200/s (lower
        bound: capped by the time budget)"."""
        if self.bound == "lower_bound":
            return f"capacity ≥ {self.rps:,.0f}/s (lower bound: capped by {self.capped_by})"
        return (f"capacity {self.rps:,.0f}/s (exact: {self.low_rps:,.0f}–"
                f"{self.top:,.0f}/s)")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
