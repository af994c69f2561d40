"""Open-loop load: requests start on a schedule (constant or Poisson arrivals), and each
latency counts from its *intended* start, so a stalled server cannot hide its stall by
stalling the client (coordinated omission)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

from pipeline.measure.load_result import LoadResult, failed_latency_us, latency_us, new_histogram
from pipeline.measure.pacing import Pacer, schedule_rate
from pipeline.measure.supervise import Tick, no_tick, supervise
from pipeline.measure.wire.transport import SizedTransport, Target, sized_transport


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
    # Sharded over load workers: one row each (see pipeline/measure/distributed/merge.py).
    workers: list[dict[str, Any]] = field(default_factory=list)
    lag: HdrHistogram = field(default_factory=new_histogram)  # µs behind schedule, per send


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
    # The errors of the first this many phases do not count toward max_errors: a capacity
    # hold's warm-up block, which its verdict does not judge either.
    warmup_phases: int = 0


async def open_loop(target: Target, phases: Sequence[Phase], timeout_s: float,
                    max_in_flight: int = 2048, arrivals: str = "constant", seed: int = 0,
                    should_stop: Callable[[], bool] = lambda: False,
                    tick: Tick = no_tick, hard_end: HardEnd | None = None,
                    plan: list[tuple[float, str]] | None = None,
                    start_wall: float | None = None) -> OpenLoopResult:
    """Requests on a schedule; each latency counted from its intended start.

    The same requests are also recorded from their actual send time (`from_send`),
    and the lag between intended and actual send says whether the client kept up.
    A load worker passes its share of the schedule as `plan` and the wall-clock instant
    (time.time()) that all workers' offsets count from as `start_wall`.
    """
    window = _OpenLoopWindow(phases, schedule(phases, arrivals, seed) if plan is None else plan,
                             timeout_s, max_in_flight, hard_end, sized_transport(target))
    with _no_cyclic_gc():
        try:
            cpu_start = time.process_time()
            window.start = time.perf_counter()
            if start_wall is not None:
                window.start += start_wall - time.time()
            await window.run(should_stop, tick)
            window.charge_client_cpu(time.process_time() - cpu_start)
        finally:
            window.pacer.close()
            await window.transport.close()
    return window.outcome(phases)


def _burst_end(phases: Sequence[Phase]) -> float | None:
    """Offset (s) at which the phase named "burst" ends, if there is one."""
    names = [phase.name for phase in phases]
    if "burst" not in names:
        return None
    return sum(phase.duration_s for phase in phases[: names.index("burst") + 1])


class _OpenLoopWindow:
    """One open-loop window: the requests in flight and where each outcome is counted."""

    def __init__(self, phases: Sequence[Phase], plan: list[tuple[float, str]],
                 timeout_s: float, max_in_flight: int, hard_end: HardEnd | None,
                 transport: SizedTransport) -> None:
        self.results = {phase.name: LoadResult(phase.duration_s) for phase in phases}
        self.from_send = LoadResult(sum(phase.duration_s for phase in phases))
        self.lag = new_histogram()
        self.plan = plan
        self.timeout_s = timeout_s
        self.wire_timeout_s = timeout_s + hard_end.linger_s if hard_end else timeout_s
        self.max_in_flight = max_in_flight
        self.hard_end = hard_end
        self.transport = transport
        self.pacer = Pacer(schedule_rate(plan[0][0], plan[-1][0], len(plan)) if plan
                           else None)
        self.in_flight: dict[asyncio.Task[None], tuple[LoadResult, bool]] = {}
        self.detached: set[asyncio.Task[None]] = set()
        self.overdue: set[asyncio.Task[None]] = set()
        # Overdue connections stay open, within 1.5 x max_in_flight open in all (768 at the
        # capacity steps' cap of 512, under the ~1000 at which Triton was seen to lose
        # requests).
        self.max_open = max_in_flight + max(1, max_in_flight // 2)
        self.errors = 0           # counted toward the hard end's max_errors
        warmup = hard_end.warmup_phases if hard_end else 0
        self.uncounted = {id(self.results[phase.name]) for phase in phases[:warmup]}
        self.start = 0.0
        self.last_burst_done = 0.0
        self.lingered_s = 0.0
        self.unsettled = 0

    def record(self, bucket: LoadResult, error: str | None, since_intended: float,
               since_sent: float, size: str | None = None) -> None:
        from_send = self.from_send
        if error is None:
            bucket.histogram.record_value(latency_us(since_intended))
            bucket.record_size(size, latency_us(since_intended))
            from_send.histogram.record_value(latency_us(since_sent))
            bucket.completed += 1
            from_send.completed += 1
            return
        if id(bucket) not in self.uncounted:
            self.errors += 1
        bucket.histogram.record_value(failed_latency_us(since_intended, self.timeout_s))
        bucket.record_size(size, failed_latency_us(since_intended, self.timeout_s))
        from_send.histogram.record_value(failed_latency_us(since_sent, self.timeout_s))
        bucket.errors[error] += 1
        from_send.errors[error] += 1

    async def run(self, should_stop: Callable[[], bool], tick: Tick) -> None:
        """Dispatch the plan; at a hard end, detach and linger; cancel what is left."""
        try:
            await supervise([asyncio.create_task(self.dispatch())], should_stop, tick)
            if self.hard_end is not None and self.in_flight:
                self.detach()
                lingering = time.perf_counter()
                await asyncio.wait(list(self.in_flight), timeout=self.hard_end.linger_s)
                self.lingered_s = time.perf_counter() - lingering
        finally:
            leftover = list(self.in_flight)
            for task in leftover:
                task.cancel()
            if leftover:
                await asyncio.wait(leftover)  # each is counted when done (see finished)
            self.unsettled = len(leftover)

    async def dispatch(self) -> None:
        hard_end = self.hard_end
        end = self.start + hard_end.after_s if hard_end else None
        most = hard_end.max_errors if hard_end and hard_end.max_errors is not None else None
        for index, (offset, phase_name) in enumerate(self.plan):
            if (end is not None and time.perf_counter() >= end) or \
                    (most is not None and self.errors > most):
                for _, unsent_phase in self.plan[index:]:
                    self.record(self.results[unsent_phase], "unsent", 0.0, 0.0)
                break
            intended = self.start + offset
            await self.pacer.until(intended)
            sent = time.perf_counter()
            self.lag.record_value(max(1, int((sent - intended) * 1e6)))
            bucket = self.results[phase_name]
            if len(self.in_flight) - len(self.overdue) >= self.max_in_flight or \
                    len(self.in_flight) >= self.max_open:
                self.record(bucket, "client_overload", 0.0, 0.0)
                continue
            task = asyncio.create_task(self.one(intended, sent, bucket, phase_name == "burst"))
            self.in_flight[task] = (bucket, phase_name == "burst")
            task.add_done_callback(self.finished)
        if self.in_flight:
            wait = self.timeout_s + 1.0 if end is None else max(0.0, end - time.perf_counter())
            await asyncio.wait(list(self.in_flight), timeout=wait)

    async def one(self, intended: float, sent: float, bucket: LoadResult,
                  is_burst: bool) -> None:
        sending = asyncio.ensure_future(self.transport.send(self.wire_timeout_s))
        if self.wire_timeout_s > self.timeout_s:
            await asyncio.wait([sending], timeout=self.timeout_s)
            if not sending.done():
                self.overdue_now(intended, sent, bucket, is_burst)
        error, size = await sending
        done = time.perf_counter()
        task = asyncio.current_task()
        if task in self.detached or task in self.overdue:
            return                  # counted as unanswered at the hard end, or as a timeout
        if done - sent > self.timeout_s:  # answered, but after the timeout
            error, done = "timeout", sent + self.timeout_s
        self.record(bucket, error, done - intended, done - sent, size)
        if is_burst:
            self.last_burst_done = max(self.last_burst_done, done - self.start)

    def overdue_now(self, intended: float, sent: float, bucket: LoadResult,
                    is_burst: bool) -> None:
        """Past the timeout and unanswered: a timeout now, and its in-flight slot freed for
        the next arrival. Its connection stays open (see HardEnd) but no longer counts
        against max_in_flight: requests the server lost held every slot for the whole
        linger, and a hold then failed with every later arrival a client_overload while
        the server sat idle."""
        task = asyncio.current_task()
        assert task is not None
        self.overdue.add(task)
        done = sent + self.timeout_s
        self.record(bucket, "timeout", done - intended, self.timeout_s)
        if is_burst:
            self.last_burst_done = max(self.last_burst_done, done - self.start)

    def finished(self, task: asyncio.Task[None]) -> None:
        bucket, _ = self.in_flight.pop(task)
        if task.cancelled() and task not in self.detached and task not in self.overdue:
            self.record(bucket, "cancelled", 0.0, 0.0)
        self.overdue.discard(task)

    def detach(self) -> None:
        for task, (bucket, is_burst) in self.in_flight.items():
            if task.done() or task in self.overdue:
                continue    # already counted (its done-callback has not run yet)
            self.detached.add(task)
            self.record(bucket, "unanswered", 0.0, 0.0)
            if is_burst:  # unanswered at the hard end: the drain lasted at least this long
                self.last_burst_done = max(self.last_burst_done, time.perf_counter() - self.start)

    def charge_client_cpu(self, cpu_s: float) -> None:
        """The client's CPU time, shared among the phases by their duration."""
        self.from_send.client_cpu_s = cpu_s
        for bucket in self.results.values():
            bucket.client_cpu_s = self.from_send.client_cpu_s * bucket.duration_s / \
                self.from_send.duration_s

    def outcome(self, phases: Sequence[Phase]) -> OpenLoopResult:
        lag = self.lag
        lag_p99 = float(lag.get_value_at_percentile(99)) if lag.get_total_count() else 0.0
        shortest_interval_us = min(1e6 / phase.rate for phase in phases)
        burst_end = _burst_end(phases)
        return OpenLoopResult(
            phases=self.results,
            drain_s=max(0.0, self.last_burst_done - burst_end) if burst_end is not None else 0.0,
            lag_p99_us=lag_p99,
            # Behind schedule by more than a millisecond and more than one interval: the
            # client, not the server, set the pace.
            client_bound=lag_p99 > max(1000.0, shortest_interval_us),
            from_send=self.from_send,
            lingered_s=self.lingered_s,
            unsettled=self.unsettled,
            lag=lag,
        )
