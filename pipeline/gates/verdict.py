"""Percentile verdicts: passed, failed or inconclusive, each with its interval.

A percentile gate is decided on a distribution-free confidence interval for
that percentile (pipeline.order_stats) over every measured request after the
warm-up, failed and timed-out ones included. The interval assumes the samples
are exchangeable; a run that drifts or stalls in bursts is not, and its
pooled interval would be too narrow. So the windows must also agree with the
verdict: a gate passes only when the upper bound meets the threshold AND every
window's own percentile does; it fails only when the lower bound misses the
threshold AND every window's percentile does. Windows that land on both sides
of the threshold leave the gate inconclusive, however narrow the pooled
interval: an unstable measurement near the threshold never passes by luck.

The run looks at the data after every window (sequential stopping), which
would erode the coverage of a fixed-n interval; each look therefore uses the
confidence 1 - (1 - c) / looks (a union bound over the looks), so that the
spec's confidence holds for the whole sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from hdrh.histogram import HdrHistogram

from pipeline.gates.order_stats import quantile_interval_us

Outcome = Literal["passed", "failed", "inconclusive"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "inconclusive")


def per_look_confidence(confidence: float, looks: int) -> float:
    """The confidence of each look such that all `looks` together keep `confidence`."""
    return 1 - (1 - confidence) / max(looks, 1)


@dataclass(frozen=True)
class PercentileVerdict:
    percentile: float
    outcome: Outcome
    observed_ms: float
    low_ms: float | None
    high_ms: float | None
    samples: int
    window_ms: tuple[float, ...]
    reason: str


def _ms(value_us: int | None) -> float | None:
    return None if value_us is None else value_us / 1e3


def _show(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}ms"


def judge_percentile(pooled: HdrHistogram, windows: Sequence[HdrHistogram], percentile: float,
                     threshold_ms: float, confidence: float) -> PercentileVerdict:
    """Decide `p<percentile> <= threshold_ms` from the pooled histogram and its windows."""
    samples = int(pooled.get_total_count())
    window_ms = tuple(w.get_value_at_percentile(percentile) / 1e3 for w in windows
                      if w.get_total_count())
    if samples == 0:
        return PercentileVerdict(percentile, "failed", 0.0, None, None, 0, (),
                                 "no request was measured, so nothing shows the SLO is met")
    observed = pooled.get_value_at_percentile(percentile) / 1e3
    low_us, high_us = quantile_interval_us(pooled, percentile / 100, confidence)
    low, high = _ms(low_us), _ms(high_us)
    interval = f"[{_show(low)}, {_show(high)}] at {confidence:.4g} from {samples} requests"
    worst, best = max(window_ms), min(window_ms)
    if high is not None and high <= threshold_ms and worst <= threshold_ms:
        outcome: Outcome = "passed"
        reason = f"upper bound {_show(high)} <= {threshold_ms:g}ms and every window's too"
    elif low is not None and low > threshold_ms and best > threshold_ms:
        outcome = "failed"
        reason = f"lower bound {_show(low)} > {threshold_ms:g}ms and every window's too"
    else:
        outcome = "inconclusive"
        reason = _why_undecided(low, high, threshold_ms, window_ms, samples)
    return PercentileVerdict(percentile, outcome, observed, low, high, samples, window_ms,
                             f"{reason}; interval {interval}")


def _why_undecided(low: float | None, high: float | None, threshold_ms: float,
                   window_ms: tuple[float, ...], samples: int) -> str:
    if high is None and (low is None or low <= threshold_ms):
        return f"too few requests ({samples}) for an upper bound"
    if (high is not None and high <= threshold_ms) or (low is not None and low > threshold_ms):
        sides = ", ".join(f"{value:.2f}" for value in window_ms)
        return f"the windows disagree about {threshold_ms:g}ms (per window: {sides} ms)"
    return f"the interval straddles {threshold_ms:g}ms"
