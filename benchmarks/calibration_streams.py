"""Simulated latency streams of known truth, for benchmarks/calibration.py.

Every case has a lognormal body (median 10 ms, sigma 0.35: p99 about 2.3 x the median, as
the examples' windows show) and a known marginal p99, which the threshold is set against:
- independent: every request an independent draw;
- batched: requests in consecutive groups of 8 share one latency (dynamic batching at
  concurrency 8);
- drift: log latency = AR(1) drift (rho = 0.98 from one request to the next) + noise,
  half the variance each, with the same marginal sigma;
- stalls: independent requests, but now and then a stall (one request in 4,000 starts
  one) makes the next 8 requests 5 x slower; the true p99 counts them.
A stream is continuous across windows (the drift carries on), as on a real server.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

MEDIAN_US = 10_000.0
SIGMA = 0.35
BATCH = 8
RHO = 0.98
STALL_START = 1 / 4000
STALL_LENGTH = 8
STALL_FACTOR = 5.0
CASES = ("independent", "batched", "drift", "stalls")
_NORMAL = NormalDist()

Latencies = npt.NDArray[np.float64]
Stream = Callable[[int], Latencies]


def _body_above(value_us: float) -> float:
    return 1 - _NORMAL.cdf(math.log(value_us / MEDIAN_US) / SIGMA)


def stall_share() -> float:
    """The stationary share of requests inside a stall."""
    busy = STALL_START * STALL_LENGTH
    return busy / (1 + busy)


def true_quantile_us(case: str, q: float) -> float:
    """The marginal q-quantile of a case's latency."""
    if case != "stalls":
        return MEDIAN_US * math.exp(SIGMA * _NORMAL.inv_cdf(q))
    share = stall_share()
    low, high = MEDIAN_US, MEDIAN_US * 100
    for _ in range(100):
        mid = (low + high) / 2
        above = (1 - share) * _body_above(mid) + share * _body_above(mid / STALL_FACTOR)
        low, high = (mid, high) if above > 1 - q else (low, mid)
    return (low + high) / 2


def stream(case: str, rng: np.random.Generator) -> Stream:
    """A function giving the next `n` latencies (µs) of one run of the case."""
    log_median = math.log(MEDIAN_US)
    drift = [rng.standard_normal()]
    stalled = [0]

    def independent(n: int) -> Latencies:
        values: Latencies = np.exp(log_median + SIGMA * rng.standard_normal(n))
        return values

    def batched(n: int) -> Latencies:
        shared = np.exp(log_median + SIGMA * rng.standard_normal(n // BATCH + 1))
        return np.repeat(shared, BATCH)[:n]

    def drifting(n: int) -> Latencies:
        shocks = rng.standard_normal(n) * math.sqrt(1 - RHO**2)
        path = np.empty(n)
        level = drift[0]
        for i in range(n):
            level = RHO * level + shocks[i]
            path[i] = level
        drift[0] = level
        half = SIGMA / math.sqrt(2)
        return np.exp(log_median + half * path + half * rng.standard_normal(n))

    def stalls(n: int) -> Latencies:
        values = independent(n)
        starts = rng.random(n) < STALL_START
        left = stalled[0]
        for i in range(n):
            if left == 0 and starts[i]:
                left = STALL_LENGTH
            if left:
                values[i] *= STALL_FACTOR
                left -= 1
        stalled[0] = left
        return values

    return {"independent": independent, "batched": batched, "drift": drifting,
            "stalls": stalls}[case]
