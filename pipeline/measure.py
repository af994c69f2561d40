"""Measurement windows against a running server: the glue between stages and load."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pipeline.context import RunContext
from pipeline.errors import ServerError
from pipeline.load import LoadAborted, LoadResult, OpenLoopResult, Phase, closed_loop
from pipeline.load import open_loop as run_open_loop
from pipeline.servers.base import HttpRequest, ModelServer
from pipeline.tensors import load_samples, take

Target = HttpRequest


def load_target(ctx: RunContext, server: ModelServer) -> Target:
    spec = ctx.loaded.spec
    samples = load_samples(spec.model, spec.stages.parity, ctx.loaded.workspace)
    return server.infer_request(take(samples, spec.stages.latency.batch_size))


def _server_gone(server: ModelServer) -> bool:
    return not server.process.is_running()


def closed_window(ctx: RunContext, server: ModelServer, target: Target, stage: str,
                  concurrency: int, duration_s: float, label: str) -> LoadResult:
    """One closed-loop window; ServerError with the server's log if it dies meanwhile."""
    timeout = ctx.loaded.spec.stages.latency.request_timeout.seconds

    def tick(elapsed: float) -> None:
        ctx.progress(stage, min(elapsed, duration_s), duration_s, label)

    try:
        return asyncio.run(closed_loop(target, concurrency, duration_s, timeout,
                                       should_stop=lambda: _server_gone(server), tick=tick))
    except LoadAborted:
        raise ServerError(f"during {label}: {server.describe_death()}") from None


def open_window(ctx: RunContext, server: ModelServer, target: Target, stage: str,
                phases: Sequence[Phase], label: str) -> OpenLoopResult:
    timeout = ctx.loaded.spec.stages.latency.request_timeout.seconds
    total = sum(phase.duration_s for phase in phases)

    def tick(elapsed: float) -> None:
        ctx.progress(stage, min(elapsed, total), total, label)

    try:
        return asyncio.run(run_open_loop(target, phases, timeout,
                                         should_stop=lambda: _server_gone(server), tick=tick))
    except LoadAborted:
        raise ServerError(f"during {label}: {server.describe_death()}") from None
