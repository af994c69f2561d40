"""saturation: find the knee under the SLO, then hit the server with a burst."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from pipeline.context import RunContext
from pipeline.knee import ProbeOutcome, find_knee
from pipeline.load import Phase
from pipeline.measure import closed_window, load_target, open_window
from pipeline.results import Gate, StageResult, Status

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
    gates: list[Gate] = []
    details: dict[str, Any] = {"probes": [asdict(p) for p in search.probes],
                               "stop_reason": search.stop_reason}
    knee = search.knee
    gates.append(Gate.at_least("saturation.knee_concurrency",
                               float(knee.concurrency if knee else 0), 1.0))
    if knee is not None:
        metrics.update(knee_concurrency=float(knee.concurrency),
                       knee_throughput_rps=knee.throughput_rps, knee_p99_ms=knee.p99_ms)
        if slo.min_throughput is not None:
            gates.append(Gate.at_least("saturation.knee_throughput", knee.throughput_rps,
                                       slo.min_throughput.per_second, "/s"))
    message = (f"knee at concurrency {knee.concurrency}: {knee.throughput_rps:.0f}/s with p99 "
               f"{knee.p99_ms:.1f}ms ({search.stop_reason})" if knee else
               f"no load met the SLO ({search.stop_reason})")

    if stage.burst is not None and knee is not None:
        burst = stage.burst
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
        message += (f"; burst {burst.rate}: p99 {during['p99_ms']:.1f}ms (before "
                    f"{before['p99_ms']:.1f}ms), drained in {outcome.drain_s:.2f}s")
        if outcome.client_bound:
            message += " [client fell behind its schedule: burst figures invalid]"
    return StageResult.judged(NAME, gates, message, metrics, details) if knee else \
        StageResult(NAME, Status.FAILED, message, metrics=metrics, gates=gates, details=details)
