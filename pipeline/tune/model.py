"""A performance model of the server, fitted to a few measured exploration windows.

Everything here is a PREDICTION; the search verifies its best candidates by measuring.

- Compute per formed batch: c(b) = fixed + per_item * b (µs, wall time as the server
  counts it), fitted by least squares to the server's own counters of each window
  (executions, items, compute time). Triton counts compute once per execution;
  TorchServe's counters add each request's time in its batch, so a batch of b counts b
  times (the fit takes that into account). It gives the round trip outside the server
  (p50 at the lowest concurrency minus c(1)); under an oversubscribed closed loop its
  wall time also counts waiting for a core, so the service time comes from the
  throughput fit below.
- Capacity and instance scaling: one fit per (device, instances) explored, so contention
  for the cores (instances, front end, load client) is in the numbers: every window keeps
  the instances busy, and 1/throughput = h + F/b̄ (b̄ the average formed batch) gives a
  per-request cost h and a per-batch cost F; at full batches of B the capacity is
  1/(h + F/B), and a batch of b occupies an instance for s(b) = n·(F + h·b).
- Queueing at an arrival rate λ: the formed batch b = min(max_batch, λ·(delay + s(b)/n))
  with s(b) the service time below (what arrives while a batch waits, plus while the
  instances are busy); utilisation ρ = λ/capacity(b). Without a delay, batches grow only
  by queueing, up to where ρ = 1: no room for a tail. Measured here, open-loop capacity
  at delay 0 was a third to half of that at 1-2 ms, which this reproduces. A request waits
  for its batch to fill or for the delay, whichever comes first, then
  an M/D/n-like queue whose wait has mean ρ/(1-ρ)·c(b)/(2n) and an exponential tail
  (quantile q at mean·ln(1/(1-q))), then c(b), plus the round trip measured at
  concurrency 1.
- Throughput at the SLO: the highest λ whose predicted p99/p95/p50 and mean queue meet
  the spec, bisected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.spec.models import SloSpec
from pipeline.tune.space import Config

MAX_UTILISATION = 0.97
QUANTILE_TAIL = {"p99": math.log(100), "p95": math.log(20), "p50": math.log(2)}


@dataclass(frozen=True)
class Observation:
    """One measured exploration window with the server's counters over it."""

    device: str
    instances: int
    max_batch_size: int
    concurrency: int
    throughput_rps: float
    p50_ms: float
    p99_ms: float
    error_rate: float
    batch_executions: dict[int, int]
    compute_us: float               # the server's compute time summed over the window
    compute_per_request: bool       # True: counted once per request (TorchServe)
    rss_mb: float | None = None
    gpu_mb: float | None = None

    @property
    def executions(self) -> int:
        return sum(self.batch_executions.values())

    @property
    def items(self) -> int:
        return sum(size * count for size, count in self.batch_executions.items())

    def fit_row(self) -> tuple[float, float, float]:
        """(coefficient of fixed, coefficient of per_item, observed total)."""
        if self.compute_per_request:
            squares = sum(size * size * count for size, count in self.batch_executions.items())
            return float(self.items), float(squares), self.compute_us
        return float(self.executions), float(self.items), self.compute_us


@dataclass(frozen=True)
class InstanceFit:
    """The fitted server at one (device, instances)."""

    device: str
    instances: int
    fixed_us: float
    per_item_us: float
    request_cost_us: float
    batch_cost_us: float
    round_trip_us: float
    rss_mb: float | None
    gpu_mb: float | None
    observations: int

    def batch_us(self, size: float) -> float:
        """What the server's counters say one batch of `size` computes (µs)."""
        return self.fixed_us + self.per_item_us * size

    def service_us(self, size: float) -> float:
        """How long one instance is taken by a batch of `size` while all are busy (µs):
        from the throughput fit, which counts the contention the counters' wall time
        also shows but not the waiting of an oversubscribed closed loop."""
        return self.instances * (self.batch_cost_us + self.request_cost_us * size)

    def to_json(self) -> dict[str, object]:
        return {"device": self.device, "instances": self.instances,
                "compute_fixed_us": self.fixed_us, "compute_per_item_us": self.per_item_us,
                "request_cost_us": self.request_cost_us,
                "batch_cost_us": self.batch_cost_us,
                "round_trip_us": self.round_trip_us, "rss_mb": self.rss_mb,
                "gpu_mb": self.gpu_mb, "windows": self.observations, "predicted": True}


@dataclass(frozen=True)
class Prediction:
    config: Config
    throughput_rps: float           # predicted throughput at the SLO (0 when infeasible)
    max_rps: float                  # predicted saturation throughput at full batches
    p99_ms: float                   # predicted p99 at that throughput
    memory_mb: float | None
    feasible: bool
    reason: str = ""
    gpu_memory_mb: float | None = None
    predicted: bool = field(default=True)

    def to_json(self) -> dict[str, object]:
        return {"throughput_rps": self.throughput_rps, "max_rps": self.max_rps,
                "p99_ms": self.p99_ms, "memory_mb": self.memory_mb,
                "gpu_memory_mb": self.gpu_memory_mb, "feasible": self.feasible,
                "reason": self.reason, "predicted": True}


def fit(observations: Sequence[Observation]) -> InstanceFit:
    """Fit one (device, instances) from its windows (at least one)."""
    first = observations[0]
    rows = [o.fit_row() for o in observations if o.executions > 0]
    fixed, per_item = _least_squares(rows)
    request_cost, batch_cost = _throughput_fit(observations)
    gentle = min(observations, key=lambda o: o.concurrency)
    round_trip = max(0.0, gentle.p50_ms * 1e3 - (fixed + per_item))
    return InstanceFit(first.device, first.instances, fixed, per_item, request_cost,
                       batch_cost, round_trip, _last(o.rss_mb for o in observations),
                       _last(o.gpu_mb for o in observations), len(observations))


def _throughput_fit(observations: Sequence[Observation]) -> tuple[float, float]:
    """(per-request, per-batch) cost in µs from 1/throughput = h + F/avg_batch over the
    windows (each window keeps every instance busy: concurrency >= instances)."""
    rows = [(1.0, o.executions / o.items, 1e6 / o.throughput_rps)
            for o in observations if o.items and o.throughput_rps > 0]
    return _least_squares(rows)


def _last(values: object) -> float | None:
    found = [v for v in values if v is not None]  # type: ignore[attr-defined]
    return float(found[-1]) if found else None


def _least_squares(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Non-negative (fixed, per_item); falls back to one term when the windows cannot
    tell them apart (all at the same batch size) or one comes out negative."""
    if not rows:
        return 0.0, 0.0
    matrix = np.array([[a, b] for a, b, _ in rows], dtype=float)
    totals = np.array([t for _, _, t in rows], dtype=float)
    if len(rows) >= 2 and np.linalg.matrix_rank(matrix) == 2:
        solution, *_ = np.linalg.lstsq(matrix, totals, rcond=None)
        fixed, per_item = float(solution[0]), float(solution[1])
        if fixed >= 0 and per_item >= 0:
            return fixed, per_item
    # One term only: whichever of the two explains the windows better.
    options = []
    for column in (0, 1):
        weights = matrix[:, column]
        value = float(weights @ totals / max(float(weights @ weights), 1e-12))
        residual = float(np.sum((totals - weights * value) ** 2))
        options.append((residual, column, max(value, 0.0)))
    _, column, value = min(options)
    return (value, 0.0) if column == 0 else (0.0, value)


def predict(model: InstanceFit, config: Config, slo: SloSpec) -> Prediction:
    """The throughput at the SLO this config should reach, per the model."""
    max_rps = _capacity_rps(model, largest_batch(config))

    def meets(rate: float) -> tuple[bool, float]:
        latencies = _latencies_us(model, config, rate)
        if latencies is None:
            return False, math.inf
        ok = latencies["p99"] <= slo.p99.us
        ok &= slo.p95 is None or latencies["p95"] <= slo.p95.us
        ok &= slo.p50 is None or latencies["p50"] <= slo.p50.us
        ok &= slo.queue_mean is None or latencies["queue_mean"] <= slo.queue_mean.us
        return ok, latencies["p99"] / 1e3

    low = min(1.0, max_rps / 100)
    feasible, p99_low = meets(low)
    if not feasible:
        return Prediction(config, 0.0, max_rps, p99_low, model.rss_mb, False,
                          f"predicted p99 {p99_low:.2f}ms misses the SLO even at {low:g}/s",
                          model.gpu_mb)
    high = max_rps * MAX_UTILISATION
    best_rate, best_p99 = low, p99_low
    for _ in range(40):
        middle = (low + high) / 2
        ok, p99 = meets(middle)
        if ok:
            low, best_rate, best_p99 = middle, middle, p99
        else:
            high = middle
        if high - low < max(0.5, 0.002 * high):
            break
    if slo.min_throughput is not None and best_rate < slo.min_throughput.per_second:
        return Prediction(config, best_rate, max_rps, best_p99, model.rss_mb, False,
                          f"predicted {best_rate:.0f}/s under min_throughput "
                          f"{slo.min_throughput}", model.gpu_mb)
    return Prediction(config, best_rate, max_rps, best_p99, model.rss_mb, True, "",
                      model.gpu_mb)


def _capacity_rps(model: InstanceFit, size: float) -> float:
    per_request_us = model.request_cost_us + model.batch_cost_us / max(size, 1.0)
    return 1e6 / max(per_request_us, 1e-3)


def _formed_batch(model: InstanceFit, config: Config, rate: float) -> float:
    """The batch size the server forms at `rate`: what arrives while a batch waits (up to
    the delay) plus what arrives while the instances are busy. With no delay, batches grow
    only by queueing: the fixed point is where the server just keeps up (utilisation 1),
    so a rate above what batches of one serve leaves no room for a tail."""
    size = 1.0
    delay_s = config.max_queue_delay_us / 1e6
    for _ in range(50):
        busy_s = model.service_us(size) / 1e6 / config.instances
        size = min(largest_batch(config), max(1.0, rate * (delay_s + busy_s)))
    return size


def largest_batch(config: Config) -> float:
    """Triton sends a batch as soon as it reaches a preferred size: with preferred sizes
    the largest of them is, in practice, the largest batch (seen here: batches of about 5
    at max_batch_size 64 with preferred [8, 16])."""
    return float(max(config.preferred) if config.preferred else config.max_batch_size)


def _latencies_us(model: InstanceFit, config: Config, rate: float) -> dict[str, float] | None:
    size = _formed_batch(model, config, rate)
    service = model.service_us(size)
    utilisation = rate / _capacity_rps(model, size)
    if utilisation >= MAX_UTILISATION:
        return None
    wait_mean = utilisation / (1 - utilisation) * service / (2 * config.instances)
    # A batch leaves when it is full or when its first request has waited the delay.
    forming = 0.0 if config.max_batch_size == 1 else min(
        config.max_queue_delay_us, (config.max_batch_size - 1) / rate * 1e6)
    base = model.round_trip_us + forming + service
    out = {name: base + wait_mean * tail for name, tail in QUANTILE_TAIL.items()}
    out["queue_mean"] = forming / 2 + wait_mean
    return out
