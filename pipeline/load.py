"""Load generation against a served model, with latencies in HDR histograms.

Closed loop keeps N requests in flight. Open loop starts requests on a
schedule and counts each latency from its *intended* start, so a stalled
server cannot hide its stall by stalling the client (coordinated omission).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

from pipeline.servers.base import HttpRequest
from pipeline.wire import WireError, WirePool

MAX_LATENCY_US = 3_600_000_000
MIN_SAMPLES_FOR = {"p50": 2, "p90": 10, "p95": 20, "p99": 100, "p999": 1000}


def new_histogram() -> HdrHistogram:
    return HdrHistogram(1, MAX_LATENCY_US, 3)


class LoadAborted(Exception):
    """The watchdog said stop (the server died)."""


@dataclass
class LoadResult:
    """Latencies (µs) and outcomes of one measurement window."""

    duration_s: float
    histogram: HdrHistogram = field(default_factory=new_histogram)
    completed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    client_cpu_s: float = 0.0
    schedule_lag_p99_us: float = 0.0
    offered_rate: float = 0.0

    def merge(self, other: LoadResult) -> None:
        self.histogram.add(other.histogram)
        self.completed += other.completed
        self.errors.update(other.errors)
        self.duration_s += other.duration_s
        self.client_cpu_s += other.client_cpu_s

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def throughput(self) -> float:
        return self.completed / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def error_rate(self) -> float:
        total = self.completed + self.error_count
        return self.error_count / total if total else 0.0

    def percentile_ms(self, percentile: float) -> float:
        if self.histogram.get_total_count() == 0:
            return 0.0
        return float(self.histogram.get_value_at_percentile(percentile)) / 1e3

    def thin_percentiles(self) -> list[str]:
        """Percentiles that need more samples than were taken."""
        count = self.histogram.get_total_count()
        return [name for name, needed in MIN_SAMPLES_FOR.items() if count < needed]

    def summary(self) -> dict[str, float]:
        count = self.histogram.get_total_count()
        requests = self.completed + self.error_count
        return {
            "p50_ms": self.percentile_ms(50),
            "p90_ms": self.percentile_ms(90),
            "p95_ms": self.percentile_ms(95),
            "p99_ms": self.percentile_ms(99),
            "p999_ms": self.percentile_ms(99.9),
            "max_ms": float(self.histogram.get_max_value()) / 1e3 if count else 0.0,
            "mean_ms": float(self.histogram.get_mean_value()) / 1e3 if count else 0.0,
            "requests": float(requests),
            "errors": float(self.error_count),
            "error_rate": self.error_rate,
            "throughput_rps": self.throughput,
            "client_cpu_ms_per_request": (self.client_cpu_s * 1e3 / requests
                                          if requests else 0.0),
        }


class _Sender:
    def __init__(self, pool: WirePool, timeout_s: float) -> None:
        self.pool = pool
        self.timeout_s = timeout_s

    async def send(self) -> str | None:
        """None on success, else the kind of error."""
        try:
            status = await self.pool.send(self.timeout_s)
        except TimeoutError:
            return "timeout"
        except WireError:
            return "connection"
        return None if status == 200 else f"http_{status}"


Tick = Callable[[float], None]


def _no_tick(elapsed_s: float) -> None:
    """Default progress callback: nothing to show."""


async def _watch(should_stop: Callable[[], bool], tasks: Sequence[asyncio.Task[Any]],
                 tick: Tick) -> None:
    started = time.perf_counter()
    while True:
        await asyncio.sleep(0.1)
        tick(time.perf_counter() - started)
        if should_stop():
            for task in tasks:
                task.cancel()
            return


async def closed_loop(target: HttpRequest, concurrency: int, duration_s: float, timeout_s: float,
                      should_stop: Callable[[], bool] = lambda: False,
                      tick: Tick = _no_tick) -> LoadResult:
    """`concurrency` workers, each sending its next request when the last one returns."""
    result = LoadResult(duration_s)
    pool = WirePool(target)
    try:
        sender = _Sender(pool, timeout_s)
        cpu_start = time.process_time()
        start = time.perf_counter()
        end = start + duration_s

        async def worker() -> None:
            while True:
                sent = time.perf_counter()
                if sent >= end:
                    return
                error = await sender.send()
                done = time.perf_counter()
                if error is None:
                    result.histogram.record_value(max(1, int((done - sent) * 1e6)))
                    if done <= end:
                        result.completed += 1
                else:
                    result.errors[error] += 1

        workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
        watchdog = asyncio.create_task(_watch(should_stop, workers, tick))
        try:
            await asyncio.gather(*workers)
        except asyncio.CancelledError:
            if should_stop():
                raise LoadAborted() from None
            raise
        finally:
            watchdog.cancel()
        result.client_cpu_s = time.process_time() - cpu_start
    finally:
        pool.close()
    return result


@dataclass(frozen=True)
class Phase:
    name: str
    rate: float
    duration_s: float


@dataclass
class OpenLoopResult:
    phases: dict[str, LoadResult]
    drain_s: float
    lag_p99_us: float
    client_bound: bool


async def open_loop(target: HttpRequest, phases: Sequence[Phase], timeout_s: float,
                    max_in_flight: int = 2048,
                    should_stop: Callable[[], bool] = lambda: False,
                    tick: Tick = _no_tick) -> OpenLoopResult:
    """Requests at constant rates per phase; latency counted from the intended start."""
    results = {phase.name: LoadResult(phase.duration_s, offered_rate=phase.rate)
               for phase in phases}
    lag = new_histogram()
    last_burst_done = 0.0
    burst_end = 0.0
    in_flight: set[asyncio.Task[None]] = set()
    pool = WirePool(target)
    try:
        sender = _Sender(pool, timeout_s)
        start = time.perf_counter()

        async def one(intended: float, bucket: LoadResult, is_burst: bool) -> None:
            nonlocal last_burst_done
            error = await sender.send()
            done = time.perf_counter()
            if error is None:
                bucket.histogram.record_value(max(1, int((done - intended) * 1e6)))
                bucket.completed += 1
            else:
                bucket.errors[error] += 1
            if is_burst:
                last_burst_done = max(last_burst_done, done)

        async def dispatch() -> None:
            nonlocal burst_end
            phase_start = start
            for phase in phases:
                bucket = results[phase.name]
                count = int(phase.rate * phase.duration_s)
                is_burst = phase.name == "burst"
                for index in range(count):
                    intended = phase_start + index / phase.rate
                    delay = intended - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    lag.record_value(max(1, int((time.perf_counter() - intended) * 1e6)))
                    if len(in_flight) >= max_in_flight:
                        bucket.errors["client_overload"] += 1
                        continue
                    task = asyncio.create_task(one(intended, bucket, is_burst))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
                phase_start += phase.duration_s
                if is_burst:
                    burst_end = phase_start
            if in_flight:
                await asyncio.wait(list(in_flight), timeout=timeout_s + 1.0)

        dispatcher = asyncio.create_task(dispatch())
        watchdog = asyncio.create_task(_watch(should_stop, [dispatcher], tick))
        try:
            await dispatcher
        except asyncio.CancelledError:
            for task in in_flight:
                task.cancel()
            if should_stop():
                raise LoadAborted() from None
            raise
        finally:
            watchdog.cancel()
    finally:
        pool.close()
    lag_p99 = float(lag.get_value_at_percentile(99)) if lag.get_total_count() else 0.0
    shortest_interval_us = min(1e6 / phase.rate for phase in phases)
    return OpenLoopResult(
        phases=results,
        drain_s=max(0.0, last_burst_done - burst_end) if burst_end else 0.0,
        lag_p99_us=lag_p99,
        # Behind schedule by more than a millisecond and more than one interval: the
        # client, not the server, set the pace.
        client_bound=lag_p99 > max(1000.0, shortest_interval_us),
    )
