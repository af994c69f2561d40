"""latency: closed loop at the spec's concurrency after warm-up; gates from the SLO.

The measurement is split into windows that repeat until throughput and p99
settle. Next to the client's percentiles it records the server's own view of
exactly those windows (queue vs compute time, formed batch sizes) and the
memory of the server's process tree after that warm traffic.
"""

from __future__ import annotations

from typing import Any

from pipeline import memory_growth
from pipeline.context import RunContext
from pipeline.load import LoadResult
from pipeline.measure import closed_window, load_target, server_memory
from pipeline.results import Gate, StageResult
from pipeline.servers.base import ServerStats
from pipeline.stability import measure_until_stable

NAME = "latency"
USES_SERVER = True


def run(ctx: RunContext) -> StageResult:
    spec = ctx.loaded.spec
    stage = spec.stages.latency
    slo = spec.slo
    server = ctx.require_server()
    target = load_target(ctx, server)
    closed_window(ctx, server, target, NAME, stage.concurrency, stage.warmup.seconds,
                  f"warm-up at concurrency {stage.concurrency}")
    memory_before = memory_growth.baseline(server)
    stability = stage.stability
    window_s = stage.duration.seconds / stability.windows
    snapshots: list[ServerStats] = [server.stats()]

    def window(index: int) -> tuple[LoadResult, ServerStats]:
        result = closed_window(ctx, server, target, NAME, stage.concurrency, window_s,
                               f"window {index + 1} at concurrency {stage.concurrency}")
        snapshots.append(server.stats())
        return result, snapshots[-1]

    outcome = measure_until_stable(window, stability.windows, stability.tolerance.fraction,
                                   stability.max_windows)
    measured = outcome.merged()
    # Counter deltas over exactly the kept windows.
    server_view = snapshots[-1].since(snapshots[-1 - outcome.kept])
    ctx.require_server()
    memory, memory_notes = server_memory(server)
    summary = measured.summary()
    metrics = {**summary, **server_view.window_metrics(), **memory,
               "concurrency": float(stage.concurrency), "batch_size": float(stage.batch_size),
               "windows": float(len(outcome.windows)), "windows_kept": float(outcome.kept),
               "stabilised": 1.0 if outcome.stable else 0.0}
    budget_ms = slo.queue_budget().ms
    metrics["queue_budget_us"] = budget_ms * 1e3

    gates = [Gate.at_most("latency.p99", summary["p99_ms"], slo.p99.ms, "ms")]
    if slo.p95 is not None:
        gates.append(Gate.at_most("latency.p95", summary["p95_ms"], slo.p95.ms, "ms"))
    if slo.p50 is not None:
        gates.append(Gate.at_most("latency.p50", summary["p50_ms"], slo.p50.ms, "ms"))
    gates.append(Gate.at_most("latency.error_rate", summary["error_rate"] * 100,
                              slo.error_rate.fraction * 100, "%"))
    if slo.min_throughput is not None:
        gates.append(Gate.at_least("latency.throughput", summary["throughput_rps"],
                                   slo.min_throughput.per_second, "/s"))
    # The latency budget against reality: the queue time the server observed.
    gates.append(Gate.at_most("latency.server_queue", metrics["server_queue_us"] / 1e3,
                              budget_ms, "ms"))
    batches = server_view.batch_executions
    preferred = spec.server.batching.preferred_batch_sizes
    reached = {str(size): batches.get(size, 0) > 0 for size in preferred}
    if stage.max_memory_growth is not None and memory_before:
        sent = sum(w.completed + w.error_count for w in outcome.windows)
        grown = memory_growth.growth(memory_before, memory, sent)
        metrics.update(grown.metrics() if grown else {})
        gates.append(memory_growth.gate(grown, stage.max_memory_growth))
    details: dict[str, Any] = {
        "errors_by_kind": dict(measured.errors),
        "thin_percentiles": measured.thin_percentiles(),
        "batch_executions": {str(k): v for k, v in sorted(batches.items())},
        "preferred_batch_sizes": preferred,
        "preferred_reached": reached,
        "stabilised": outcome.stable,
        "window_s": window_s,
        "windows": [{"throughput_rps": w.throughput, "p99_ms": w.percentile_ms(99)}
                    for w in outcome.windows],
        "protocol": stage.protocol,
        **memory_notes,
    }
    message = (f"p50 {summary['p50_ms']:.2f}ms p99 {summary['p99_ms']:.2f}ms at "
               f"{summary['throughput_rps']:.0f}/s, {int(summary['errors'])} errors; server "
               f"queue {metrics['server_queue_us'] / 1e3:.2f}ms, avg batch "
               f"{metrics['server_avg_batch_size']:.1f}")
    if "server_rss_mb" in memory:
        message += f"; RSS {memory['server_rss_mb']:.0f} MiB"
    never = [size for size, hit in reached.items() if not hit]
    if never:
        message += f"; preferred batch size(s) {', '.join(never)} never formed"
    if not outcome.stable:
        message += f" (not stabilised after {len(outcome.windows)} windows)"
    if "p99" in measured.thin_percentiles():
        message += f" (p99 from only {int(summary['requests'])} requests)"
    return StageResult.judged(NAME, gates, message, metrics, details)
