"""Measurement windows against a running server: closed-loop, open-loop and burst windows,
sent by a `LoadSender`, and the memory of the server's process tree."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from pipeline import interrupts
from pipeline.errors import ServerError
from pipeline.measure.gpu import gpu_memory_mb
from pipeline.measure.loadgen import (
    HardEnd,
    LoadAborted,
    LoadResult,
    OpenLoopResult,
    Phase,
    Target,
    closed_loop,
)
from pipeline.measure.loadgen import open_loop as run_open_loop
from pipeline.measure.memory import process_tree_memory
from pipeline.measure.sender import LoadSender
from pipeline.servers.base import ModelServer, ServerStats
from pipeline.spec.models import BurstSpec
from pipeline.statistics.sequential import LookT, WindowPlan, WindowRun, run_windows


def closed_window(sender: LoadSender, server: ModelServer, target: Target, concurrency: int,
                  duration_s: float, label: str) -> LoadResult:
    """One closed-loop window; ServerError with the server's log if it dies meanwhile."""

    def tick(elapsed: float) -> None:
        sender.progress(min(elapsed, duration_s), duration_s, label)

    shards = sender.shards
    try:
        if shards is not None:
            return shards.cluster.closed_window(shards.workers, shards.row, target, concurrency,
                                                duration_s, sender.timeout_s, label,
                                                should_stop=lambda: not server.alive(),
                                                tick=tick)
        return asyncio.run(closed_loop(target, concurrency, duration_s, sender.timeout_s,
                                       should_stop=lambda: not server.alive(), tick=tick))
    except LoadAborted:
        raise _stopped(label, server) from None


def closed_windows_until_decided(
        sender: LoadSender, server: ModelServer, target: Target, concurrency: int,
        look: Callable[[list[LoadResult], float], LookT],
        client_limited: Callable[[LoadResult], str | None],
        plan: WindowPlan, window_s: float) -> ClosedWindows[LookT]:
    """The latency stage's closed-loop windows until a look is decided (or the cap); see
    pipeline.statistics.sequential. With the server's counter deltas over exactly those windows,
    each window `window_s` long, and each window's (start, end, requests)."""
    snapshots: list[ServerStats] = [server.stats()]
    spans: list[tuple[float, float, int]] = []

    def window(index: int) -> LoadResult:
        started = time.perf_counter()
        result = closed_window(sender, server, target, concurrency, window_s,
                               f"window {index + 1} at concurrency {concurrency}")
        spans.append((started, time.perf_counter(), result.requests))
        snapshots.append(server.stats())
        return result

    run = run_windows(window, look, client_limited, plan)
    return ClosedWindows(run, snapshots[-1].since(snapshots[0]), window_s, spans)


@dataclass(frozen=True)
class ClosedWindows(Generic[LookT]):
    run: WindowRun[LoadResult, LookT]
    server_view: ServerStats
    window_s: float
    spans: list[tuple[float, float, int]]


def open_window(sender: LoadSender, server: ModelServer, target: Target,
                phases: Sequence[Phase], label: str, arrivals: str,
                timeout_s: float | None = None, hard_end: HardEnd | None = None,
                max_in_flight: int = 2048,
                plan: list[tuple[float, str]] | None = None) -> OpenLoopResult:
    """One open-loop window; requests time out after `timeout_s` (default: the sender's),
    and the window ends by `hard_end` (see HardEnd). `plan`: the send offsets and their
    phase, given instead of the phases' schedule (a replay)."""
    timeout = timeout_s if timeout_s is not None else sender.timeout_s
    total = sum(phase.duration_s for phase in phases)

    def tick(elapsed: float) -> None:
        sender.progress(min(elapsed, total), total, label)

    shards = sender.shards
    try:
        if shards is not None:
            return shards.cluster.open_window(shards.workers, shards.row, target, phases,
                                              timeout, label, max_in_flight, arrivals,
                                              should_stop=lambda: not server.alive(),
                                              tick=tick, hard_end=hard_end, plan=plan)
        return asyncio.run(run_open_loop(target, phases, timeout, arrivals=arrivals,
                                         should_stop=lambda: not server.alive(), tick=tick,
                                         hard_end=hard_end, max_in_flight=max_in_flight,
                                         plan=plan))
    except LoadAborted:
        raise _stopped(label, server) from None


def burst_window(sender: LoadSender, server: ModelServer, target: Target,
                 burst: BurstSpec) -> tuple[OpenLoopResult, float]:
    """The low -> high -> low open-loop test ("before", "burst", "after"); and the base
    rate (default: a tenth of the burst rate)."""
    base = burst.base_rate.per_second if burst.base_rate else burst.rate.per_second / 10
    settle = burst.settle.seconds
    after = max(settle, 2 * burst.duration.seconds)
    phases = [Phase("before", base, settle),
              Phase("burst", burst.rate.per_second, burst.duration.seconds),
              Phase("after", base, after)]
    outcome = open_window(sender, server, target, phases,
                          f"burst {burst.rate} for {burst.duration}", burst.arrivals)
    return outcome, base


def server_memory(server: ModelServer) -> tuple[dict[str, float], dict[str, Any]]:
    """RSS/PSS of the server's process tree, and GPU memory where NVML works.

    Metrics only hold numbers that were measured; what was not is named in details.
    """
    tree = server.process_tree()
    if not tree:
        return {}, {"memory": "not measured (the server is not a local process)"}
    metrics = process_tree_memory(tree)
    details: dict[str, Any] = {}
    gpu = gpu_memory_mb(p.pid for p in tree)
    if gpu is None:
        details["gpu_memory"] = "not measured (no GPU or NVML here)"
    else:
        metrics["server_gpu_mb"] = gpu
    return metrics, details


def _stopped(label: str, server: ModelServer) -> BaseException:
    """Why the load stopped: the run was interrupted, or the server died."""
    if interrupts.requested():
        return KeyboardInterrupt()
    return ServerError(f"during {label}: {server.describe_death()}")
