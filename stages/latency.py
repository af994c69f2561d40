"""latency: closed loop at the spec's concurrency after warm-up; gates from the SLO.

The measurement runs in windows until every gate it can stop on (the percentiles and the
error rate) is decided on its bound (pipeline.gates.percentile_verdict,
pipeline.statistics.sequential), or until the cap, when an undecided gate is inconclusive.
Next to the client's percentiles it records the server's own view of exactly those windows
(queue vs compute time, formed batch sizes), the memory of the server's process tree
sampled through the windows, and, where requests come in several sizes (model.sizes, a
data file), p50 and p99 per size (details `sizes`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from pipeline import metric_names as m
from pipeline.context import RunContext
from pipeline.gates import error_rate, memory_growth, stall
from pipeline.gates.latency import (
    Judgement,
    client_limited,
    interval_metrics,
    judge_windows,
    latency_gates,
    verdict_details,
    window_plan,
    window_seconds,
)
from pipeline.measure.error_example import error_example
from pipeline.measure.load_result import merge_windows
from pipeline.measure.loadgen import LoadResult
from pipeline.measure.targets import spec_target
from pipeline.measure.windows import (
    ClosedWindows,
    closed_window,
    closed_windows_until_decided,
    server_memory,
)
from pipeline.outcomes.latency import LatencyOutcome
from pipeline.servers.base import ModelServer, ServerStats
from pipeline.spec.models import Spec
from pipeline.stage_result import Gate, StageResult
from pipeline.statistics.sequential import WindowRun
from pipeline.statistics.stability import settled
from stages._load import load_workers_record, sender_for

NAME = "latency"
USES_SERVER = True


def run(ctx: RunContext) -> StageResult:
    started = time.perf_counter()  # the time to a verdict includes the warm-up
    spec = ctx.loaded.spec
    stage = spec.stages.latency
    server = ctx.require_server()
    target = spec_target(ctx.loaded, server)
    sender = sender_for(ctx, NAME)
    warmup = closed_window(sender, server, target, stage.concurrency, stage.warmup.seconds,
                           f"warm-up at concurrency {stage.concurrency}")
    ctx.quiet(NAME)      # a server started ahead (the live release) is up before windows
    memory_before = memory_growth.baseline(server)
    plan = window_plan(spec)
    window_s = window_seconds(spec, warmup.throughput)
    with memory_growth.RssSampler(lambda: memory_growth.model_processes(server)) as rss:
        measured_windows = closed_windows_until_decided(
            sender, server, target, stage.concurrency,
            lambda windows, alpha: judge_windows(spec, windows, merge_windows(windows),
                                                 window_s, alpha),
            client_limited, plan, window_s)
    verdict_s = time.perf_counter() - started
    outcome = measured_windows.run
    measured = merge_windows(outcome.windows)
    judgement = outcome.last or judge_windows(spec, outcome.windows, measured, window_s,
                                              plan.last_alpha)
    ctx.require_server()
    memory, memory_notes = server_memory(server)
    stable = settled(outcome.windows, len(outcome.windows), stage.stability.tolerance.fraction)
    window_metrics = measured_windows.server_view.window_metrics()
    measured_outcome = replace(
        LatencyOutcome.from_json({**measured.summary(), **window_metrics, **memory,
                                  **interval_metrics(judgement.verdicts)}),
        concurrency=float(stage.concurrency), batch_size=float(stage.batch_size),
        windows=float(len(outcome.measured)), windows_kept=float(len(outcome.kept)),
        stabilised=1.0 if stable else 0.0, verdict_s=verdict_s,
        queue_budget_us=spec.slo.queue_budget().ms * 1e3,
        queue_mean_budget_us=None if spec.slo.queue_mean is None
        else spec.slo.queue_mean.ms * 1e3)
    gates = latency_gates(spec, judgement, outcome.windows, window_s, window_metrics)
    memory_gates, measured_outcome = _memory_gates(
        spec, server, memory_before, memory, rss.samples, measured_windows, measured_outcome)
    gates += memory_gates
    details = _details(spec, measured, judgement, measured_windows, stable, memory_notes)
    if measured.sizes:
        details["sizes"] = measured.size_summary()
    workers = load_workers_record(ctx, NAME)
    if workers is not None:
        details["load_workers"] = workers
    message = _message(measured, measured_outcome, details["preferred_reached"], stable,
                       outcome)
    gates = _causes_first(gates)
    result = StageResult.judged(NAME, gates, message, measured_outcome.to_json(), details,
                                accept_inconclusive=stage.verdict.accept_inconclusive)
    if measured.errors:
        example = error_example(target)
        if example is not None:
            result.details["error_example"] = example
            result.message += f"; requests sent again after the load: {example}"
    return result


# Failed, these lead, in this order: a stall and failed requests drag the percentiles and
# the throughput down with them, and are the cause to read first.
CAUSES = (stall.GATE, error_rate.GATE)


def _causes_first(gates: list[Gate]) -> list[Gate]:
    causes = sorted((gate for gate in gates if gate.name in CAUSES and not gate.passed),
                    key=lambda gate: CAUSES.index(gate.name))
    return causes + [gate for gate in gates if gate not in causes]


def _memory_gates(spec: Spec, server: ModelServer, before: dict[str, float],
                  after: dict[str, float], samples: list[tuple[float, float]],
                  windows: ClosedWindows[Judgement], measured: LatencyOutcome,
                  ) -> tuple[list[Gate], LatencyOutcome]:
    """The leak rate and the total growth (none for a server that is not ours to see),
    and the outcome with what they measured."""
    stage = spec.stages.latency
    if not before:
        return [], measured
    gates = []
    rate_limit = memory_growth.rate_limit_for(stage.memory_growth_rate)
    if rate_limit is not None:
        rate = memory_growth.leak_rate_of(
            samples, windows.spans, 1 - stage.verdict.confidence.fraction)
        if rate is not None:
            measured = replace(measured, extra={**measured.extra, **rate.metrics()})
        gates.append(memory_growth.rate_gate(rate, rate_limit))
    total_limit = memory_growth.limit_for(stage.max_memory_growth, spec.server.kind)
    if total_limit is not None:
        before_mb, after_mb = before.get(m.SERVER_RSS_MB), after.get(m.SERVER_RSS_MB)
        if before_mb is not None and after_mb is not None:
            measured = replace(measured, server_rss_before_mb=before_mb,
                               memory_growth_mb=after_mb - before_mb)
        gates.append(memory_growth.total_gate(before_mb, after_mb, total_limit))
    return gates, measured


def _details(spec: Spec, measured: LoadResult, judgement: Judgement,
             windows: ClosedWindows[Judgement], stable: bool,
             notes: dict[str, Any]) -> dict[str, Any]:
    preferred = spec.server.batching.preferred_batch_sizes
    reached = {str(size): windows.server_view.batch_executions.get(size, 0) > 0
               for size in preferred}
    return {**_window_details(measured, windows.run, windows.server_view, preferred, reached,
                              stable, windows.window_s),
            **verdict_details(judgement.verdicts, judgement.alpha),
            "protocol": spec.stages.latency.protocol, **notes}


def _window_details(measured: LoadResult, outcome: WindowRun[LoadResult, Judgement],
                    server_view: ServerStats, preferred: list[int], reached: dict[str, bool],
                    stable: bool, window_s: float) -> dict[str, Any]:
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
        "window_notes": outcome.notes(),
        "windows": [{m.THROUGHPUT_RPS: w.throughput, m.P99_MS: w.percentile_ms(99),
                     m.P95_MS: w.percentile_ms(95), m.P50_MS: w.percentile_ms(50),
                     m.REQUESTS: w.requests, "kept": index in outcome.kept,
                     "client_wait_ms": None if w.client_wait_s is None
                     else w.client_wait_s * 1e3}
                    for index, w in enumerate(outcome.measured)],
    }


def _message(measured: LoadResult, metrics: LatencyOutcome, reached: dict[str, bool],
             stable: bool, outcome: WindowRun[LoadResult, Judgement]) -> str:
    summary = measured.summary()
    message = (f"p50 {summary[m.P50_MS]:.2f}ms p99 {summary[m.P99_MS]:.2f}ms at "
               f"{summary[m.THROUGHPUT_RPS]:.0f}/s, {int(summary[m.ERRORS])} errors; server "
               f"queue {_shown(metrics.server_queue_us, 1e-3, '.2f')}ms, avg batch "
               f"{_shown(metrics.server_avg_batch_size, 1.0, '.1f')}")
    if metrics.server_rss_mb is not None:
        message += f"; RSS {metrics.server_rss_mb:.0f} MiB"
    never = [size for size, hit in reached.items() if not hit]
    if never:
        message += f"; preferred batch size(s) {', '.join(never)} never formed"
    if not stable:
        message += f" (not stabilised over {len(outcome.windows)} windows)"
    if not outcome.decided:
        message += f" (undecided after {len(outcome.windows)} windows, the cap)"
    if "p99" in measured.thin_percentiles():
        message += f" (p99 from only {int(summary[m.REQUESTS])} requests)"
    if measured.sizes:
        message += "; by size p50/p99 " + ", ".join(
            f"{size}: {row[m.P50_MS]:.2f}/{row[m.P99_MS]:.2f}ms"
            for size, row in measured.size_summary().items())
    return message


def _shown(value: float | None, scale: float, form: str) -> str:
    """A server counter for the message ("n/a" when the server did not report it)."""
    return "n/a" if value is None else format(value * scale, form)
