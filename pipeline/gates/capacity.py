"""The capacity gate, `saturation.capacity_rps >= slo.min_throughput`, decided by holds.

A rate at or above the threshold that passed a hold decides a pass, whatever the search
found above it: the exact capacity when a failing rate capped it, else "capacity ≥ X" (a
lower bound). A hold at the threshold that failed on its evidence (its p99 interval over
the SLO, a growing backlog, errors), a failing rate at or under the threshold above the
capacity, or every rate tried missing the SLO down to the threshold, decides a failure.
Anything else is inconclusive, with the reason and what to change. The row's interval is
the capacity figure's calibrated 90% one (`CapacityFigure`), the same as the capacity
text states, not the search's bracket.
"""

from __future__ import annotations

from pipeline.stage_result import Gate, GateOutcome
from pipeline.statistics.capacity import CapacitySearch
from pipeline.statistics.capacity_figure import CapacityFigure

NAME = "saturation.capacity_rps"


def capacity_gate(search: CapacitySearch, minimum: float | None) -> Gate | None:
    """None without a minimum: the capacity is then reported, not gated."""
    if minimum is None:
        return None
    confirmed, figure = search.confirmed, CapacityFigure.of(search)
    interval = None if figure is None else (figure.low_rps, figure.high_rps)
    if confirmed is not None and interval is not None and confirmed.rate_rps >= minimum:
        if search.bound == "exact":
            return Gate(NAME, confirmed.rate_rps, minimum, True, ">=", "/s",
                        interval=interval, samples=confirmed.samples)
        return Gate(NAME, f"≥ {confirmed.rate_rps:,.0f}/s", minimum, True, ">=", "/s",
                    interval=interval, samples=confirmed.samples,
                    reason=(f"capacity ≥ {confirmed.rate_rps:,.0f}/s, a lower bound "
                            f"(capped by {search.limited_by})"))
    top = search.first_failure_above
    if confirmed is not None and top is not None and top.rate_rps <= minimum:
        return Gate(NAME, confirmed.rate_rps, minimum, False, ">=", "/s", interval=interval,
                    samples=confirmed.samples,
                    reason=(f"capacity {confirmed.rate_rps:,.0f}/s: the hold at "
                            f"{top.rate_rps:,.0f}/s, at most the minimum, failed"))
    lowest = search.lowest_rate_rps or 0.0
    if search.threshold_outcome == "failed":
        failed = next(step for step in reversed(search.steps)
                      if step.hold and step.rate_rps <= minimum and step.verdict == "fail")
        return Gate(NAME, f"< {minimum:,.0f}/s", minimum, False, ">=", "/s",
                    interval=(None, failed.rate_rps),
                    samples=failed.samples,
                    reason=f"holding {failed.rate_rps:,.0f}/s failed: {failed.reason}")
    if search.bound == "none" and lowest <= minimum:
        return Gate(NAME, f"< {lowest:,.0f}/s", minimum, False, ">=", "/s",
                    reason=f"no rate met the SLO, down to the lowest tried ({lowest:,.0f}/s)")
    why = search.threshold_reason or f"no rate confirmed within the budget: {search.stop_reason}"
    return Gate(NAME, "unknown", minimum, False, ">=", "/s", outcome=GateOutcome.INCONCLUSIVE,
                reason=why)
