"""The capacity search against a running server: each rate step as an open-loop window
with a hard end, and the waits for a backlog to drain between them."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

from pipeline.errors import ServerError
from pipeline.measure.drain import until_prompt
from pipeline.measure.loadgen import HardEnd, LoadResult, Phase, Target
from pipeline.measure.open_loop import OpenLoopResult
from pipeline.measure.sender import LoadSender
from pipeline.measure.windows import open_window
from pipeline.servers.base import ModelServer
from pipeline.spec.models import SaturationStage, SloSpec
from pipeline.statistics import capacity
from pipeline.statistics.capacity import Drained
from pipeline.statistics.capacity_hold import Block
from pipeline.statistics.order_stats import quantile_interval_us, samples_for_upper_bound

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


def measure_capacity(sender: LoadSender, server: ModelServer, target: Target,
                     stage: SaturationStage, slo: SloSpec, knee_rps: float,
                     confidence: float) -> capacity.CapacitySearch:
    """The capacity search's open-loop steps and backlog waits against `server`, its
    verdicts at `confidence`. A step's requests time out at the sooner of a few times the
    SLO and the sender's timeout; ServerError if the server is gone at the end."""
    limits = capacity.Limits(slo.p99.ms, slo.error_rate.fraction)
    request_timeout_s = sender.timeout_s
    timeout_s = min(STEP_TIMEOUT_SLO_MULTIPLE * slo.p99.seconds, request_timeout_s)
    limits = replace(limits, confidence=confidence)
    threshold = slo.min_throughput.per_second if slo.min_throughput is not None else None

    def step(rate: float, duration_s: float, hold: bool) -> capacity.StepOutcome:
        parts = hold_blocks if hold else 2
        outcome = open_window(sender, server, target, step_phases(rate, duration_s, parts),
                              f"capacity {'hold' if hold else 'step'} at {rate:.0f}/s",
                              "constant", timeout_s=timeout_s, hard_end=HardEnd(
                                  duration_s + timeout_s, min(duration_s, request_timeout_s),
                                  error_cutoff(rate * duration_s * (parts - 1) / parts
                                               if hold else rate * duration_s,
                                               slo.error_rate.fraction,
                                               confidence if hold else None),
                                  warmup_phases=1 if hold else 0),
                              max_in_flight=step_in_flight(rate, slo.p99.seconds))
        return capacity.judge(step_measurement(rate, duration_s, outcome, hold, confidence),
                              limits, on_bound=hold)

    def settle() -> Drained:
        # Bounded by the longest wait the spec accepts for one request.
        sender.progress(0.0, request_timeout_s, "waiting for the backlog to drain")
        return asyncio.run(until_prompt(target, slo.p99.seconds, request_timeout_s))

    settings = search_settings(stage, timeout_s, confidence, knee_rps, threshold)
    hold_blocks = settings.blocks
    search = capacity.find_capacity(step, settle, knee_rps, settings, threshold_rps=threshold,
                                    limits=limits)
    if not server.alive():
        raise ServerError(server.describe_death())
    return search


def search_settings(stage: SaturationStage, timeout_s: float, confidence: float,
                    knee_rps: float, threshold: float | None) -> capacity.SearchSettings:
    """The spec's search settings; without a budget there, one that fits the rate: room for
    the threshold hold, four steps and two holds (`SearchSettings.needed_budget`)."""
    wanted = stage.capacity
    settings = capacity.SearchSettings(0.0, wanted.step.seconds, wanted.hold_seconds,
                                       timeout_s, wanted.start.fraction,
                                       wanted.resolution.fraction,
                                       hold_min_samples=samples_for_upper_bound(0.99, confidence),
                                       hold_span_s=wanted.span.seconds,
                                       first_hold=wanted.first_hold.fraction)
    budget = wanted.budget.seconds if wanted.budget is not None else \
        settings.needed_budget(knee_rps * settings.start_fraction, threshold)
    return replace(settings, budget_s=budget)


def step_phases(rate: float, duration_s: float, parts: int) -> list[Phase]:
    """Equal parts of one window at `rate`; the last is named "burst", after which
    open_loop measures the drain."""
    names = [f"part{index}" for index in range(parts - 1)] + ["burst"]
    return [Phase(name, rate, duration_s / parts) for name in names]


def step_measurement(rate: float, duration_s: float, outcome: OpenLoopResult, hold: bool,
                     confidence: float) -> capacity.StepMeasurement:
    """The window's figures: its halves' medians, a hold's blocks (the first a warm-up).
    A hold's error rate and samples are those of the blocks after the warm-up, as its p99:
    a server that times out a few requests as the load starts from idle (or while the
    last step's overload still clears) has not failed the rate it then holds."""
    parts = list(outcome.phases.values())
    half = len(parts) // 2
    first, second, whole, settled = LoadResult(0.0), LoadResult(0.0), LoadResult(0.0), \
        LoadResult(0.0)
    for index, part in enumerate(parts):
        (first if index < half else second).merge(part)
        whole.merge(part)
        if index:
            settled.merge(part)
    blocks = tuple(Block(int(part.histogram.get_total_count()), part.percentile_ms(50),
                         part.percentile_ms(99)) for part in parts) if hold else ()
    judged = settled if hold else whole
    return capacity.StepMeasurement(
        rate, duration_s, whole.percentile_ms(99), first.percentile_ms(50),
        second.percentile_ms(50), judged.error_rate, int(judged.histogram.get_total_count()),
        outcome.drain_s, outcome.lag_p99_us / 1e3, outcome.client_bound,
        outcome.from_send.percentile_ms(99), sum(whole.errors[kind] for kind in UNANSWERED),
        outcome.lingered_s, p99_interval_ms(whole, confidence), blocks=blocks,
        settled_p99_ms=settled.percentile_ms(99) if hold else None)


def p99_interval_ms(result: LoadResult,
                    confidence: float) -> tuple[float | None, float | None]:
    low, high = quantile_interval_us(result.histogram, 0.99, confidence)
    return (None if low is None else low / 1e3), (None if high is None else high / 1e3)


def error_cutoff(planned: float, error_rate: float, confidence: float | None) -> int:
    """The errors after which a step stops sending (it has failed): a step's budget of
    errors; a hold's, the count its binomial bound decides a miss on, less one."""
    if confidence is None:
        return math.floor(error_rate * planned)
    return capacity.failing_errors(math.floor(planned), error_rate, confidence) - 1


def step_in_flight(rate: float, slo_p99_s: float) -> int:
    wanted = math.ceil(2 * rate * slo_p99_s)
    return min(MAX_STEP_IN_FLIGHT, max(MIN_STEP_IN_FLIGHT, wanted))
