"""The throughput gate on a bound over windows.

Each window's throughput is one observation (its requests are far from independent, but
windows are long against what correlates them); the bound is Student's t over the windows.
Pass when the lower bound meets `min_throughput`, fail when the upper bound misses it,
inconclusive otherwise. A single window has no spread: it is judged on its value.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pipeline.gates.distributions import t_quantile
from pipeline.results import Gate

GATE = "latency.throughput"


def throughput_bounds(per_window: Sequence[float], alpha: float) -> tuple[float, float]:
    mean = statistics.fmean(per_window)
    if len(per_window) < 2:
        return mean, mean
    half = t_quantile(1 - alpha, len(per_window) - 1) * statistics.stdev(per_window) \
        / math.sqrt(len(per_window))
    return mean - half, mean + half


def throughput_gate(per_window: Sequence[float], minimum: float, alpha: float) -> Gate:
    if not per_window:
        return Gate(GATE, "not measured", minimum, False, ">=", "/s",
                    reason="no window was measured")
    low, high = throughput_bounds(per_window, alpha)
    observed = statistics.fmean(per_window)
    if low >= minimum:
        outcome, reason = "passed", f"lower bound {low:.1f}/s >= {minimum:g}/s"
    elif high < minimum:
        outcome, reason = "failed", f"upper bound {high:.1f}/s < {minimum:g}/s"
    else:
        outcome = "inconclusive"
        reason = (f"the interval [{low:.1f}, {high:.1f}]/s over {len(per_window)} windows "
                  f"straddles {minimum:g}/s; more windows would decide "
                  "(stages.latency.stability.max_windows)")
    return Gate.decided(GATE, observed, minimum, outcome, ">=", "/s", (low, high),
                        len(per_window), reason)
