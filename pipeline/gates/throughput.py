"""The throughput gate on a bound over spans of time.

Each window is cut into `SLICES` equal spans of time, and each span's completions per
second is one observation (a window without a timeline, measured by remote workers, is
one). A rate varies by factors, not by amounts (a busy neighbour halves it), so the bound
is Student's t on the logarithms: a lower bound on the geometric mean rate, which is never
above the arithmetic one. Pass when the lower bound meets `min_throughput`, fail when the
upper bound misses it, inconclusive otherwise. A single observation has no spread: it is
judged on its value.

The gate's observed value is that geometric mean, the figure its interval bounds (an
uneven run's overall rate, completions over time, can lie above the interval's top, and
would lean an inconclusive gate the wrong way); the reason also gives the overall rate.
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise

from pipeline.measure.load_result import LoadResult
from pipeline.stage_result import Gate
from pipeline.statistics.distributions import t_quantile

GATE = "latency.throughput"
SLICES = 4


def span_rates(window: LoadResult) -> list[float]:
    """Completions per second in each of the window's `SLICES` spans of time (the whole
    window when it has no timeline). A span without a completion counts half of one, so
    that a stall is a low rate, not a missing one."""
    if window.duration_s <= 0:
        return []
    finished = sorted(window.finished_s)
    if len(finished) != window.requests or not finished:
        return [window.throughput]
    length = window.duration_s / SLICES
    edges = [bisect_right(finished, (i + 1) * length) for i in range(SLICES)]
    edges[-1] = len(finished)
    counts = [edges[0]] + [b - a for a, b in pairwise(edges)]
    share = window.completed / window.requests
    return [max(count * share, 0.5) / length for count in counts]


def throughput_bounds(rates: Sequence[float], alpha: float) -> tuple[float, float, float]:
    """The geometric mean rate and its two-sided t bounds (each side `alpha`)."""
    logs = [math.log(rate) for rate in rates]
    centre = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(centre), math.exp(centre), math.exp(centre)
    half = t_quantile(1 - alpha, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def throughput_gate(windows: Sequence[LoadResult], minimum: float, alpha: float) -> Gate:
    rates = [rate for window in windows for rate in span_rates(window)]
    if not rates:
        return Gate(GATE, "not measured", minimum, False, ">=", "/s",
                    reason="no window was measured")
    observed, low, high = throughput_bounds(rates, alpha)
    overall = sum(w.completed for w in windows) / sum(w.duration_s for w in windows)
    if low >= minimum:
        outcome, reason = "passed", f"lower bound {low:.1f}/s >= {minimum:g}/s"
    elif high < minimum:
        outcome, reason = "failed", f"upper bound {high:.1f}/s < {minimum:g}/s"
    else:
        outcome = "inconclusive"
        reason = (f"the interval [{low:.1f}, {high:.1f}]/s straddles {minimum:g}/s; more "
                  "windows would decide (stages.latency.stability.max_windows)")
    return Gate.decided(GATE, observed, minimum, outcome, ">=", "/s", (low, high),
                        len(rates), reason + f" (geometric mean {observed:.1f}/s, t over "
                        f"{len(rates)} spans of {len(windows)} windows, {1 - alpha:.4g}; "
                        f"overall {overall:.1f}/s)")
