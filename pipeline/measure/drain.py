"""Wait for a server to work off its backlog: one request at a time until one is prompt.

After an open-loop step that overran the server, requests the client gave up on are
still queued in the server (Triton works off what it accepted). The next step would
inherit that queue. A single request queues behind the backlog, so its answer comes
when the backlog is gone; one answered within the SLO says the server is back to normal.
"""

from __future__ import annotations

import asyncio
import time

from pipeline import interrupts
from pipeline.measure.loadgen import Target
from pipeline.measure.wire.transport import sized_transport
from pipeline.statistics.capacity import Drained

RETRY_PAUSE_S = 0.01  # between attempts, so that fast errors do not spin the client


async def until_prompt(target: Target, within_s: float, limit_s: float) -> Drained:
    """Send single requests until one is answered within `within_s`, for `limit_s` at most."""
    transport = sized_transport(target)
    started = time.perf_counter()
    deadline = started + limit_s
    requests = 0
    try:
        # An interrupt (a flag only, inside an event loop) ends the wait: the next window's
        # watchdog then raises it.
        while not interrupts.requested() and (remaining := deadline - time.perf_counter()) > 0:
            sent = time.perf_counter()
            error, _ = await transport.send(remaining)
            requests += 1
            if error is None and time.perf_counter() - sent <= within_s:
                return Drained(time.perf_counter() - started, True, requests)
            await asyncio.sleep(RETRY_PAUSE_S)
    finally:
        await transport.close()
    return Drained(time.perf_counter() - started, False, requests)
