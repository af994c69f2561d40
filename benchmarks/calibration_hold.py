"""How often today's capacity hold passes a rate above the true capacity (no server).

A small queue simulation stands for the server: one worker, first come first served,
constant arrivals (the capacity search's open loop), service times lognormal (median 4 ms,
sigma 0.3) and slower by `SLOW_FACTOR` during slow periods (a busy neighbour: on 15% of
the time, 0.2 s on average). The true capacity is the highest rate whose long-run p99
meets the SLO (50 ms), found once by bisection over long simulations. Each trial holds
`multiple` x that rate for the search's default hold, starting from an empty queue (the
search waits for a backlog to drain first), and judges it with the project's own code:
`pipeline.statistics.capacity.judge(..., on_bound=True)` on the hold's p99, its order-statistic
upper bound, its halves' medians, its error rate (requests over the step timeout) and the
drain left at its end.

This measures the hold as `pipeline/statistics/capacity.py` decides it today;
benchmarks/calibration.py prefers `benchmarks/calibration_capacity.py` where that exists.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from pipeline.spec.stage_settings import CapacitySpec
from pipeline.statistics import capacity
from pipeline.statistics.order_stats import quantile_ranks, samples_for_upper_bound

SLO_MS = 50.0
ERROR_RATE = 0.001
TIMEOUT_S = 4 * SLO_MS / 1e3          # capacity_steps.STEP_TIMEOUT_SLO_MULTIPLE x the SLO
MEDIAN_S, SIGMA = 0.004, 0.3
SLOW_SHARE, SLOW_FACTOR, SLOW_MEAN_S = 0.15, 2.0, 0.2
CONFIDENCE = 0.95

Floats = npt.NDArray[np.float64]


def latencies(rate: float, seconds: float, rng: np.random.Generator) -> Floats:
    """Each request's latency (s) from its intended start, arrivals every 1 / rate s."""
    count = int(rate * seconds)
    arrivals = np.arange(count) / rate
    service = MEDIAN_S * np.exp(SIGMA * rng.standard_normal(count))
    service *= np.where(_slow(arrivals, rng), SLOW_FACTOR, 1.0)
    done = np.empty(count)
    free = 0.0
    for index in range(count):          # Lindley's recursion: one worker, FIFO
        free = max(free, arrivals[index]) + service[index]
        done[index] = free
    result: Floats = done - arrivals
    return result


def _slow(at: Floats, rng: np.random.Generator) -> npt.NDArray[np.bool_]:
    """Whether each time falls in a slow period (alternating exponential periods)."""
    fast_mean = SLOW_MEAN_S * (1 - SLOW_SHARE) / SLOW_SHARE
    edges, now, end = [], float(rng.exponential(fast_mean)), float(at[-1]) if len(at) else 0.0
    while now < end:
        length = float(rng.exponential(SLOW_MEAN_S))
        edges.append((now, now + length))
        now += length + float(rng.exponential(fast_mean))
    slow = np.zeros(len(at), dtype=bool)
    for start, stop in edges:
        slow[(at >= start) & (at < stop)] = True
    return slow


@lru_cache(maxsize=4)
def true_capacity(seed: int, seconds: float = 600.0) -> float:
    """The highest rate whose long-run p99 meets the SLO (bisection, 2% resolution)."""
    low, high = 50.0, 1 / MEDIAN_S
    while high / low > 1.02:
        mid = math.sqrt(low * high)
        p99 = float(np.percentile(latencies(mid, seconds, np.random.default_rng(seed)), 99))
        low, high = (mid, high) if p99 * 1e3 <= SLO_MS else (low, mid)
    return low


def hold_outcome(rate: float, rng: np.random.Generator) -> capacity.StepOutcome:
    """One confirmation hold at `rate`, judged as the capacity search judges it."""
    spec = CapacitySpec()
    budget = spec.budget.seconds if spec.budget is not None else 60.0   # sized by the rate
    settings = capacity.SearchSettings(budget, spec.step.seconds,
                                       spec.hold_seconds, TIMEOUT_S,
                                       hold_min_samples=samples_for_upper_bound(0.99,
                                                                                CONFIDENCE))
    seconds = settings.hold_duration(rate)
    measured = latencies(rate, seconds, rng)
    answered = np.minimum(measured, TIMEOUT_S)
    half = len(measured) // 2
    ordered = np.sort(answered)
    lower, upper = quantile_ranks(len(ordered), 0.99, CONFIDENCE)
    interval = (float(ordered[lower - 1]) * 1e3 if lower >= 1 else None,
                float(ordered[upper - 1]) * 1e3 if upper <= len(ordered) else None)
    arrivals_end = len(measured) / rate
    drain_s = max(0.0, float(np.max(np.arange(len(measured)) / rate + measured)) - arrivals_end)
    step = capacity.StepMeasurement(
        rate, seconds, float(np.percentile(answered, 99)) * 1e3,
        float(np.median(answered[:half])) * 1e3, float(np.median(answered[half:])) * 1e3,
        float(np.mean(measured > TIMEOUT_S)), len(measured), drain_s, 0.0, False,
        p99_interval_ms=interval)
    return capacity.judge(step, capacity.Limits(SLO_MS, ERROR_RATE), on_bound=True)


def hold_pass_rate(trials: int, seed: int, multiple: float) -> float:
    """Share of holds at `multiple` x the true capacity that pass."""
    rate = multiple * true_capacity(seed)
    rng = np.random.default_rng([seed, 55, int(multiple * 100)])
    return sum(hold_outcome(rate, rng).passed for _ in range(trials)) / trials
