"""saturation: find the knee under the SLO, the sustainable rate, then a burst."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from pipeline import metric_names as m
from pipeline.context import RunContext
from pipeline.gates.capacity import capacity_gate
from pipeline.measure.capacity_steps import measure_capacity
from pipeline.measure.distributed.merge import behind
from pipeline.measure.loadgen import Target
from pipeline.measure.sender import LoadSender
from pipeline.measure.targets import spec_target
from pipeline.measure.windows import burst_window, closed_window
from pipeline.outcomes.saturation import SaturationOutcome
from pipeline.servers.base import ModelServer
from pipeline.spec.models import SaturationStage, SloSpec
from pipeline.stage_result import Gate, StageResult, Status
from pipeline.statistics.capacity import CapacitySearch
from pipeline.statistics.capacity_figure import CapacityFigure
from pipeline.statistics.knee import KneeSearch, ProbeOutcome, find_knee
from stages._load import load_workers_record, sender_for

NAME = "saturation"
USES_SERVER = True

def run(ctx: RunContext) -> StageResult:
    spec = ctx.loaded.spec
    stage = spec.stages.saturation
    slo = spec.slo
    if not stage.enabled:
        return StageResult(NAME, Status.SKIPPED, "stages.saturation.enabled is false")
    server = ctx.require_server()
    target = spec_target(ctx.loaded, server, "saturation")
    sender = sender_for(ctx, NAME)

    def probe(concurrency: int) -> ProbeOutcome:
        window = closed_window(sender, server, target, concurrency,
                               stage.probe_duration.seconds, f"probe at concurrency {concurrency}")
        summary = window.summary()
        passed = (summary[m.P99_MS] <= slo.p99.ms
                  and window.error_rate <= slo.error_rate.fraction
                  and window.completed > 0)
        return ProbeOutcome(concurrency, summary[m.THROUGHPUT_RPS], summary[m.P99_MS],
                            window.error_rate, passed)

    search = find_knee(probe, stage.max_concurrency, measured=_latency_load(ctx, slo))
    details: dict[str, Any] = {"probes": [asdict(p) for p in search.probes],
                               "stop_reason": search.stop_reason, "knee_bound": search.bound}
    gates, measured = _knee_gates(search, slo)
    best = search.best
    message = _knee_message(search)
    if best is not None and stage.capacity.enabled:
        capacity = measure_capacity(sender, server, target, stage, slo, best.throughput_rps,
                                    spec.stages.latency.verdict.confidence.fraction)
        text, measured = _record_capacity(capacity, measured, details)
        message += "; " + text
        gate = capacity_gate(capacity, slo.min_throughput.per_second
                             if slo.min_throughput else None)
        if gate is not None:
            gates.append(gate)
    if stage.burst is not None and best is not None:
        text, measured = _burst(sender, server, target, stage, measured, details)
        message += text
    message += _load_workers(ctx, details)
    if best is None:
        return StageResult(NAME, Status.FAILED, message, metrics=measured.to_json(),
                           gates=gates, details=details)
    return StageResult.judged(NAME, gates, message, measured.to_json(), details,
                              accept_inconclusive=stage.capacity.accept_inconclusive)


def _latency_load(ctx: RunContext, slo: SloSpec) -> ProbeOutcome | None:
    """The latency stage's window as the knee's first load, when that stage passed: it
    measured the same closed loop for longer than a probe does."""
    latency = next((result for result in ctx.results if result.name == "latency"), None)
    if latency is None or latency.status is not Status.PASSED:
        return None
    metrics = latency.metrics
    if not all(key in metrics for key in (m.CONCURRENCY, m.P99_MS, m.THROUGHPUT_RPS,
                                          m.ERROR_RATE)):
        return None
    passed = (metrics[m.P99_MS] <= slo.p99.ms and metrics[m.ERROR_RATE] <= slo.error_rate.fraction
              and metrics[m.THROUGHPUT_RPS] > 0)
    return ProbeOutcome(int(metrics[m.CONCURRENCY]), metrics[m.THROUGHPUT_RPS],
                        metrics[m.P99_MS], metrics[m.ERROR_RATE], passed,
                        measured_by="latency stage")


def _knee_gates(search: KneeSearch, slo: SloSpec) -> tuple[list[Gate], SaturationOutcome]:
    best = search.best
    gates = [Gate.at_least("saturation.knee_concurrency",
                           float(best.concurrency if best else 0), 1.0)]
    measured = SaturationOutcome(probes=float(len(search.probes)))
    if best is None:
        return gates, measured
    measured = replace(measured, knee_concurrency=float(best.concurrency),
                       knee_throughput_rps=best.throughput_rps, knee_p99_ms=best.p99_ms,
                       knee_lower_bound=1.0 if search.bound == "lower" else 0.0)
    if slo.min_throughput is not None:
        # A lower bound at or above the minimum proves the minimum; it is not a knee.
        name = "saturation.knee_throughput" if search.bound == "exact" else \
            "saturation.throughput_lower_bound"
        gates.append(Gate.at_least(name, best.throughput_rps, slo.min_throughput.per_second,
                                   "/s"))
    return gates, measured


def _knee_message(search: KneeSearch) -> str:
    best = search.best
    if best is None:
        return f"no load met the SLO ({search.stop_reason})"
    if search.bound == "lower":
        return (f"no knee up to concurrency {best.concurrency}: capacity ≥ "
                f"{best.throughput_rps:.0f}/s with p99 {best.p99_ms:.1f}ms (cap reached)")
    return (f"knee at concurrency {best.concurrency}: {best.throughput_rps:.0f}/s with p99 "
            f"{best.p99_ms:.1f}ms ({search.stop_reason})")


def _record_capacity(search: CapacitySearch, measured: SaturationOutcome,
                     details: dict[str, Any]) -> tuple[str, SaturationOutcome]:
    details.update(capacity_steps=[asdict(step) | {"passed": step.passed}
                                   for step in search.steps],
                   capacity_stop_reason=search.stop_reason,
                   capacity_start_rps=search.start_rps, capacity_bound=search.bound)
    if search.threshold_outcome is not None:
        details.update(capacity_threshold_outcome=search.threshold_outcome,
                       capacity_threshold_reason=search.threshold_reason)
    measured = replace(measured, capacity_steps=float(len(search.steps)),
                       capacity_search_s=search.spent_s)
    best, interval = search.best, search.interval_rps
    if best is None or interval is None:
        if search.bound == "none":
            return (f"no open-loop rate met the SLO, down to {search.lowest_rate_rps or 0:.0f}/s "
                    f"({search.stop_reason})"), measured
        return f"capacity unknown: no rate confirmed ({search.stop_reason})", measured
    measured = replace(measured, capacity_rps=best.rate_rps, capacity_p99_ms=best.p99_ms,
                       capacity_lower_bound=1.0 if search.bound == "lower" else 0.0)
    details["capacity_interval_rps"] = list(interval)
    figure = CapacityFigure.of(search)
    if figure is not None:
        details["capacity"] = figure.to_json()
    if best.p99_interval_ms is not None:
        details["capacity_p99_interval_ms"] = list(best.p99_interval_ms)
    lower = search.bound == "lower"
    why = f"lower bound, capped by {search.limited_by}: " if lower else \
        f"fails at {interval[1]:.0f}/s; "
    return (f"capacity {'≥ ' if lower else ''}{best.rate_rps:.0f}/s at p99 {best.p99_ms:.1f}ms "
            f"({why}{search.stop_reason})"), measured


def _burst(sender: LoadSender, server: ModelServer, target: Target, stage: SaturationStage,
           measured: SaturationOutcome, details: dict[str, Any],
           ) -> tuple[str, SaturationOutcome]:
    burst = stage.burst
    assert burst is not None
    outcome, base = burst_window(sender, server, target, burst)
    during = outcome.phases["burst"].summary()
    before = outcome.phases["before"].summary()
    measured = replace(measured, burst_rate_rps=burst.rate.per_second,
                       burst_base_rate_rps=base, burst_p99_ms=during[m.P99_MS],
                       burst_base_p99_ms=before[m.P99_MS],
                       burst_errors=sum(r.error_count for r in outcome.phases.values()),
                       burst_drain_s=outcome.drain_s,
                       burst_schedule_lag_p99_ms=outcome.lag_p99_us / 1e3)
    details["burst_valid"] = not outcome.client_bound
    message = (f"; burst {burst.rate}: p99 {during[m.P99_MS]:.1f}ms (before "
               f"{before[m.P99_MS]:.1f}ms), drained in {outcome.drain_s:.2f}s")
    if outcome.client_bound:
        message += " [client fell behind its schedule: burst figures invalid]"
    return message, measured


def _load_workers(ctx: RunContext, details: dict[str, Any]) -> str:
    """The load workers' rows (when sharded), and those that fell behind, named."""
    workers = load_workers_record(ctx, NAME)
    if workers is None:
        return ""
    details["load_workers"] = workers
    late = behind(workers)
    return f"; load {', '.join(late)} fell behind its schedule" if late else ""
