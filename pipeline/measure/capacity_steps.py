"""The capacity search against a running server: each rate step as an open-loop window
with a hard end, and the waits for a backlog to drain between them."""

from __future__ import annotations

import asyncio
import math

from pipeline.context import RunContext
from pipeline.gates.order_stats import quantile_interval_us, samples_for_upper_bound
from pipeline.measure import capacity
from pipeline.measure.drain import Drained, until_prompt
from pipeline.measure.loadgen import HardEnd, LoadResult, Phase, Target
from pipeline.measure.windows import open_window
from pipeline.servers.base import ModelServer
from pipeline.spec.models import SaturationStage, SloSpec

# The progress view shows the steps under this stage.
STAGE = "saturation"
# A capacity step's requests time out at this multiple of slo.p99. Any timeout above the
# SLO gives the same p99 verdict (failures are censored at it, above the SLO either way);
# a few times the SLO still tells a slow answer from none, and bounds each step.
STEP_TIMEOUT_SLO_MULTIPLE = 4.0
UNANSWERED = ("unanswered", "unsent")
# In flight during a capacity step, at most: twice what the SLO allows on average (Little's
# law: more means a mean latency over twice the SLO, a miss anyway), and never more than
# MAX_STEP_IN_FLIGHT. Requests over it count as errors. Triton's HTTP front end was seen to
# lose requests with ~1000+ connections open at once: they are never answered, and it then
# waits for their connections when it stops, until it is killed.
MAX_STEP_IN_FLIGHT = 512
MIN_STEP_IN_FLIGHT = 32


def measure_capacity(ctx: RunContext, server: ModelServer, target: Target,
                     stage: SaturationStage, slo: SloSpec,
                     knee_rps: float) -> capacity.CapacitySearch:
    """The capacity search's open-loop steps and backlog waits against `server`."""
    limits = capacity.Limits(slo.p99.ms, slo.error_rate.fraction)
    request_timeout_s = ctx.loaded.spec.stages.latency.request_timeout.seconds
    timeout_s = min(STEP_TIMEOUT_SLO_MULTIPLE * slo.p99.seconds, request_timeout_s)
    confidence = ctx.loaded.spec.stages.latency.verdict.confidence.fraction

    def step(rate: float, duration_s: float, hold: bool) -> capacity.StepOutcome:
        # Two halves at the same rate: a growing queue shows as a later median in the
        # second. open_loop measures the drain after the phase named "burst".
        halves = [Phase("first", rate, duration_s / 2), Phase("burst", rate, duration_s / 2)]
        outcome = open_window(ctx, server, target, STAGE, halves,
                              f"capacity step at {rate:.0f}/s", "constant",
                              timeout_s=timeout_s, hard_end=HardEnd(
                                  duration_s + timeout_s, min(duration_s, request_timeout_s),
                                  math.floor(slo.error_rate.fraction * rate * duration_s)),
                              max_in_flight=step_in_flight(rate, slo.p99.seconds))
        first, second = outcome.phases["first"], outcome.phases["burst"]
        whole = LoadResult(0.0)
        whole.merge(first)
        whole.merge(second)
        return capacity.judge(capacity.StepMeasurement(
            rate, duration_s, whole.percentile_ms(99), first.percentile_ms(50),
            second.percentile_ms(50), whole.error_rate, int(whole.histogram.get_total_count()),
            outcome.drain_s, outcome.lag_p99_us / 1e3, outcome.client_bound,
            outcome.from_send.percentile_ms(99),
            sum(whole.errors[kind] for kind in UNANSWERED), outcome.lingered_s,
            p99_interval_ms(whole, confidence)), limits, on_bound=hold)

    def settle() -> Drained:
        # Bounded by the longest wait the spec accepts for one request.
        ctx.progress(STAGE, 0.0, request_timeout_s, "waiting for the backlog to drain")
        return asyncio.run(until_prompt(target, slo.p99.seconds, request_timeout_s))

    wanted = stage.capacity
    settings = capacity.SearchSettings(wanted.budget.seconds, wanted.step.seconds,
                                       wanted.hold_seconds, timeout_s, wanted.start.fraction,
                                       wanted.resolution.fraction,
                                       hold_min_samples=samples_for_upper_bound(0.99, confidence))
    search = capacity.find_capacity(step, settle, knee_rps, settings)
    ctx.require_server()
    return search


def p99_interval_ms(result: LoadResult,
                    confidence: float) -> tuple[float | None, float | None]:
    low, high = quantile_interval_us(result.histogram, 0.99, confidence)
    return (None if low is None else low / 1e3), (None if high is None else high / 1e3)


def step_in_flight(rate: float, slo_p99_s: float) -> int:
    wanted = math.ceil(2 * rate * slo_p99_s)
    return min(MAX_STEP_IN_FLIGHT, max(MIN_STEP_IN_FLIGHT, wanted))
