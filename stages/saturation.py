"""saturation: find the knee under the SLO, the sustainable rate, then a burst."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pipeline.context import RunContext
from pipeline.measure.capacity import (
    CapacitySearch,
    Limits,
    SearchSettings,
    StepMeasurement,
    StepOutcome,
    find_capacity,
    judge,
)
from pipeline.measure.knee import KneeSearch, ProbeOutcome, find_knee
from pipeline.measure.loadgen import LoadResult, Phase, Target
from pipeline.measure.windows import closed_window, load_target, open_window
from pipeline.results import Gate, StageResult, Status
from pipeline.servers.base import ModelServer
from pipeline.spec.models import SaturationStage, SloSpec

NAME = "saturation"
USES_SERVER = True


def run(ctx: RunContext) -> StageResult:
    spec = ctx.loaded.spec
    stage = spec.stages.saturation
    slo = spec.slo
    if not stage.enabled:
        return StageResult(NAME, Status.SKIPPED, "stages.saturation.enabled is false")
    server = ctx.require_server()
    target = load_target(ctx, server)

    def probe(concurrency: int) -> ProbeOutcome:
        window = closed_window(ctx, server, target, NAME, concurrency,
                               stage.probe_duration.seconds, f"probe at concurrency {concurrency}")
        summary = window.summary()
        passed = (summary["p99_ms"] <= slo.p99.ms
                  and window.error_rate <= slo.error_rate.fraction
                  and window.completed > 0)
        return ProbeOutcome(concurrency, summary["throughput_rps"], summary["p99_ms"],
                            window.error_rate, passed)

    search = find_knee(probe, stage.max_concurrency)
    metrics: dict[str, float] = {"probes": float(len(search.probes))}
    details: dict[str, Any] = {"probes": [asdict(p) for p in search.probes],
                               "stop_reason": search.stop_reason, "knee_bound": search.bound}
    gates = _knee_gates(search, slo, metrics)
    best = search.best
    message = _knee_message(search)
    if best is not None and stage.capacity.enabled:
        capacity = _capacity(ctx, server, target, stage, slo, best.throughput_rps)
        message += "; " + _record_capacity(capacity, metrics, details)
        if slo.min_throughput is not None:
            gates.append(Gate.at_least("saturation.capacity_rps", metrics.get("capacity_rps", 0.0),
                                       slo.min_throughput.per_second, "/s"))
    if stage.burst is not None and best is not None:
        message += _burst(ctx, server, target, stage, metrics, details)
    return StageResult.judged(NAME, gates, message, metrics, details) if best else \
        StageResult(NAME, Status.FAILED, message, metrics=metrics, gates=gates, details=details)


def _knee_gates(search: KneeSearch, slo: SloSpec, metrics: dict[str, float]) -> list[Gate]:
    best = search.best
    gates = [Gate.at_least("saturation.knee_concurrency",
                           float(best.concurrency if best else 0), 1.0)]
    if best is None:
        return gates
    metrics.update(knee_concurrency=float(best.concurrency),
                   knee_throughput_rps=best.throughput_rps, knee_p99_ms=best.p99_ms,
                   knee_lower_bound=1.0 if search.bound == "lower" else 0.0)
    if slo.min_throughput is not None:
        # A lower bound at or above the minimum proves the minimum; it is not a knee.
        name = "saturation.knee_throughput" if search.bound == "exact" else \
            "saturation.throughput_lower_bound"
        gates.append(Gate.at_least(name, best.throughput_rps, slo.min_throughput.per_second,
                                   "/s"))
    return gates


def _knee_message(search: KneeSearch) -> str:
    best = search.best
    if best is None:
        return f"no load met the SLO ({search.stop_reason})"
    if search.bound == "lower":
        return (f"no knee up to concurrency {best.concurrency}: capacity ≥ "
                f"{best.throughput_rps:.0f}/s with p99 {best.p99_ms:.1f}ms (cap reached)")
    return (f"knee at concurrency {best.concurrency}: {best.throughput_rps:.0f}/s with p99 "
            f"{best.p99_ms:.1f}ms ({search.stop_reason})")


def _capacity(ctx: RunContext, server: ModelServer, target: Target, stage: SaturationStage,
              slo: SloSpec, start_rps: float) -> CapacitySearch:
    limits = Limits(slo.p99.ms, slo.error_rate.fraction)

    def step(rate: float, duration_s: float) -> StepOutcome:
        # Two halves at the same rate: a growing queue shows as a later median in the
        # second. open_loop measures the drain after the phase named "burst".
        halves = [Phase("first", rate, duration_s / 2), Phase("burst", rate, duration_s / 2)]
        outcome = open_window(ctx, server, target, NAME, halves,
                              f"capacity step at {rate:.0f}/s", "constant")
        first, second = outcome.phases["first"], outcome.phases["burst"]
        whole = LoadResult(0.0)
        whole.merge(first)
        whole.merge(second)
        return judge(StepMeasurement(
            rate, duration_s, whole.percentile_ms(99), first.percentile_ms(50),
            second.percentile_ms(50), whole.error_rate, int(whole.histogram.get_total_count()),
            outcome.drain_s, outcome.lag_p99_us / 1e3, outcome.client_bound,
            outcome.from_send.percentile_ms(99)), limits)

    settings = SearchSettings(stage.capacity.budget.seconds, stage.capacity.step.seconds,
                              stage.capacity.resolution.fraction)
    return find_capacity(step, start_rps, settings)


def _record_capacity(search: CapacitySearch, metrics: dict[str, float],
                     details: dict[str, Any]) -> str:
    details.update(capacity_steps=[asdict(step) | {"passed": step.passed}
                                   for step in search.steps],
                   capacity_stop_reason=search.stop_reason,
                   capacity_start_rps=search.start_rps)
    metrics["capacity_steps"] = float(len(search.steps))
    best, interval = search.best, search.interval_rps
    if best is None or interval is None:
        details["capacity_bound"] = "none"
        return f"no open-loop rate met the SLO ({search.stop_reason})"
    metrics.update(capacity_rps=best.rate_rps, capacity_p99_ms=best.p99_ms,
                   capacity_lower_bound=1.0 if search.bound == "lower" else 0.0)
    details.update(capacity_bound=search.bound, capacity_interval_rps=list(interval))
    if search.bound == "lower":
        return (f"capacity ≥ {best.rate_rps:.0f}/s at p99 {best.p99_ms:.1f}ms "
                f"(lower bound: {search.stop_reason})")
    return (f"capacity {best.rate_rps:.0f}/s at p99 {best.p99_ms:.1f}ms "
            f"(fails at {interval[1]:.0f}/s; {search.stop_reason})")


def _burst(ctx: RunContext, server: ModelServer, target: Target, stage: SaturationStage,
           metrics: dict[str, float], details: dict[str, Any]) -> str:
    burst = stage.burst
    assert burst is not None
    base = burst.base_rate.per_second if burst.base_rate else burst.rate.per_second / 10
    settle = burst.settle.seconds
    after = max(settle, 2 * burst.duration.seconds)
    phases = [Phase("before", base, settle),
              Phase("burst", burst.rate.per_second, burst.duration.seconds),
              Phase("after", base, after)]
    outcome = open_window(ctx, server, target, NAME, phases,
                          f"burst {burst.rate} for {burst.duration}", burst.arrivals)
    during = outcome.phases["burst"].summary()
    before = outcome.phases["before"].summary()
    metrics.update(burst_rate_rps=burst.rate.per_second, burst_base_rate_rps=base,
                   burst_p99_ms=during["p99_ms"], burst_base_p99_ms=before["p99_ms"],
                   burst_errors=sum(r.error_count for r in outcome.phases.values()),
                   burst_drain_s=outcome.drain_s,
                   burst_schedule_lag_p99_ms=outcome.lag_p99_us / 1e3)
    details["burst_valid"] = not outcome.client_bound
    message = (f"; burst {burst.rate}: p99 {during['p99_ms']:.1f}ms (before "
               f"{before['p99_ms']:.1f}ms), drained in {outcome.drain_s:.2f}s")
    if outcome.client_bound:
        message += " [client fell behind its schedule: burst figures invalid]"
    return message
