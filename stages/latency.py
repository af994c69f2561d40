"""latency: closed loop at the spec's concurrency after warm-up; gates from the SLO.

Next to the client's percentiles it records the server's own view of the same
window (queue vs compute time, formed batch sizes) and the memory of the
server's process tree after that warm traffic.
"""

from __future__ import annotations

from pipeline.context import RunContext
from pipeline.measure import closed_window, load_target
from pipeline.memory import process_tree_memory
from pipeline.results import Gate, StageResult

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
    before = server.stats()
    window = closed_window(ctx, server, target, NAME, stage.concurrency, stage.duration.seconds,
                           f"measuring at concurrency {stage.concurrency}")
    server_view = server.stats().since(before)
    ctx.require_server()
    memory = process_tree_memory(server.process.tree())
    metrics = {**window.summary(), **server_view.window_metrics(), **memory,
               "concurrency": float(stage.concurrency), "batch_size": float(stage.batch_size)}
    budget = slo.queue_budget()
    metrics["queue_budget_us"] = budget.us

    summary = window.summary()
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
    thin = window.thin_percentiles()
    details = {
        "errors_by_kind": dict(window.errors),
        "thin_percentiles": thin,
        "batch_executions": {str(k): v for k, v in sorted(server_view.batch_executions.items())},
        "preferred_batch_sizes": spec.server.batching.preferred_batch_sizes,
    }
    message = (f"p50 {summary['p50_ms']:.2f}ms p99 {summary['p99_ms']:.2f}ms at "
               f"{summary['throughput_rps']:.0f}/s, {int(summary['errors'])} errors; server "
               f"queue {metrics['server_queue_us'] / 1e3:.2f}ms, avg batch "
               f"{metrics['server_avg_batch_size']:.1f}; RSS {memory['server_rss_mb']:.0f} MiB")
    if "p99" in thin:
        message += f" (p99 from only {int(summary['requests'])} requests)"
    return StageResult.judged(NAME, gates, message, metrics, details)
