"""Memory that grows with traffic: a rate, with its bound, and the total growth.

A leak is memory that keeps growing while requests are served. Through the latency
windows the server's RSS is sampled every few hundred milliseconds (`RssSampler`), each
sample with the number of requests served by then; the leak rate is the least-squares
slope of RSS over requests, with a Student t bound (samples - 2 degrees of freedom).

`latency.memory_growth` gates that rate against `stages.latency.memory_growth_rate` (per
1,000 requests): pass when the upper bound meets it, fail when the lower bound exceeds it
and the fitted growth over the span is more than allocator noise (`NOISE_MB`), otherwise
inconclusive (a longer measurement decides). The rate is also given per minute.
`latency.memory_growth_total` keeps the older, coarser bound on the growth from right
after the warm-up to the end of the windows (`stages.latency.max_memory_growth`).

RSS is compared, not PSS: a leak is private memory, which RSS counts in full, while PSS
also moves when unrelated processes map or unmap the same libraries. TorchServe's JVM
frontend is left out of the rate (its heap expands for minutes after start, 34-64 MiB over
the example's windows, without leaking): a leak in the model lives in its Python workers.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psutil

from pipeline.measure.memory import process_tree_memory
from pipeline.servers import server_kind as kind_named
from pipeline.servers.base import ModelServer
from pipeline.spec.units import ByteSize
from pipeline.stage_result import Gate
from pipeline.statistics.distributions import t_quantile

GATE = "latency.memory_growth"
TOTAL_GATE = "latency.memory_growth_total"
DEFAULT_RATE = ByteSize(2**20, "1MiB")      # per 1,000 requests: about 1 KiB a request
# A fitted growth below this over the whole span is within what an allocator does anyway.
NOISE_MB = 4.0
SAMPLE_EVERY_S = 0.2


def limit_for(configured: ByteSize | bool | None, server_kind: str) -> ByteSize | None:
    """The spec's total limit, the server kind's allowance when unset, None when off."""
    if configured is False:
        return None
    if isinstance(configured, ByteSize):
        return configured
    return kind_named(server_kind).memory_growth_allowance


def rate_limit_for(configured: ByteSize | bool | None) -> ByteSize | None:
    if configured is False:
        return None
    return configured if isinstance(configured, ByteSize) else DEFAULT_RATE


@dataclass(frozen=True)
class LeakRate:
    """RSS slope over requests (MiB per 1,000 requests), its bounds, and its span."""

    per_1000_mb: float
    low_mb: float
    high_mb: float
    samples: int
    span_requests: float
    span_s: float

    @property
    def per_minute_mb(self) -> float:
        rate = self.span_requests / self.span_s if self.span_s > 0 else 0.0
        return self.per_1000_mb * rate * 60 / 1000

    def metrics(self) -> dict[str, float]:
        return {"memory_growth_per_1000_requests_mb": self.per_1000_mb,
                "memory_growth_per_1000_requests_high_mb": self.high_mb,
                "memory_growth_per_minute_mb": self.per_minute_mb,
                "memory_growth_samples": float(self.samples)}


def leak_rate(requests: Sequence[float], rss_mb: Sequence[float], seconds: Sequence[float],
              alpha: float) -> LeakRate | None:
    """Least-squares RSS over requests, each bound one-sided at alpha (None: under 3
    samples or no spread of requests)."""
    count = len(requests)
    if count < 3:
        return None
    mean_x, mean_y = statistics.fmean(requests), statistics.fmean(rss_mb)
    sxx = math.fsum((x - mean_x) ** 2 for x in requests)
    if sxx <= 0:
        return None
    slope = math.fsum((x - mean_x) * (y - mean_y) for x, y in zip(requests, rss_mb,
                                                                   strict=True)) / sxx
    residual = math.fsum((y - mean_y - slope * (x - mean_x)) ** 2
                         for x, y in zip(requests, rss_mb, strict=True))
    half = t_quantile(1 - alpha, count - 2) * math.sqrt(residual / (count - 2) / sxx)
    return LeakRate(slope * 1000, (slope - half) * 1000, (slope + half) * 1000, count,
                    max(requests) - min(requests), max(seconds) - min(seconds))


def rate_gate(measured: LeakRate | None, limit: ByteSize) -> Gate:
    """Fails closed: memory that could not be measured does not pass."""
    per_1000 = limit.mib
    if measured is None:
        return Gate(GATE, "not measured", per_1000, False, "<=", "MiB/1000 requests",
                    reason="too few memory samples through the windows")
    growth = measured.low_mb * measured.span_requests / 1000
    if measured.high_mb <= per_1000:
        outcome, reason = "passed", f"upper bound {measured.high_mb:.3f} <= {per_1000:g}"
    elif measured.low_mb > per_1000 and growth > NOISE_MB:
        outcome, reason = "failed", (f"lower bound {measured.low_mb:.3f} > {per_1000:g} "
                                     f"({growth:.0f} MiB over the windows)")
    else:
        outcome, reason = "inconclusive", (
            f"the bound [{measured.low_mb:.3f}, {measured.high_mb:.3f}] straddles "
            f"{per_1000:g} or the growth is within allocator noise: a longer "
            "stages.latency.duration would decide")
    return Gate.decided(GATE, measured.per_1000_mb, per_1000, outcome, "<=",
                        "MiB/1000 requests", (measured.low_mb, measured.high_mb),
                        measured.samples, reason + f" ({measured.per_minute_mb:.1f} MiB/min; "
                        f"{measured.span_requests:.0f} requests, {measured.span_s:.0f}s)")


def total_gate(before_mb: float | None, after_mb: float | None, limit: ByteSize) -> Gate:
    if before_mb is None or after_mb is None:
        return Gate(TOTAL_GATE, "not measured", str(limit), False, "<=", "")
    return Gate.at_most(TOTAL_GATE, after_mb - before_mb, limit.mib, "MiB")


def model_processes(server: ModelServer) -> list[psutil.Process]:
    """The server's tree without a JVM frontend (see the module doc)."""
    tree = server.process_tree()
    kept = []
    for process in tree:
        try:
            if process.name() != "java":
                kept.append(process)
        except psutil.Error:
            continue
    return kept


class RssSampler:
    """Samples (seconds, RSS MiB) of a process tree in a thread, while it is entered."""

    def __init__(self, processes: Callable[[], list[psutil.Process]],
                 every_s: float = SAMPLE_EVERY_S) -> None:
        self._processes, self._every = processes, every_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        tree = self._processes()
        if tree:
            self.samples.append((time.perf_counter(),
                                 process_tree_memory(tree)["server_rss_mb"]))

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            self._sample()

    def __enter__(self) -> RssSampler:
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()


def requests_at(at_s: float, spans: Sequence[tuple[float, float, int]]) -> float:
    """Requests served by `at_s`, from each window's (start, end, requests), assuming an
    even pace within a window."""
    served = 0.0
    for start, end, requests in spans:
        if at_s >= end:
            served += requests
        elif at_s > start:
            served += requests * (at_s - start) / (end - start)
    return served


def leak_rate_of(samples: Sequence[tuple[float, float]],
                 spans: Sequence[tuple[float, float, int]], alpha: float) -> LeakRate | None:
    """The leak rate from the sampler's samples and the windows' spans."""
    if not spans:
        return None
    first, last = spans[0][0], spans[-1][1]
    inside = [(at, rss) for at, rss in samples if first <= at <= last + 1.0]
    return leak_rate([requests_at(at, spans) for at, _ in inside], [rss for _, rss in inside],
                     [at for at, _ in inside], alpha)


def baseline(server: ModelServer) -> dict[str, float]:
    """The tree's memory now (empty when the server is not a local process)."""
    tree = server.process_tree()
    return process_tree_memory(tree) if tree else {}
