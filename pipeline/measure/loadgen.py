"""Load generation against a served model, with latencies in HDR histograms.

Closed loop keeps N requests in flight. Open loop starts requests on a
schedule (constant or Poisson arrivals) and counts each latency from its
*intended* start, so a stalled server cannot hide its stall by stalling the
client (coordinated omission). `paced_sequential` is the naive alternative a
synchronous client amounts to; it is kept to show the difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from hdrh.histogram import HdrHistogram

from pipeline import metric_names as m
from pipeline.measure.grpc_client import GrpcCaller, GrpcRequest
from pipeline.measure.http_client import WireError, WirePool
from pipeline.servers.base import HttpRequest

MAX_LATENCY_US = 3_600_000_000
MIN_SAMPLES_FOR = {"p50": 2, "p90": 10, "p95": 20, "p99": 100, "p999": 1000}
Target = HttpRequest | GrpcRequest


def new_histogram() -> HdrHistogram:
    return HdrHistogram(1, MAX_LATENCY_US, 3)


def latency_us(elapsed_s: float) -> int:
    return min(MAX_LATENCY_US, max(1, int(elapsed_s * 1e6)))


def failed_latency_us(elapsed_s: float, timeout_s: float) -> int:
    """What a failed or timed-out request adds to the latency histogram.

    It is censored at the timeout: it delivered no answer within the longest wait
    the client accepts, so it counts as at least that slow. Recording a fast error
    (a 500 after 2 ms) at its elapsed time would make a server that fails fast look
    faster; leaving it out would let a timeout never raise p99.
    """
    return latency_us(max(elapsed_s, timeout_s))


class LoadAborted(Exception):
    """The watchdog said stop (the server died)."""


@dataclass
class LoadResult:
    """Latencies (µs) and outcomes of one measurement window.

    The histogram holds every request: answered ones at their latency, failed and
    timed-out ones censored at the request timeout (see `failed_latency_us`).
    """

    duration_s: float
    histogram: HdrHistogram = field(default_factory=new_histogram)
    completed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    client_cpu_s: float = 0.0
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
            m.P50_MS: self.percentile_ms(50),
            m.P90_MS: self.percentile_ms(90),
            m.P95_MS: self.percentile_ms(95),
            m.P99_MS: self.percentile_ms(99),
            m.P999_MS: self.percentile_ms(99.9),
            m.MAX_MS: float(self.histogram.get_max_value()) / 1e3 if count else 0.0,
            m.MEAN_MS: float(self.histogram.get_mean_value()) / 1e3 if count else 0.0,
            "requests": float(requests),
            "errors": float(self.error_count),
            "error_rate": self.error_rate,
            "throughput_rps": self.throughput,
            "client_cpu_ms_per_request": (self.client_cpu_s * 1e3 / requests
                                          if requests else 0.0),
        }


# ---------------------------------------------------------------- transports


class Transport(Protocol):
    async def send(self, timeout_s: float) -> str | None: ...
    async def close(self) -> None: ...


class _HttpTransport:
    def __init__(self, request: HttpRequest) -> None:
        self.pool = WirePool(request)

    async def send(self, timeout_s: float) -> str | None:
        try:
            status = await self.pool.send(timeout_s)
        except TimeoutError:
            return "timeout"
        except WireError:
            return "connection"
        return None if status == 200 else f"http_{status}"

    async def close(self) -> None:
        self.pool.close()


def transport_for(target: Target) -> Transport:
    if isinstance(target, GrpcRequest):
        return GrpcCaller(target)
    return _HttpTransport(target)


# ---------------------------------------------------------------- watch and tick

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


async def _supervise(work: Sequence[asyncio.Task[Any]], should_stop: Callable[[], bool],
                     tick: Tick) -> None:
    watchdog = asyncio.create_task(_watch(should_stop, work, tick))
    try:
        await asyncio.gather(*work)
    except asyncio.CancelledError:
        if should_stop():
            raise LoadAborted() from None
        raise
    finally:
        watchdog.cancel()


# ---------------------------------------------------------------- closed loop


async def closed_loop(target: Target, concurrency: int, duration_s: float, timeout_s: float,
                      should_stop: Callable[[], bool] = lambda: False,
                      tick: Tick = _no_tick) -> LoadResult:
    """`concurrency` workers, each sending its next request when the last one returns."""
    result = LoadResult(duration_s)
    transport = transport_for(target)
    try:
        cpu_start = time.process_time()
        end = time.perf_counter() + duration_s

        async def worker() -> None:
            while True:
                sent = time.perf_counter()
                if sent >= end:
                    return
                error = await transport.send(timeout_s)
                done = time.perf_counter()
                if error is None:
                    result.histogram.record_value(latency_us(done - sent))
                    if done <= end:
                        result.completed += 1
                else:
                    result.histogram.record_value(failed_latency_us(done - sent, timeout_s))
                    result.errors[error] += 1

        await _supervise([asyncio.create_task(worker()) for _ in range(concurrency)],
                         should_stop, tick)
        result.client_cpu_s = time.process_time() - cpu_start
    finally:
        await transport.close()
    return result


# ---------------------------------------------------------------- open loop


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
    from_send: LoadResult
    lingered_s: float = 0.0   # waited after a hard end for unanswered requests' answers
    unsettled: int = 0        # still unanswered after that, so cancelled


def schedule(phases: Sequence[Phase], arrivals: str = "constant",
             seed: int = 0) -> list[tuple[float, str]]:
    """Intended start offsets (s) and their phase: evenly spaced, or Poisson arrivals."""
    rng = random.Random(seed)
    out: list[tuple[float, str]] = []
    phase_start = 0.0
    for phase in phases:
        if arrivals == "poisson":
            offset = rng.expovariate(phase.rate)
            while offset < phase.duration_s:
                out.append((phase_start + offset, phase.name))
                offset += rng.expovariate(phase.rate)
        else:
            count = round(phase.rate * phase.duration_s)
            out += [(phase_start + index / phase.rate, phase.name) for index in range(count)]
        phase_start += phase.duration_s
    return out


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """No cyclic garbage collection during a window (collected before it instead).

    At thousands of requests a second a full collection pauses the client for tens of
    milliseconds; an open loop then sends the late requests in a burst, and the pause
    shows as the server's latency. Reference counting still frees nearly everything.
    """
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class HardEnd:
    """Bounds an open-loop window in time (the capacity search's steps).

    The measurement ends `after_s` from the start: requests still in flight are counted
    as "unanswered" and scheduled ones not yet sent as "unsent", both errors censored at
    the timeout. A request answered later than the timeout counts as a "timeout" the same
    way, but its connection is not closed: unanswered requests keep theirs for up to
    `linger_s` more while the server works them off (not measured), and are cancelled
    only then. Closing connections with requests in flight opens new ones in their
    place, and under overload Triton was seen to lose track of some of them: never
    answered, and waited for when it stops until it is killed.
    """

    after_s: float
    linger_s: float
    # More errors than this and the window has failed whatever comes: it stops sending
    # (the rest count as "unsent"), so that an overload lasts no longer than it must.
    max_errors: int | None = None


async def open_loop(target: Target, phases: Sequence[Phase], timeout_s: float,
                    max_in_flight: int = 2048, arrivals: str = "constant", seed: int = 0,
                    should_stop: Callable[[], bool] = lambda: False,
                    tick: Tick = _no_tick, hard_end: HardEnd | None = None) -> OpenLoopResult:
    """Requests on a schedule; each latency counted from its intended start.

    The same requests are also recorded from their actual send time (`from_send`),
    and the lag between intended and actual send says whether the client kept up.
    """
    results = {phase.name: LoadResult(phase.duration_s, offered_rate=phase.rate)
               for phase in phases}
    from_send = LoadResult(sum(phase.duration_s for phase in phases))
    lag = new_histogram()
    plan = schedule(phases, arrivals, seed)
    burst_end = sum(p.duration_s for p in phases[: [p.name for p in phases].index("burst") + 1]) \
        if any(p.name == "burst" for p in phases) else None
    last_burst_done = 0.0
    in_flight: dict[asyncio.Task[None], tuple[LoadResult, bool]] = {}
    detached: set[asyncio.Task[None]] = set()
    wire_timeout_s = timeout_s + hard_end.linger_s if hard_end else timeout_s
    lingered_s = 0.0
    errors = 0
    transport = transport_for(target)
    pause_gc = _no_cyclic_gc()
    pause_gc.__enter__()

    def record(bucket: LoadResult, error: str | None, since_intended: float,
               since_sent: float) -> None:
        if error is None:
            bucket.histogram.record_value(latency_us(since_intended))
            from_send.histogram.record_value(latency_us(since_sent))
            bucket.completed += 1
            from_send.completed += 1
            return
        nonlocal errors
        errors += 1
        bucket.histogram.record_value(failed_latency_us(since_intended, timeout_s))
        from_send.histogram.record_value(failed_latency_us(since_sent, timeout_s))
        bucket.errors[error] += 1
        from_send.errors[error] += 1

    try:
        cpu_start = time.process_time()
        start = time.perf_counter()

        async def one(intended: float, sent: float, bucket: LoadResult, is_burst: bool) -> None:
            nonlocal last_burst_done
            error = await transport.send(wire_timeout_s)
            done = time.perf_counter()
            if asyncio.current_task() in detached:
                return                  # counted as unanswered at the hard end
            if done - sent > timeout_s:  # answered, but after the timeout
                error, done = "timeout", sent + timeout_s
            record(bucket, error, done - intended, done - sent)
            if is_burst:
                last_burst_done = max(last_burst_done, done - start)

        def finished(task: asyncio.Task[None]) -> None:
            bucket, _ = in_flight.pop(task)
            if task.cancelled() and task not in detached:
                record(bucket, "cancelled", 0.0, 0.0)

        def detach() -> None:
            nonlocal last_burst_done
            for task, (bucket, is_burst) in in_flight.items():
                detached.add(task)
                record(bucket, "unanswered", 0.0, 0.0)
                if is_burst:  # unanswered at the hard end: the drain lasted at least this long
                    last_burst_done = max(last_burst_done, time.perf_counter() - start)

        async def dispatch() -> None:
            end = start + hard_end.after_s if hard_end else None
            most = hard_end.max_errors if hard_end and hard_end.max_errors is not None else None
            for index, (offset, phase_name) in enumerate(plan):
                if (end is not None and time.perf_counter() >= end) or \
                        (most is not None and errors > most):
                    for _, unsent_phase in plan[index:]:
                        record(results[unsent_phase], "unsent", 0.0, 0.0)
                    break
                intended = start + offset
                delay = intended - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                sent = time.perf_counter()
                lag.record_value(max(1, int((sent - intended) * 1e6)))
                bucket = results[phase_name]
                if len(in_flight) >= max_in_flight:
                    record(bucket, "client_overload", 0.0, 0.0)
                    continue
                task = asyncio.create_task(one(intended, sent, bucket, phase_name == "burst"))
                in_flight[task] = (bucket, phase_name == "burst")
                task.add_done_callback(finished)
            if in_flight:
                wait = timeout_s + 1.0 if end is None else max(0.0, end - time.perf_counter())
                await asyncio.wait(list(in_flight), timeout=wait)

        try:
            await _supervise([asyncio.create_task(dispatch())], should_stop, tick)
            if hard_end is not None and in_flight:
                detach()
                lingering = time.perf_counter()
                await asyncio.wait(list(in_flight), timeout=hard_end.linger_s)
                lingered_s = time.perf_counter() - lingering
        finally:
            leftover = list(in_flight)
            for task in leftover:
                task.cancel()
            if leftover:
                await asyncio.wait(leftover)  # each is counted when done (see finished)
        from_send.client_cpu_s = time.process_time() - cpu_start
        for bucket in results.values():
            bucket.client_cpu_s = from_send.client_cpu_s * bucket.duration_s / \
                from_send.duration_s
    finally:
        await transport.close()
        pause_gc.__exit__(None, None, None)
    lag_p99 = float(lag.get_value_at_percentile(99)) if lag.get_total_count() else 0.0
    shortest_interval_us = min(1e6 / phase.rate for phase in phases)
    return OpenLoopResult(
        phases=results,
        drain_s=max(0.0, last_burst_done - burst_end) if burst_end is not None else 0.0,
        lag_p99_us=lag_p99,
        # Behind schedule by more than a millisecond and more than one interval: the
        # client, not the server, set the pace.
        client_bound=lag_p99 > max(1000.0, shortest_interval_us),
        from_send=from_send,
        lingered_s=lingered_s,
        unsettled=len(leftover),
    )


async def paced_sequential(target: Target, rate: float, duration_s: float,
                           timeout_s: float) -> tuple[LoadResult, LoadResult]:
    """The naive client: one request at a time, paced to `rate`, never more than one in
    flight. Returns (latency from the actual send, latency from the intended start).

    Behind a stall it simply sends late, so the first figure hides the stall:
    coordinated omission, as in a synchronous load generator.
    """
    naive, honest = LoadResult(duration_s), LoadResult(duration_s)
    transport = transport_for(target)
    try:
        start = time.perf_counter()
        for index in range(int(rate * duration_s)):
            intended = start + index / rate
            delay = intended - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent = time.perf_counter()
            error = await transport.send(timeout_s)
            done = time.perf_counter()
            for result, since in ((naive, sent), (honest, intended)):
                if error is None:
                    result.histogram.record_value(latency_us(done - since))
                    result.completed += 1
                else:
                    result.histogram.record_value(failed_latency_us(done - since, timeout_s))
                    result.errors[error] += 1
    finally:
        await transport.close()
    return naive, honest
