"""replay: the user's request log sent at its own arrival times, judged by the SLO.

One open-loop run over the whole log (pipeline.measure.replay): each logged request is sent
at its logged instant, shifted to the replay's start and divided by the speed, and its
latency counts from that instant, not from when it went out, so a server that falls behind
shows it in full (no coordinated omission). The gates are the SLO's, decided as the latency
stage decides them (replay.p99, replay.p95, replay.p50, replay.error_rate). The details hold
the rate offered and the latency in each time bucket (the report's chart) and how closely
the client kept the schedule. Unset in the spec, the stage is skipped without reading
anything.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pipeline import metric_names as m
from pipeline.context import RunContext
from pipeline.errors import UsageError
from pipeline.gates.latency import verdict_details
from pipeline.gates.replay import judged_windows, replay_gates, replay_verdicts
from pipeline.measure.load_result import LoadResult, merge_windows
from pipeline.measure.open_loop import OpenLoopResult
from pipeline.measure.replay import (
    ReplaySchedule,
    replay_schedule,
    replay_target,
    warmup_target,
)
from pipeline.measure.windows import closed_window, open_window
from pipeline.outcomes.replay import ReplayOutcome
from pipeline.spec.replay_log import read_replay_log
from pipeline.spec.request_data import RequestDataError
from pipeline.stage_result import StageResult, Status
from stages._load import load_workers_record, sender_for

NAME = "replay"
USES_SERVER = True


def run(ctx: RunContext) -> StageResult:
    spec = ctx.loaded.spec
    stage = spec.stages.replay
    if stage is None:
        return StageResult(NAME, Status.SKIPPED, "no stages.replay in the spec")
    server = ctx.require_server()
    try:
        log = read_replay_log(ctx.loaded.resolve(stage.log), stage.log, spec.model.inputs)
    except RequestDataError as error:   # validate refuses it; the file changed since
        raise UsageError(str(error)) from None
    schedule = replay_schedule(log.offsets, stage.speed.factor)
    target = replay_target(ctx.loaded, server, log)
    sender = sender_for(ctx, NAME)
    if stage.warmup.seconds > 0:
        closed_window(sender, server, warmup_target(target), spec.stages.latency.concurrency,
                      stage.warmup.seconds, f"warm-up for the replay of {stage.log}")
    outcome = open_window(sender, server, target, schedule.phases,
                          f"replay of {stage.log} at {stage.speed}", "constant",
                          plan=schedule.plan)
    buckets = [outcome.phases[phase.name] for phase in schedule.phases]
    pooled = merge_windows(buckets)
    alpha = 1 - spec.stages.latency.verdict.confidence.fraction
    verdicts = replay_verdicts(spec, judged_windows(buckets), pooled, alpha)
    gates = replay_gates(spec, verdicts, pooled, alpha)
    metrics = _outcome(pooled, outcome, schedule, stage.speed.factor)
    details: dict[str, Any] = {
        "log": stage.log, "speed": str(stage.speed), "bucket_s": schedule.bucket_s,
        "over_time": _over_time(schedule, buckets), "errors_by_kind": dict(pooled.errors),
        "payloads": "log" if log.requests is not None else "data",
        **verdict_details(verdicts, alpha)}
    if pooled.sizes:
        details["sizes"] = pooled.size_summary()
    workers = load_workers_record(ctx, NAME)
    if workers is not None:
        details["load_workers"] = workers
    result = StageResult.judged(NAME, gates, _message(metrics, outcome), metrics.to_json(),
                                details,
                                accept_inconclusive=spec.stages.latency.verdict.accept_inconclusive)
    if result.status is Status.FAILED and outcome.client_bound:
        result = replace(result, message=result.message + "; " + _behind(outcome))
    return result


def _outcome(pooled: LoadResult, outcome: OpenLoopResult, schedule: ReplaySchedule,
             speed: float) -> ReplayOutcome:
    summary = pooled.summary()
    span = schedule.plan[-1][0] if schedule.plan else 0.0
    lag = outcome.lag
    sent = lag.get_total_count()
    return ReplayOutcome(
        p50_ms=summary[m.P50_MS], p95_ms=summary[m.P95_MS], p99_ms=summary[m.P99_MS],
        p999_ms=summary[m.P999_MS], max_ms=summary[m.MAX_MS],
        requests=summary["requests"], errors=summary["errors"],
        error_rate=summary["error_rate"],
        throughput_rps=pooled.completed / span if span > 0 else float(pooled.completed),
        offered_rps=len(schedule.plan) / span if span > 0 else float(len(schedule.plan)),
        replay_s=span, speed=speed,
        schedule_lag_p99_ms=outcome.lag_p99_us / 1e3,
        schedule_lag_max_ms=float(lag.get_max_value()) / 1e3 if sent else None,
        client_bound=1.0 if outcome.client_bound else 0.0)


def _over_time(schedule: ReplaySchedule, buckets: list[LoadResult]) -> list[dict[str, float]]:
    """Per time bucket: its start (s), the rate offered, what was answered, its latency."""
    width = schedule.bucket_s
    return [{"start_s": index * width, "offered_rps": offered / width,
             "answered_rps": bucket.completed / width, m.ERRORS: float(bucket.error_count),
             m.P50_MS: bucket.percentile_ms(50), m.P99_MS: bucket.percentile_ms(99)}
            for index, (offered, bucket) in enumerate(zip(schedule.offered(), buckets,
                                                          strict=True))]


def _behind(outcome: OpenLoopResult) -> str:
    return (f"the client fell behind the log (schedule lag p99 "
            f"{outcome.lag_p99_us / 1e3:.2f}ms): the latencies count that lag too "
            "(from each logged instant); more stages.replay.workers send it on time")


def _message(metrics: ReplayOutcome, outcome: OpenLoopResult) -> str:
    message = (f"replayed {int(metrics.requests or 0)} requests over {metrics.replay_s or 0:.1f}s "
               f"({metrics.offered_rps or 0:.0f}/s offered): p50 {metrics.p50_ms or 0:.2f}ms "
               f"p99 {metrics.p99_ms or 0:.2f}ms, {int(metrics.errors or 0)} errors; "
               f"schedule lag p99 {outcome.lag_p99_us / 1e3:.3f}ms")
    if outcome.client_bound:
        message += " (" + _behind(outcome) + ")"
    return message
