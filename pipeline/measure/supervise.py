"""Running load tasks under a watchdog that reports progress and stops them on demand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from pipeline import interrupts


class LoadAborted(Exception):
    """The watchdog said stop (the server died)."""


Tick = Callable[[float], None]


def no_tick(elapsed_s: float) -> None:
    """Default progress callback: nothing to show."""


async def _watch(should_stop: Callable[[], bool], tasks: Sequence[asyncio.Task[Any]],
                 tick: Tick) -> None:
    started = time.perf_counter()
    while True:
        await asyncio.sleep(0.1)
        tick(time.perf_counter() - started)
        if should_stop() or interrupts.requested():
            for task in tasks:
                task.cancel()
            return


async def supervise(work: Sequence[asyncio.Task[Any]], should_stop: Callable[[], bool],
                     tick: Tick) -> None:
    watchdog = asyncio.create_task(_watch(should_stop, work, tick))
    try:
        await asyncio.gather(*work)
    except asyncio.CancelledError:
        if interrupts.requested():
            raise KeyboardInterrupt from None
        if should_stop():
            raise LoadAborted() from None
        raise
    finally:
        watchdog.cancel()
