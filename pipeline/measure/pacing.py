"""Waking on time for each request of an open-loop schedule.

asyncio's timers wake through epoll, whose timeout counts whole milliseconds rounded up:
a sleep ends 1-2 ms late (measured here: p50 1.1 ms, p99 2.2 ms on an idle loop), the
whole of a schedule-lag budget. The pacer sleeps on the event loop until a little before
the instant, then a helper thread sleeps the rest with the OS's sub-millisecond sleep and
wakes the loop through its self-pipe (call_soon_threadsafe), which is not rounded.
Spinning would come closer, but burns a core that the server under test may need.

The thread costs a hand-off per request (about 90 µs of CPU here), so it is used for every
wait only where the schedule's mean rate is at most FINE_MEAN_RATE (2,000/s: under a fifth
of a core). A Poisson schedule at 1,000/s has 63% of its gaps under 1 ms; leaving those to
the loop's rounded sleep held the pacer's own lag p99 at 1.1 ms with nothing sent (0.3 ms
with the thread; benchmarks/replay.py, pacer_only_lag_p99_ms). A faster schedule hands off
only after gaps of FINE_GAP_S or more: its loop is busy anyway, and its lag is judged
against its own interval (see OpenLoopResult.client_bound).
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

# The loop's own sleep ends this much before the instant at the latest; the thread
# sleeps the rest.
COARSE_MARGIN_S = 0.003
# Closer than this to the instant: wait the rest here rather than hand off.
FINE_BELOW_S = 0.0002
FINE_GAP_S = 0.001
FINE_MEAN_RATE = 2000.0


def schedule_rate(first_s: float, last_s: float, count: int) -> float | None:
    """A schedule's mean requests per second, from its first and last instants and its
    count (None for fewer than two requests, or no span)."""
    if count < 2 or last_s <= first_s:
        return None
    return (count - 1) / (last_s - first_s)


class Pacer:
    """Waits until each instant in turn (one wait at a time); `close` ends its thread.
    `mean_rate` is the schedule's requests per second (None: unknown, judged by each gap)."""

    def __init__(self, mean_rate: float | None = None) -> None:
        self._fine_everywhere = mean_rate is not None and mean_rate <= FINE_MEAN_RATE
        self._thread: ThreadPoolExecutor | None = None
        self._last = float("-inf")
        self.handoffs = 0       # waits finished by the thread

    async def until(self, instant: float) -> None:
        gap, self._last = instant - self._last, instant
        delay = instant - time.perf_counter()
        if gap < FINE_GAP_S and not self._fine_everywhere:
            if delay > 0:
                await asyncio.sleep(delay)
            return
        if delay > COARSE_MARGIN_S:
            await asyncio.sleep(delay - COARSE_MARGIN_S)
        if instant - time.perf_counter() > FINE_BELOW_S:
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix="open-loop-pacer")
            self.handoffs += 1
            await asyncio.get_running_loop().run_in_executor(self._thread, _sleep_until,
                                                             instant)
        while time.perf_counter() < instant:
            pass    # at most FINE_BELOW_S: never send before the instant

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)   # its sleeps last a few ms at most
            self._thread = None


def _sleep_until(instant: float) -> None:
    remaining = instant - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)
