"""Load generation against a served model, with latencies in HDR histograms.

Closed loop keeps N requests in flight. Open loop (`open_loop.py`) starts requests on a
schedule (constant or Poisson arrivals) and counts each latency from its
*intended* start, so a stalled server cannot hide its stall by stalling the
client (coordinated omission). `paced_sequential` is the naive alternative a
synchronous client amounts to; it is kept to show the difference.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from pipeline.measure.client_wait import runqueue_wait_s, waited_since
from pipeline.measure.load_result import (
    MAX_LATENCY_US,
    LoadResult,
    failed_latency_us,
    latency_us,
    new_histogram,
)
from pipeline.measure.open_loop import HardEnd, OpenLoopResult, Phase, open_loop, schedule
from pipeline.measure.supervise import LoadAborted, Tick, no_tick, supervise
from pipeline.measure.wire.blocking import BlockingCaller, blocking_callers
from pipeline.measure.wire.transport import Target, Transport, sized_transport, transport_for
from pipeline.statistics.order_stats import MIN_SAMPLES_FOR

# Re-exported: the load generators' results, transports and open loop live in their own
# modules, and `from pipeline.measure.loadgen import X` keeps working for them.
__all__ = [
    "MAX_LATENCY_US", "MIN_SAMPLES_FOR", "HardEnd", "LoadAborted", "LoadResult",
    "OpenLoopResult", "Phase", "Target", "Tick", "Transport", "closed_loop",
    "failed_latency_us", "latency_us", "new_histogram", "open_loop", "paced_sequential",
    "schedule", "transport_for",
]


async def closed_loop(target: Target, concurrency: int, duration_s: float, timeout_s: float,
                      should_stop: Callable[[], bool] = lambda: False,
                      tick: Tick = no_tick) -> LoadResult:
    """`concurrency` workers, each sending its next request when the last one returns.

    At low concurrency (`blocking_callers`), each worker is a blocking socket in a thread
    of its own (it costs less client CPU per request than the event loop, see
    `wire/blocking.py`); the event loop meanwhile only runs the watchdog.
    """
    callers = blocking_callers(target, concurrency)
    if callers is not None:
        return await _closed_loop_blocking(callers, duration_s, timeout_s, should_stop, tick)
    result = LoadResult(duration_s)
    transport = sized_transport(target)
    try:
        cpu_start, waits = time.process_time(), runqueue_wait_s()
        start = time.perf_counter()
        end = start + duration_s

        async def worker() -> None:
            while True:
                sent = time.perf_counter()
                if sent >= end:
                    return
                error, size = await transport.send(timeout_s)
                done = time.perf_counter()
                value = latency_us(done - sent) if error is None else \
                    failed_latency_us(done - sent, timeout_s)
                result.record(value, done - start, error, size)

        await supervise([asyncio.create_task(worker()) for _ in range(concurrency)],
                        should_stop, tick)
        _close_window(result, start, cpu_start, waits)
    finally:
        await transport.close()
    return result


def _close_window(result: LoadResult, start: float, cpu_start: float,
                  waits: dict[str, float] | None) -> None:
    """The window lasts until its last answer: every request sent in it counts, in the
    histogram, the count and the throughput alike (answers after the nominal end too)."""
    result.duration_s = max(result.duration_s, time.perf_counter() - start)
    result.client_cpu_s = time.process_time() - cpu_start
    result.client_wait_s = waited_since(waits)


async def _closed_loop_blocking(callers: list[BlockingCaller], duration_s: float,
                                timeout_s: float, should_stop: Callable[[], bool],
                                tick: Tick) -> LoadResult:
    result = LoadResult(duration_s)
    cpu_start, waits = time.process_time(), runqueue_wait_s()
    start = time.perf_counter()
    end = start + duration_s
    loop = asyncio.get_running_loop()
    # Each thread records into its own result (a histogram is not thread-safe).
    shares = [LoadResult(duration_s) for _ in callers]
    threads = [loop.run_in_executor(None, _blocking_worker, caller, share, start, end,
                                    timeout_s)
               for caller, share in zip(callers, shares, strict=True)]

    async def worker(caller: BlockingCaller, thread: asyncio.Future[None]) -> None:
        try:
            await asyncio.shield(thread)
        except asyncio.CancelledError:
            caller.interrupt()
            await thread
            raise

    await supervise([asyncio.create_task(worker(caller, thread))
                     for caller, thread in zip(callers, threads, strict=True)],
                    should_stop, tick)
    _close_window(result, start, cpu_start, waits)
    timeline = sorted((at, value) for share in shares
                      for at, value in zip(share.finished_s, share.latencies_us, strict=True))
    for share in shares:
        result.histogram.add(share.histogram)
        result.add_sizes(share.sizes)
        result.completed += share.completed
        result.errors.update(share.errors)
    result.finished_s.extend(at for at, _ in timeline)
    result.latencies_us.extend(value for _, value in timeline)
    result.answered_s.extend(sorted(at for share in shares for at in share.answered_s))
    return result


def _blocking_worker(caller: BlockingCaller, result: LoadResult, start: float, end: float,
                     timeout_s: float) -> None:
    """One worker of the closed loop, as `closed_loop`'s, until `end` or `interrupt`."""
    try:
        while not caller.stopping:
            sent = time.perf_counter()
            if sent >= end:
                return
            error = caller.send(timeout_s)
            done = time.perf_counter()
            if caller.stopping:
                return
            value = latency_us(done - sent) if error is None else \
                failed_latency_us(done - sent, timeout_s)
            result.record(value, done - start, error, caller.size)
    finally:
        caller.close()


async def paced_sequential(target: Target, rate: float, duration_s: float,
                           timeout_s: float) -> tuple[LoadResult, LoadResult]:
    """The naive client: one request at a time, paced to `rate`, never more than one in
    flight. Returns (latency from the actual send, latency from the intended start).

    Behind a stall it simply sends late, so the first figure hides the stall:
    coordinated omission, as in a synchronous load generator.
    """
    naive, honest = LoadResult(duration_s), LoadResult(duration_s)
    transport = sized_transport(target)
    try:
        start = time.perf_counter()
        for index in range(int(rate * duration_s)):
            intended = start + index / rate
            delay = intended - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent = time.perf_counter()
            error, _ = await transport.send(timeout_s)
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
