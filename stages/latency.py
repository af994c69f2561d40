"""latency: closed loop at the spec's concurrency after warm-up; gates from the SLO.

The measurement runs in windows until every percentile gate is decided on its
confidence bound (pipeline.verdict), or until the cap, when an undecided gate
is inconclusive. Next to the client's percentiles it records the server's own
view of exactly those windows (queue vs compute time, formed batch sizes) and
the memory of the server's process tree after that warm traffic.
"""

from __future__ import annotations

import time
from typing import Any

from pipeline import metric_names as m
from pipeline.context import RunContext
from pipeline.gates import memory_growth
from pipeline.gates.latency import (
    interval_metrics,
    latency_gates,
    look_confidence,
    percentile_verdicts,
    settled_verdicts,
    verdict_details,
)
from pipeline.measure.distributed.for_run import load_workers_record
from pipeline.measure.loadgen import LoadResult
from pipeline.measure.stability import Measured, merge
from pipeline.measure.windows import (
    closed_window,
    closed_windows_until_decided,
    load_target,
    server_memory,
)
from pipeline.results import StageResult
from pipeline.servers.base import ServerStats

NAME = "latency"
USES_SERVER = True


def run(ctx: RunContext) -> StageResult:
    started = time.perf_counter()  # the time to a verdict includes the warm-up
    spec = ctx.loaded.spec
    stage = spec.stages.latency
    server = ctx.require_server()
    target = load_target(ctx, server)
    closed_window(ctx, server, target, NAME, stage.concurrency, stage.warmup.seconds,
                  f"warm-up at concurrency {stage.concurrency}")
    memory_before = memory_growth.baseline(server)
    outcome, server_view, window_s = closed_windows_until_decided(
        ctx, server, target, NAME, lambda windows: settled_verdicts(
            percentile_verdicts(spec, windows, merge(windows))))
    verdict_s = time.perf_counter() - started
    measured = outcome.merged()
    verdicts = percentile_verdicts(spec, outcome.windows, measured)
    ctx.require_server()
    memory, memory_notes = server_memory(server)
    stable = outcome.stable(stage.stability.tolerance.fraction)
    window_metrics = server_view.window_metrics()
    metrics = {**measured.summary(), **window_metrics, **memory, **interval_metrics(verdicts),
               "concurrency": float(stage.concurrency), "batch_size": float(stage.batch_size),
               "windows": float(len(outcome.windows)), "windows_kept": float(len(outcome.windows)),
               "stabilised": 1.0 if stable else 0.0, "verdict_s": verdict_s,
               "queue_budget_us": spec.slo.queue_budget().ms * 1e3}
    if spec.slo.queue_mean is not None:
        metrics["queue_mean_budget_us"] = spec.slo.queue_mean.ms * 1e3
    gates = latency_gates(spec, verdicts, measured, len(outcome.windows), window_metrics)
    growth_limit = memory_growth.limit_for(stage.max_memory_growth, spec.server.kind)
    if growth_limit is not None and memory_before:
        sent = sum(w.completed + w.error_count for w in outcome.windows)
        grown = memory_growth.growth(memory_before, memory, sent)
        metrics.update(grown.metrics() if grown else {})
        gates.append(memory_growth.gate(grown, growth_limit))
    preferred = spec.server.batching.preferred_batch_sizes
    reached = {str(size): server_view.batch_executions.get(size, 0) > 0 for size in preferred}
    details: dict[str, Any] = {
        **_window_details(measured, outcome, server_view, preferred, reached, stable, window_s),
        **verdict_details(verdicts, look_confidence(spec)),
        "protocol": stage.protocol,
        **memory_notes,
    }
    workers = load_workers_record(ctx, NAME)
    if workers is not None:
        details["load_workers"] = workers
    message = _message(measured, metrics, memory, reached, stable, outcome)
    return StageResult.judged(NAME, gates, message, metrics, details,
                              accept_inconclusive=stage.verdict.accept_inconclusive)


def _window_details(measured: LoadResult, outcome: Measured[ServerStats], server_view: ServerStats,
                    preferred: list[int], reached: dict[str, bool], stable: bool,
                    window_s: float) -> dict[str, Any]:
    batches = server_view.batch_executions
    return {
        "errors_by_kind": dict(measured.errors),
        "thin_percentiles": measured.thin_percentiles(),
        "batch_executions": {str(k): v for k, v in sorted(batches.items())},
        "preferred_batch_sizes": preferred,
        "preferred_reached": reached,
        "stabilised": stable,
        "decided": outcome.decided,
        "window_s": window_s,
        "windows": [{m.THROUGHPUT_RPS: w.throughput, m.P99_MS: w.percentile_ms(99),
                     m.P95_MS: w.percentile_ms(95), m.P50_MS: w.percentile_ms(50),
                     "requests": w.completed + w.error_count} for w in outcome.windows],
    }


def _message(measured: LoadResult, metrics: dict[str, float], memory: dict[str, float],
             reached: dict[str, bool], stable: bool, outcome: Measured[ServerStats]) -> str:
    summary = measured.summary()
    message = (f"p50 {summary[m.P50_MS]:.2f}ms p99 {summary[m.P99_MS]:.2f}ms at "
               f"{summary[m.THROUGHPUT_RPS]:.0f}/s, {int(summary['errors'])} errors; server "
               f"queue {metrics[m.SERVER_QUEUE_US] / 1e3:.2f}ms, avg batch "
               f"{metrics['server_avg_batch_size']:.1f}")
    if "server_rss_mb" in memory:
        message += f"; RSS {memory['server_rss_mb']:.0f} MiB"
    never = [size for size, hit in reached.items() if not hit]
    if never:
        message += f"; preferred batch size(s) {', '.join(never)} never formed"
    if not stable:
        message += f" (not stabilised over {len(outcome.windows)} windows)"
    if not outcome.decided:
        message += f" (undecided after {len(outcome.windows)} windows, the cap)"
    if "p99" in measured.thin_percentiles():
        message += f" (p99 from only {int(summary['requests'])} requests)"
    return message
