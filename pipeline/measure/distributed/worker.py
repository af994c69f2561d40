"""A load worker: a Ray actor process that runs the project's own load engines on its share.

It runs `open_loop` on its slice of the schedule from the shared start instant, or
`closed_loop` at its share of the concurrency, and sends back what it recorded (HDR
histograms encoded, its schedule lag and its CPU) for the coordinator to merge.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.measure.distributed.merge import (
    SentResult,
    WorkerClosedLoop,
    WorkerOpenLoop,
    encode,
)
from pipeline.measure.loadgen import closed_loop
from pipeline.measure.open_loop import HardEnd, OpenLoopResult, Phase, open_loop
from pipeline.measure.wire.transport import Target


@dataclass(frozen=True)
class OpenLoopJob:
    target: Target
    phases: Sequence[Phase]
    plan: list[tuple[float, str]]
    start_wall: float             # time.time() the schedule's offsets count from
    timeout_s: float
    max_in_flight: int
    hard_end: HardEnd | None
    # Test only: block the worker's event loop this long every 10 ms, a client too slow
    # for its schedule (no real component produces that on demand).
    starve_s: float = 0.0


@dataclass(frozen=True)
class ClosedLoopJob:
    target: Target
    concurrency: int
    duration_s: float
    timeout_s: float
    start_wall: float


class LoadWorker:
    """The actor's body (wrapped by ray.remote in run.py); one per worker process."""

    def __init__(self, worker: int) -> None:
        self.worker = worker

    def pid(self) -> int:
        return os.getpid()

    def open_loop(self, job: OpenLoopJob) -> WorkerOpenLoop:
        outcome = asyncio.run(_open_loop_starved(job))
        return WorkerOpenLoop(
            self.worker, os.getpid(), socket.gethostname(),
            {name: SentResult.of(result) for name, result in outcome.phases.items()},
            SentResult.of(outcome.from_send), encode(outcome.lag), outcome.drain_s,
            outcome.client_bound, outcome.lingered_s, outcome.unsettled)

    def closed_loop(self, job: ClosedLoopJob) -> WorkerClosedLoop:
        wait = job.start_wall - time.time()
        if wait > 0:
            time.sleep(wait)
        result = asyncio.run(closed_loop(job.target, job.concurrency, job.duration_s,
                                         job.timeout_s))
        return WorkerClosedLoop(self.worker, os.getpid(), socket.gethostname(),
                                SentResult.of(result))


async def _open_loop_starved(job: OpenLoopJob) -> OpenLoopResult:
    starver = asyncio.create_task(_starve(job.starve_s)) if job.starve_s > 0 else None
    try:
        outcome = await open_loop(job.target, job.phases, job.timeout_s,
                                  max_in_flight=job.max_in_flight, hard_end=job.hard_end,
                                  plan=job.plan, start_wall=job.start_wall)
    finally:
        if starver is not None:
            starver.cancel()
    return outcome


async def _starve(block_s: float) -> None:
    while True:
        time.sleep(block_s)
        await asyncio.sleep(0.01)
