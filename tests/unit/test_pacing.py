"""The open loop's pacer: never early, and its thread only where requests are far apart.
(How close to the instant it wakes is measured by benchmarks/distributed.py and
benchmarks/loadgen.py, not asserted here: the machines are shared.)"""

from __future__ import annotations

import asyncio
import time

from pipeline.measure import pacing
from pipeline.measure.pacing import Pacer


def _wake_times(gap_s: float, count: int,
                mean_rate: float | None = None) -> tuple[list[float], list[float], int]:
    async def run() -> tuple[list[float], list[float], int]:
        pacer = Pacer(mean_rate)
        start = time.perf_counter() + 0.01
        instants = [start + index * gap_s for index in range(count)]
        woke = []
        for instant in instants:
            await pacer.until(instant)
            woke.append(time.perf_counter())
        pacer.close()
        return instants, woke, pacer.handoffs

    return asyncio.run(run())


def test_never_wakes_before_the_instant() -> None:
    instants, woke, handoffs = _wake_times(0.005, 40)
    assert all(w >= i for i, w in zip(instants, woke, strict=True))
    assert handoffs > 0


def test_a_fast_schedule_stays_on_the_event_loop() -> None:
    instants, woke, handoffs = _wake_times(pacing.FINE_GAP_S / 2, 40)
    assert all(w >= i for i, w in zip(instants, woke, strict=True))
    assert handoffs <= 1      # the first request has no gap to judge by


def test_a_short_gap_of_a_slow_schedule_goes_to_the_thread() -> None:
    # Gaps under FINE_GAP_S, as most of a Poisson schedule's are, in a schedule whose mean
    # rate allows a hand-off per request.
    instants, woke, handoffs = _wake_times(pacing.FINE_GAP_S * 0.9, 40, pacing.FINE_MEAN_RATE)
    assert all(w >= i for i, w in zip(instants, woke, strict=True))
    assert handoffs > 1


def test_a_fast_mean_rate_keeps_the_gap_rule() -> None:
    _, _, handoffs = _wake_times(pacing.FINE_GAP_S / 2, 40, pacing.FINE_MEAN_RATE * 2)
    assert handoffs <= 1


def test_close_ends_the_thread() -> None:
    async def run() -> None:
        pacer = Pacer()
        await pacer.until(time.perf_counter() + 0.004)
        pacer.close()
        assert pacer._thread is None

    asyncio.run(run())
