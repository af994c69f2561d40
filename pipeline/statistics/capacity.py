"""Capacity as a sustainable arrival rate: decide the threshold, then bisect the rate.

Users arrive at a rate, whatever the server is doing. Each step offers one constant
rate (open loop, latency counted from each request's intended start) and is judged
on its p99 against the SLO, its error rate, and whether the backlog grew: a queue that
grows over the step shows as a later median in the step's second half, and as a drain
after the schedule ended. A hold (a longer step that confirms a rate) is judged on its
blocks (`capacity_hold`): the p99's sectioning interval and the trend of the medians.

Threshold first: with a `threshold_rps` (slo.min_throughput) the search first holds a
rate at or above it, the lowest that a hold of the configured length can judge (at most
the start rate), then the threshold itself if that missed. A passing hold decides
`capacity >= threshold`; a hold at the threshold whose bound is over the SLO (or whose
backlog grew) decides the opposite. Only then is the figure refined with the rest of the
budget, and whatever the rest finds, the held rate stays a lower bound.

The closed-loop knee's throughput is what the server does when it is never idle, so an
open loop there runs at utilisation ~1, where a queue can only grow. The search starts
below it (`start_fraction`), above any rate already held, moves up or down geometrically
until it has a passing and a failing rate, then bisects until they are within the
resolution or the time budget needs the rest for a confirmation. After a step that did
not pass, the server works off its backlog before the next one (`settle`). The capacity
is the highest rate that passed a hold. The first hold is at the best short step's rate
less the spec's `first_hold` discount (short steps overestimate what holds for the span;
each miss costs seconds); a missed hold tries a rate lower by twice the resolution, or
the highest rate a step passed within twice the resolution below that, while the budget
lasts and the rate is above one already held.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from pipeline.statistics.capacity_hold import (
    BLOCK_MIN_SAMPLES,
    EPISODES_WEIGHED_UNDER,
    HOLD_BLOCKS,
    HOLD_LOOKS,
    Block,
    judge_hold,
    look_confidence,
    pooled_p99_ms,
)
from pipeline.statistics.order_stats import MIN_SAMPLES_FOR, quantile_ranks

# undecided: a hold whose p99 interval straddles the SLO (neither a pass nor a failure).
Verdict = Literal["pass", "fail", "client_bound", "undecided"]
# exact: a failing rate above the confirmed one was measured; lower: none was; unknown: no
# rate was confirmed within the budget; none: even the lowest rate tried missed the SLO.
CapacityBound = Literal["exact", "lower", "unknown", "none"]
# held: a rate at or above the threshold passed a hold; failed: a hold at the threshold
# failed on its evidence; undecided: holds ran, neither; untried: no hold fitted the budget.
ThresholdOutcome = Literal["held", "failed", "undecided", "untried"]
MIN_P99_SAMPLES = MIN_SAMPLES_FOR["p99"]
# The bracketing steps leave the budget room for this many holds: the confirmation and one
# retry at a lower rate when it misses. Each near the knee lasts its span, so this sets
# most of the saturation stage's time; the figure is otherwise a lower bound.
HOLDS_KEPT = 3
# The default budget, at least: what a fast model's search takes on a quiet machine.
MIN_DEFAULT_BUDGET_S = 12.0


@dataclass(frozen=True)
class StepMeasurement:
    """What one open-loop step at `rate_rps` measured (latencies from intended start)."""

    rate_rps: float
    duration_s: float
    p99_ms: float
    p50_first_half_ms: float
    p50_second_half_ms: float
    error_rate: float
    samples: int
    drain_s: float
    lag_p99_ms: float
    client_bound: bool
    from_send_p99_ms: float = 0.0
    unanswered: int = 0
    lingered_s: float = 0.0   # after the hard end, waiting for the unanswered to be answered
    # The p99's confidence interval from order statistics (the latency stage's verdict);
    # None: not computed (then the point estimate decides), or a side with no bound.
    p99_interval_ms: tuple[float | None, float | None] | None = None
    # A hold's blocks in time order (the first a warm-up), and the pooled p99 of the
    # blocks after it; a step has none.
    blocks: tuple[Block, ...] = ()
    settled_p99_ms: float | None = None


@dataclass(frozen=True)
class Limits:
    slo_p99_ms: float
    error_rate: float
    min_samples: int = MIN_P99_SAMPLES
    confidence: float = 0.95


@dataclass(frozen=True)
class StepOutcome:
    rate_rps: float
    duration_s: float
    p99_ms: float
    error_rate: float
    samples: int
    drain_s: float
    backlog_growth_ms: float
    lag_p99_ms: float
    verdict: Verdict
    reason: str
    unanswered: int = 0       # still in flight at the step's hard end, or never sent
    lingered_s: float = 0.0   # then waited for their answers (not measured)
    hold: bool = False        # the confirmation hold, not a bracketing step
    settle_s: float = 0.0     # then waited until a single request was prompt again
    p99_interval_ms: tuple[float | None, float | None] | None = None
    block_p99_ms: tuple[float, ...] = ()
    # A hold's blocks (each segment's first a warm-up) and the pooled p99 of the judged
    # ones; on_blocks: its verdict came from them, not from a check that failed first.
    blocks: tuple[Block, ...] = ()
    settled_p99_ms: float | None = None
    on_blocks: bool = False
    segments: int = 1

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


def p99_supported(samples: int, limits: Limits) -> bool:
    # Before the confidence bound: a step needs enough samples for a p99 at all.
    return samples >= limits.min_samples


def judge(step: StepMeasurement, limits: Limits, on_bound: bool = False) -> StepOutcome:
    """The step's verdict; `on_bound` (a hold) is judged on its blocks (`capacity_hold`), or,
    without blocks, also needs the p99's upper confidence bound within the SLO."""
    growth = step.p50_second_half_ms - step.p50_first_half_ms
    interval = step.p99_interval_ms
    verdict: Verdict = "fail"
    on_blocks = False
    if not p99_supported(step.samples, limits):
        reason = f"only {step.samples} samples (a p99 needs ≥ {limits.min_samples})"
    elif step.error_rate > limits.error_rate:
        reason = f"error rate {step.error_rate:.2%} over {limits.error_rate:.2%}"
        errors = round(step.error_rate * step.samples)
        deciding = failing_errors(step.samples, limits.error_rate, limits.confidence)
        if on_bound and errors < deciding:
            # A hold fails on errors when they decide it (the binomial bound), as a stall
            # of the machine may time out a request or two at any rate.
            verdict = "undecided"
            reason += f", {errors} errors of {step.samples}: {deciding} would decide a miss"
    elif step.drain_s * 1e3 > limits.slo_p99_ms:
        reason = f"backlog grew (drained {step.drain_s:.2f}s after the schedule ended)"
    elif on_bound and len(step.blocks) > 3 and step.settled_p99_ms is not None:
        held = judge_hold(list(step.blocks[1:]), step.settled_p99_ms, limits.slo_p99_ms,
                          limits.confidence)
        verdict, reason, interval = held.verdict, held.reason, held.interval_ms
        on_blocks = True
    else:
        verdict, reason = _judge_halves(step, limits, on_bound, growth)
    if step.client_bound:
        verdict, reason = _client_bound(step, limits, verdict, reason)
    if step.unanswered:
        reason += f"; {step.unanswered} unanswered or not sent at the step's end"
    return StepOutcome(step.rate_rps, step.duration_s, step.p99_ms, step.error_rate,
                       step.samples, step.drain_s, growth, step.lag_p99_ms, verdict, reason,
                       step.unanswered, step.lingered_s, p99_interval_ms=interval,
                       block_p99_ms=tuple(block.p99_ms for block in step.blocks),
                       blocks=step.blocks, settled_p99_ms=step.settled_p99_ms,
                       on_blocks=on_blocks)


def failing_errors(samples: int, error_rate: float, confidence: float) -> int:
    """The fewest errors in `samples` that put the error rate over `error_rate` at
    `confidence` (exact binomial: that many or more come by chance at most 1 - confidence
    of the time at exactly `error_rate`)."""
    if samples <= 0 or error_rate <= 0:
        return 1
    return quantile_ranks(samples, min(error_rate, 0.5), confidence)[1]


def _judge_halves(step: StepMeasurement, limits: Limits, on_bound: bool,
                  growth: float) -> tuple[Verdict, str]:
    """A short step (two halves): its point p99, and a median that doubled (1 ms absorbs
    scheduling jitter on a fast model) as a growing queue."""
    if step.p99_ms > limits.slo_p99_ms:
        return "fail", f"p99 {step.p99_ms:.1f}ms over the SLO {limits.slo_p99_ms:g}ms"
    if on_bound and not _p99_bound_within(step, limits):
        return "fail", (f"p99 {step.p99_ms:.1f}ms, but its upper confidence bound "
                        f"{_upper_text(step)} is over the SLO {limits.slo_p99_ms:g}ms")
    if growth > max(1.0, step.p50_first_half_ms):
        return "fail", (f"backlog grew (median {step.p50_first_half_ms:.1f} → "
                        f"{step.p50_second_half_ms:.1f}ms)")
    return "pass", f"p99 {step.p99_ms:.1f}ms, no backlog"


def _client_bound(step: StepMeasurement, limits: Limits, verdict: Verdict,
                  reason: str) -> tuple[Verdict, str]:
    # Latency counts from the intended start, so a late client only adds to it: a pass
    # still stands. A miss is the server's only if it shows from the actual send too
    # (on a small machine an overloaded server starves the client as well).
    lag = f"the client fell behind its schedule (lag p99 {step.lag_p99_ms:.1f}ms)"
    if verdict == "pass":
        return verdict, reason + f", although {lag}"
    if step.from_send_p99_ms > limits.slo_p99_ms:
        return verdict, reason + f" (p99 from the actual send {step.from_send_p99_ms:.1f}ms: " \
            "the server's)"
    return "client_bound", f"{reason}, but {lag}: not judged"


def _p99_bound_within(step: StepMeasurement, limits: Limits) -> bool:
    """A capacity offered again should hold: its p99 must be supported under the SLO at
    the verdict's confidence, not just its point estimate."""
    upper = step.p99_interval_ms[1] if step.p99_interval_ms else None
    return upper is not None and upper <= limits.slo_p99_ms


def _upper_text(step: StepMeasurement) -> str:
    upper = step.p99_interval_ms[1] if step.p99_interval_ms else None
    return "(none: too few samples)" if upper is None else f"{upper:.1f}ms"



@dataclass(frozen=True)
class SearchSettings:
    budget_s: float
    step_s: float
    hold_s: float
    step_timeout_s: float
    start_fraction: float = 0.5
    resolution: float = 0.05
    up: float = 1.5
    down: float = 0.5
    min_samples: int = MIN_P99_SAMPLES
    # A hold without blocks is judged on the p99's order-statistics bound, which needs
    # this many samples; one with blocks needs BLOCK_MIN_SAMPLES in each.
    hold_min_samples: int = MIN_P99_SAMPLES
    blocks: int = HOLD_BLOCKS
    # A hold passes only once it has lasted this long (capacity_hold: slow episodes).
    hold_span_s: float = 0.0
    # The first hold's rate as a share of the best short step (CapacitySpec.first_hold).
    first_hold: float = 1.0

    def step_duration(self, rate: float) -> float:
        """The configured step, longer where the rate is too low for enough samples."""
        return max(self.step_s, 1.2 * self.min_samples / rate)

    def hold_samples(self) -> int:
        return max(self.hold_min_samples, self.blocks * BLOCK_MIN_SAMPLES)

    def hold_duration(self, rate: float) -> float:
        """The configured hold, longer where the rate is too low for the samples its
        verdict needs: enough in every block for a p99."""
        return max(self.hold_s, self.step_duration(rate), 1.2 * self.hold_samples() / rate)

    def hold_first(self, rate: float) -> float:
        """A hold's first look comes after this long: its span, or the configured hold if
        that is longer."""
        return max(self.hold_span_s, self.hold_duration(rate))

    def span_segments(self, rate: float) -> list[float]:
        """A hold's segments up to its span: two halves where each has the samples its
        blocks need, so that a look between them can fail a hold that misses (a pass
        waits for the span either way); else one."""
        whole = self.hold_first(rate)
        half = max(self.hold_duration(rate), whole / 2)
        return [half, whole - half] if whole - half >= self.hold_duration(rate) else [whole]

    def span_cost(self, rate: float) -> float:
        """The most a hold at `rate` takes until its span: its segments, each to its hard
        end."""
        return sum(self.longest(segment) for segment in self.span_segments(rate))

    def longest(self, duration: float) -> float:
        """A step's hard bound: its schedule, then its requests' timeout at most."""
        return duration + self.step_timeout_s

    def first_threshold_rate(self, threshold_rps: float, start_rps: float) -> float:
        """The first rate held for the threshold: at or above it, no higher than the start
        rate, and no lower than a rate one segment of the configured length has the
        samples for (a lower one would only make the hold longer), nor above the rate
        under which a hold waits for no span (so that one segment can decide)."""
        quick = 1.2 * self.hold_samples() / self.hold_s
        spanless = EPISODES_WEIGHED_UNDER * start_rps / self.start_fraction
        return max(threshold_rps, min(start_rps, spanless, quick))

    def needed_budget(self, start_rps: float, threshold_rps: float | None) -> float:
        """A budget that fits the rate: the threshold holds (the first, and the threshold
        itself if the first was above it), then a search of four steps and HOLDS_KEPT
        holds at the start rate (a slow model's hold takes longer), each with room to
        measure on once while undecided."""
        search = 4 * self.longest(self.step_duration(start_rps)) + HOLDS_KEPT * (
            self.span_cost(start_rps) +
            self.longest(self.hold_duration(start_rps)))
        if threshold_rps is not None:
            first = self.first_threshold_rate(threshold_rps, start_rps)
            search += self.span_cost(first)
            if first > threshold_rps:   # and the threshold itself, should that one miss
                search += self.span_cost(threshold_rps)
        return max(MIN_DEFAULT_BUDGET_S, search)


@dataclass
class CapacitySearch:
    knee_rps: float
    start_rps: float
    steps: list[StepOutcome] = field(default_factory=list)
    stop_reason: str = ""
    stuck: bool = False       # the server did not work off a backlog: no further step
    spent_s: float = 0.0
    threshold_rps: float | None = None
    threshold_outcome: ThresholdOutcome | None = None
    threshold_reason: str = ""
    # What kept the figure from going higher or from being pinned down (the record says).
    capped_by: str = ""

    @property
    def confirmed(self) -> StepOutcome | None:
        """The highest rate that passed a hold."""
        held = [step for step in self.steps if step.hold and step.passed]
        return max(held, key=lambda step: step.rate_rps) if held else None

    @property
    def best_step(self) -> StepOutcome | None:
        """The highest passing rate, held or a short step."""
        passing = [step for step in self.steps if step.passed]
        return max(passing, key=lambda step: step.rate_rps) if passing else None

    def lowest_failure_above(self, floor: float, holds: bool = True) -> StepOutcome | None:
        failing = [step for step in self.steps if step.verdict == "fail"
                   and step.rate_rps > floor and (holds or not step.hold)]
        return min(failing, key=lambda step: step.rate_rps) if failing else None

    @property
    def best(self) -> StepOutcome | None:
        """The capacity: the highest rate that passed a hold."""
        return self.confirmed

    @property
    def first_failure_above(self) -> StepOutcome | None:
        """The lowest failing rate above the capacity (the interval's top)."""
        return self.lowest_failure_above(self.confirmed.rate_rps) if self.confirmed else None

    @property
    def bound(self) -> CapacityBound:
        if self.confirmed is not None:
            return "exact" if self.first_failure_above is not None else "lower"
        lowest = min(self.steps, key=lambda step: step.rate_rps) if self.steps else None
        failed_lowest = lowest is not None and lowest.verdict == "fail"
        return "none" if failed_lowest and not any(s.passed for s in self.steps) else "unknown"

    @property
    def interval_rps(self) -> tuple[float, float | None] | None:
        if self.confirmed is None:
            return None
        top = self.first_failure_above
        return self.confirmed.rate_rps, top.rate_rps if top else None

    @property
    def lowest_rate_rps(self) -> float | None:
        return min(step.rate_rps for step in self.steps) if self.steps else None

    @property
    def limited_by(self) -> str:
        """What capped the figure: the failing rate above it, or why none was found."""
        top = self.first_failure_above
        if top is not None:
            return f"a failing rate at {top.rate_rps:,.0f}/s"
        return self.capped_by or "no failing rate found above it"


class Step(Protocol):
    """Measures and judges one step; a `hold` is judged on its blocks."""

    def __call__(self, rate: float, duration_s: float, hold: bool) -> StepOutcome: ...


@dataclass(frozen=True)
class Drained:
    """What a settle between steps reported: how long it waited, whether the backlog went."""

    seconds: float
    drained: bool
    requests: int


Settle = Callable[[], Drained]


@dataclass
class _Runner:
    step: Step
    settle: Settle
    search: CapacitySearch
    settings: SearchSettings
    clock: Callable[[], float]
    deadline: float
    limits: Limits | None = None

    def fits(self, seconds: float) -> bool:
        return self.clock() + seconds <= self.deadline

    def measure(self, rate: float, duration: float, hold: bool) -> StepOutcome:
        outcome = replace(self.step(rate, duration, hold), hold=hold)
        return self.record(outcome)

    def far_below_knee(self, rate: float) -> bool:
        """A server slowed to half its speed still keeps up with `rate`: no span needed."""
        return rate <= EPISODES_WEIGHED_UNDER * self.search.knee_rps

    def planned_segments(self, rate: float) -> list[float]:
        """A hold's segments before it may pass: one of the configured length far below
        the knee, else those of its span."""
        if self.far_below_knee(rate):
            return [self.settings.hold_duration(rate)]
        return self.settings.span_segments(rate)

    def hold_cost(self, rate: float) -> float:
        return sum(self.settings.longest(part) for part in self.planned_segments(rate))

    def hold(self, rate: float) -> StepOutcome:
        """A hold at `rate` in segments until decided (`capacity_hold`), one step recorded."""
        settings, segments = self.settings, []
        planned = iter(self.planned_segments(rate))
        duration = next(planned)
        while True:
            segments.append(self.step(rate, duration, True))
            outcome = combine_segments(segments, self.limits, settings.hold_span_s,
                                       self.far_below_knee(rate))
            if outcome.verdict != "undecided" or len(segments) >= HOLD_LOOKS:
                break
            duration = next(planned, settings.hold_duration(rate))
            if not self.fits(settings.longest(duration)):
                outcome = replace(outcome, reason=outcome.reason + "; no time left in the "
                                  "budget to hold longer")
                break
        return self.record(replace(outcome, hold=True))

    def record(self, outcome: StepOutcome) -> StepOutcome:
        if not outcome.passed:
            drained = self.settle()
            outcome = replace(outcome, settle_s=drained.seconds)
            if not drained.drained:
                self.search.stuck = True
                self.search.capped_by = "a backlog that did not drain"
                self.search.stop_reason = (f"the server still had a backlog "
                                           f"{drained.seconds:.1f}s after the step at "
                                           f"{outcome.rate_rps:.0f}/s")
        self.search.steps.append(outcome)
        return outcome


def combine_segments(segments: list[StepOutcome], limits: Limits | None,
                     span_s: float, weigh_episodes: bool = False) -> StepOutcome:
    """The hold so far: a check that failed in the last segment (errors, samples, a drain,
    the client) decides; else all the segments' judged blocks, at each look's confidence;
    a pass before the span is undecided. Without limits, the last segment's verdict."""
    last = segments[-1]
    seconds = sum(segment.duration_s for segment in segments)
    samples = sum(segment.samples for segment in segments)
    merged = replace(last, duration_s=seconds, samples=samples, segments=len(segments),
                     blocks=tuple(b for segment in segments for b in segment.blocks),
                     block_p99_ms=tuple(p for segment in segments for p in segment.block_p99_ms),
                     unanswered=sum(segment.unanswered for segment in segments),
                     error_rate=sum(s.error_rate * s.samples for s in segments) / max(1, samples))
    judged = [block for segment in segments for block in segment.blocks[1:]]
    if limits is None or not last.on_blocks or last.verdict == "client_bound" or \
            len(judged) < 3:
        return merged
    pools = [(sum(b.samples for b in segment.blocks[1:]), segment.settled_p99_ms or 0.0)
             for segment in segments]
    settled = pooled_p99_ms(pools)
    held = judge_hold(judged, settled, limits.slo_p99_ms, look_confidence(limits.confidence),
                      weigh_episodes)
    verdict: Verdict = held.verdict
    reason = held.reason + (f" ({len(segments)} segments, {seconds:.3g}s)"
                            if len(segments) > 1 else "")
    # Under half the knee's throughput a server slowed to half its speed still keeps up:
    # an episode the hold missed could not have failed it, so no span is waited for (the
    # threshold hold of a model far faster than its threshold decides in one segment).
    if verdict == "pass" and seconds < span_s and not weigh_episodes:
        verdict, reason = "undecided", (f"{held.reason}, but held {seconds:.3g}s of the "
                                        f"{span_s:g}s a pass needs")
    return replace(merged, verdict=verdict, reason=reason, p99_ms=settled,
                   settled_p99_ms=settled, p99_interval_ms=held.interval_ms)


def _decide_threshold(run: _Runner, threshold: float) -> None:
    """Hold a rate at or above the threshold; after a miss above it, the threshold itself
    (a hold measures on while undecided, up to its looks)."""
    search, settings = run.search, run.settings
    rate = settings.first_threshold_rate(threshold, search.start_rps)
    search.threshold_outcome = "untried"
    while not search.stuck:
        duration = sum(run.planned_segments(rate))
        if not run.fits(run.hold_cost(rate)):
            search.threshold_reason = (
                f"the {settings.budget_s:g}s budget had no time left to hold {rate:,.0f}/s "
                f"({duration:.1f}s for {settings.hold_samples()} requests): raise "
                "stages.saturation.capacity.budget")
            return
        outcome = run.hold(rate)
        if outcome.passed:
            search.threshold_outcome = "held"
            search.threshold_reason = f"held {rate:,.0f}/s for {outcome.duration_s:.3g}s"
            return
        search.threshold_outcome = "undecided"
        search.threshold_reason = f"the hold at {rate:,.0f}/s: {outcome.reason}"
        if rate <= threshold:
            if outcome.verdict == "fail":
                search.threshold_outcome = "failed"
            elif outcome.verdict == "client_bound":
                search.threshold_reason += (" (the load generator needs more CPU: "
                                            "stages.saturation.workers, or a quieter machine)")
            else:
                search.threshold_reason += (" (a longer stages.saturation.capacity.hold "
                                            "would decide)")
            return
        rate = threshold      # a higher rate missed: that decides nothing about this one


def _next_rate(search: CapacitySearch, rate: float, settings: SearchSettings) -> float | None:
    best = search.best_step
    top = search.lowest_failure_above(best.rate_rps if best else 0.0)
    if top is None:
        return rate * settings.up
    if best is None:
        return min(rate, top.rate_rps) * settings.down
    if top.rate_rps <= best.rate_rps * (1 + settings.resolution):
        search.stop_reason = (f"short steps bracketed within {settings.resolution:.0%}: "
                              f"{best.rate_rps:.0f}–{top.rate_rps:.0f}/s")
        return None
    return (best.rate_rps + top.rate_rps) / 2


def _first_rate(search: CapacitySearch, settings: SearchSettings) -> float | None:
    """The start rate, unless what the threshold holds found says where to look."""
    if not search.steps:
        return search.start_rps
    best = search.best_step
    if best is not None and search.lowest_failure_above(best.rate_rps) is None:
        return max(search.start_rps, best.rate_rps * settings.up)
    return _next_rate(search, search.start_rps, settings)


# A client that fell behind once is most often one busy moment of a shared machine (a
# 2-core runner's neighbour), not a client that cannot send that rate: the step is measured
# again this many times (each rate) before the search stops at it.
CLIENT_BOUND_RETRIES = 1


def _bracket(run: _Runner) -> None:
    search, settings = run.search, run.settings
    rate = _first_rate(search, settings)
    retries = 0
    while rate is not None and not search.stuck:
        best = search.best_step
        hold = settings.span_cost(min(rate, best.rate_rps) if best else rate)
        # A confirmation and one retry at a lower rate matter more than a narrower interval
        # or a higher lower bound: a hold can miss where the short steps passed (slow queue
        # growth, or errors only a longer hold shows), bracketed or not.
        if not run.fits(settings.longest(settings.step_duration(rate)) + HOLDS_KEPT * hold):
            search.capped_by = "the time budget"
            search.stop_reason = (f"the rest of the {settings.budget_s:g}s budget kept for "
                                  f"the confirmation (next step {rate:.0f}/s)")
            return
        outcome = run.measure(rate, settings.step_duration(rate), hold=False)
        if outcome.verdict != "client_bound":
            rate, retries = _next_rate(search, rate, settings), 0
        elif best is None:
            rate *= settings.down       # nothing judged yet: a lower rate the client can keep
        elif retries < CLIENT_BOUND_RETRIES:
            retries += 1                # the same rate again
        else:
            search.capped_by = "the load generator (it fell behind its schedule)"
            again = f", {retries + 1} times" if retries else ""
            search.stop_reason = (f"the client fell behind its schedule at {rate:.0f}/s"
                                  f"{again}, so that rate could not be judged")
            return


def _confirm(run: _Runner) -> str:
    """Hold the best rate the short steps passed, less the `first_hold` discount, above any
    rate already held."""
    search, settings = run.search, run.settings
    held = search.confirmed
    floor = held.rate_rps if held else 0.0
    best = search.best_step
    if best is None:
        return "no rate passed, so none was held"
    if best.hold:
        return f"{best.rate_rps:,.0f}/s held for {best.duration_s:.3g}s"
    rate, misses = first_hold_rate(best.rate_rps, floor, settings), 0
    missed: list[str] = []
    while not search.stuck:
        # The rates whose holds missed are named, so that a figure under the short steps'
        # bracket reads as what it is: the highest rate a hold passed.
        before = f"holds at {', '.join(missed)} missed; " if missed else ""
        if not run.fits(settings.span_cost(rate)):
            search.capped_by = search.capped_by or "the time budget"
            return f"{before}no time left in the budget to hold {rate:.0f}/s"
        outcome = run.hold(rate)
        if outcome.passed:
            held_rate = f"{rate:.0f}/s " if rate != best.rate_rps else ""
            return f"{before}{held_rate}confirmed by a {outcome.duration_s:.3g}s hold"
        missed.append(f"{rate:.0f}/s")
        # Lower by twice the resolution (the short steps overestimate by more than it:
        # they are too short to see a busy machine's episodes), or to a rate a step
        # passed just below that:
        # measured evidence with more margin than a guess. Not to one far below: a
        # ×1.5 ladder's last pass is a third under, where holds are rarely needed.
        # Each further miss doubles the step down: on a machine whose neighbour took half
        # of it, a 5% ladder would spend the budget on holds that all miss.
        misses += 1
        lower = rate * max(0.5, 1 - 2 * settings.resolution * 2 ** (misses - 1))
        near = lower * (1 - 2 * settings.resolution)
        passed_below = [step.rate_rps for step in search.steps if step.passed
                        and not step.hold and near <= step.rate_rps <= lower]
        rate = max(passed_below, default=lower)
        if rate <= floor:
            search.capped_by = search.capped_by or f"a missed hold at {outcome.rate_rps:,.0f}/s"
            return (f"holds above {floor:,.0f}/s missed ({', '.join(missed)}); that rate "
                    "stays held")
    return "not confirmed"


def first_hold_rate(best_step_rps: float, floor_rps: float, settings: SearchSettings) -> float:
    """The first rate held above `floor_rps` (one already held): the best short step's rate
    less the spec's discount (short steps overestimate what holds for the span), or that
    rate itself where the discount would fall to the floor."""
    discounted = best_step_rps * settings.first_hold
    return discounted if discounted > floor_rps else best_step_rps


def find_capacity(step: Step, settle: Settle, knee_rps: float, settings: SearchSettings,
                  clock: Callable[[], float] = time.monotonic,
                  threshold_rps: float | None = None,
                  limits: Limits | None = None) -> CapacitySearch:
    """`step(rate, duration_s, hold)` measures and judges one step; `settle()` waits until the
    server has worked off a backlog. Both count against the budget. With `threshold_rps`,
    `capacity >= threshold_rps` is decided first (`threshold_outcome`). With `limits`, a
    hold is judged on the blocks of all its segments (else each on its own verdict)."""
    search = CapacitySearch(knee_rps, knee_rps * settings.start_fraction,
                            threshold_rps=threshold_rps)
    began = clock()
    run = _Runner(step, settle, search, settings, clock, began + settings.budget_s, limits)
    if threshold_rps is not None:
        _decide_threshold(run, threshold_rps)
    _bracket(run)
    confirmation = _confirm(run)
    search.stop_reason = "; ".join(part for part in (search.stop_reason, confirmation) if part)
    search.spent_s = clock() - began
    return search


def hold_rate(step: Step, settle: Settle, rate: float, settings: SearchSettings,
              limits: Limits, clock: Callable[[], float] = time.monotonic) -> StepOutcome:
    """One hold at `rate` within `settings.budget_s`, as the search holds a rate."""
    search = CapacitySearch(rate, rate)
    run = _Runner(step, settle, search, settings, clock, clock() + settings.budget_s, limits)
    return run.hold(rate)
