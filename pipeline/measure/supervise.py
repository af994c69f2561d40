"""Running load tasks under a watchdog that reports progress and stops them on demand."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from pipeline import interrupts


class LoadAborted(Exception):
    """The watchdog said stop: the server died, or the run was interrupted (the caller
    tells which: `pipeline.interrupts.requested()`)."""


Tick = Callable[[float], None]


def no_tick(elapsed_s: float) -> None:
    """Default progress callback: nothing to show."""


async def _watch(should_stop: Callable[[], bool], tasks: Sequence[asyncio.Task[Any]],
                 tick: Tick, stopped: list[bool]) -> None:
    started = time.perf_counter()
    while True:
        await asyncio.sleep(0.1)
        tick(time.perf_counter() - started)
        if should_stop() or interrupts.requested():
            stopped.append(True)
            for task in tasks:
                task.cancel()
            return


async def supervise(work: Sequence[asyncio.Task[Any]], should_stop: Callable[[], bool],
                     tick: Tick) -> None:
    stopped: list[bool] = []
    watchdog = asyncio.create_task(_watch(should_stop, work, tick, stopped))
    try:
        await asyncio.gather(*work)
    except asyncio.CancelledError:
        # Raised as an ordinary exception, out of the event loop: a KeyboardInterrupt
        # raised in a task is left there ("Task exception was never retrieved"). A
        # cancellation that is not the watchdog's (asyncio.run closing) stays one.
        if stopped:
            raise LoadAborted() from None
        raise
    finally:
        watchdog.cancel()
