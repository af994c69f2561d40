"""Capacity as a sustainable arrival rate: bisect the open-loop rate against the SLO.

Users arrive at a rate, whatever the server is doing. Each step offers one constant
rate (open loop, latency counted from each request's intended start) and is judged
on its p99 against the SLO (the point estimate and its upper confidence bound, as the
latency stage decides its gates), its error rate, and whether the backlog grew: a queue
that grows over the step shows as a later median in the step's second half, and as
a drain after the schedule ended.

The closed-loop knee's throughput is what the server does when it is never idle, so an
open loop there runs at utilisation ~1, where a queue can only grow. The search starts
below it (`start_fraction`), moves up or down geometrically until it has a passing and
a failing rate, then bisects until they are within the resolution or the time budget
needs the rest for a confirmation. After a step that did not pass, the server works off
its backlog before the next one (`settle`). The capacity is the rate that then passes a
longer hold; a missed hold tries a rate lower by the resolution (twice that after a
second miss, and so on), or the highest rate a step passed below that, while the budget
lasts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from pipeline.measure.drain import Drained
from pipeline.measure.loadgen import MIN_SAMPLES_FOR

Verdict = Literal["pass", "fail", "client_bound"]
# exact: a failing rate above the confirmed one was measured; lower: none was; unknown: no
# rate was confirmed within the budget; none: even the lowest rate tried missed the SLO.
CapacityBound = Literal["exact", "lower", "unknown", "none"]
MIN_P99_SAMPLES = MIN_SAMPLES_FOR["p99"]
# The bracketing steps leave the budget room for this many holds: the confirmation and a
# retry at a lower rate when it misses.
HOLDS_KEPT = 2


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


@dataclass(frozen=True)
class Limits:
    slo_p99_ms: float
    error_rate: float
    min_samples: int = MIN_P99_SAMPLES


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

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


def p99_supported(samples: int, limits: Limits) -> bool:
    # Before the confidence bound: a step needs enough samples for a p99 at all.
    return samples >= limits.min_samples


def judge(step: StepMeasurement, limits: Limits, on_bound: bool = False) -> StepOutcome:
    """The step's verdict; `on_bound` (the confirmation hold) also needs the p99's upper
    confidence bound within the SLO, as the latency stage decides its gates."""
    growth = step.p50_second_half_ms - step.p50_first_half_ms
    # A queue that grows doubles the median within one step; a stable one does not
    # (1 ms absorbs scheduling jitter on a fast model).
    grew = growth > max(1.0, step.p50_first_half_ms) or step.drain_s * 1e3 > limits.slo_p99_ms
    verdict: Verdict = "fail"
    if not p99_supported(step.samples, limits):
        reason = f"only {step.samples} samples (a p99 needs ≥ {limits.min_samples})"
    elif step.error_rate > limits.error_rate:
        reason = f"error rate {step.error_rate:.2%} over {limits.error_rate:.2%}"
    elif step.p99_ms > limits.slo_p99_ms:
        reason = f"p99 {step.p99_ms:.1f}ms over the SLO {limits.slo_p99_ms:g}ms"
    elif on_bound and not _p99_bound_within(step, limits):
        reason = (f"p99 {step.p99_ms:.1f}ms, but its upper confidence bound "
                  f"{_upper_text(step)} is over the SLO {limits.slo_p99_ms:g}ms")
    elif grew:
        reason = (f"backlog grew (median {step.p50_first_half_ms:.1f} → "
                  f"{step.p50_second_half_ms:.1f}ms, drain {step.drain_s:.2f}s)")
    else:
        verdict, reason = "pass", f"p99 {step.p99_ms:.1f}ms, no backlog"
    if step.client_bound:
        # Latency counts from the intended start, so a late client only adds to it: a pass
        # still stands. A miss is the server's only if it shows from the actual send too
        # (on a small machine an overloaded server starves the client as well).
        lag = f"the client fell behind its schedule (lag p99 {step.lag_p99_ms:.1f}ms)"
        if verdict == "pass":
            reason += f", although {lag}"
        elif step.from_send_p99_ms > limits.slo_p99_ms:
            reason += f" (p99 from the actual send {step.from_send_p99_ms:.1f}ms: the server's)"
        else:
            verdict, reason = "client_bound", f"{reason}, but {lag}: not judged"
    if step.unanswered:
        reason += f"; {step.unanswered} unanswered or not sent at the step's end"
    return StepOutcome(step.rate_rps, step.duration_s, step.p99_ms, step.error_rate,
                       step.samples, step.drain_s, growth, step.lag_p99_ms, verdict, reason,
                       step.unanswered, step.lingered_s,
                       p99_interval_ms=step.p99_interval_ms)


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
    # A hold is judged on the p99's upper confidence bound, which needs more samples.
    hold_min_samples: int = MIN_P99_SAMPLES

    def step_duration(self, rate: float) -> float:
        """The configured step, longer where the rate is too low for enough samples."""
        return max(self.step_s, 1.2 * self.min_samples / rate)

    def hold_duration(self, rate: float) -> float:
        return max(self.hold_s, self.step_duration(rate), 1.2 * self.hold_min_samples / rate)

    def longest(self, duration: float) -> float:
        """A step's hard bound: its schedule, then its requests' timeout at most."""
        return duration + self.step_timeout_s


@dataclass
class CapacitySearch:
    knee_rps: float
    start_rps: float
    steps: list[StepOutcome] = field(default_factory=list)
    stop_reason: str = ""
    confirmed: StepOutcome | None = None
    stuck: bool = False       # the server did not work off a backlog: no further step
    spent_s: float = 0.0

    @property
    def best_step(self) -> StepOutcome | None:
        """The highest passing bracketing step (before the hold confirms it)."""
        passing = [step for step in self.steps if step.passed and not step.hold]
        return max(passing, key=lambda step: step.rate_rps) if passing else None

    def lowest_failure_above(self, floor: float, holds: bool = True) -> StepOutcome | None:
        failing = [step for step in self.steps if step.verdict == "fail"
                   and step.rate_rps > floor and (holds or not step.hold)]
        return min(failing, key=lambda step: step.rate_rps) if failing else None

    @property
    def best(self) -> StepOutcome | None:
        """The capacity: the rate that passed the confirmation hold."""
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


class Step(Protocol):
    """Measures and judges one step; a `hold` is judged on the p99's confidence bound."""

    def __call__(self, rate: float, duration_s: float, hold: bool) -> StepOutcome: ...


Settle = Callable[[], Drained]


@dataclass
class _Runner:
    step: Step
    settle: Settle
    search: CapacitySearch
    settings: SearchSettings
    clock: Callable[[], float]
    deadline: float

    def fits(self, seconds: float) -> bool:
        return self.clock() + seconds <= self.deadline

    def measure(self, rate: float, duration: float, hold: bool) -> StepOutcome:
        outcome = replace(self.step(rate, duration, hold), hold=hold)
        if not outcome.passed:
            drained = self.settle()
            outcome = replace(outcome, settle_s=drained.seconds)
            if not drained.drained:
                self.search.stuck = True
                self.search.stop_reason = (f"the server still had a backlog "
                                           f"{drained.seconds:.1f}s after the step at "
                                           f"{rate:.0f}/s")
        self.search.steps.append(outcome)
        return outcome


def _next_rate(search: CapacitySearch, rate: float, settings: SearchSettings) -> float | None:
    best = search.best_step
    top = search.lowest_failure_above(best.rate_rps if best else 0.0, holds=False)
    if top is None:
        return rate * settings.up
    if best is None:
        return rate * settings.down
    if top.rate_rps <= best.rate_rps * (1 + settings.resolution):
        search.stop_reason = (f"bracketed within {settings.resolution:.0%}: "
                              f"{best.rate_rps:.0f}–{top.rate_rps:.0f}/s")
        return None
    return (best.rate_rps + top.rate_rps) / 2


def _bracket(run: _Runner) -> None:
    search, settings = run.search, run.settings
    rate: float | None = search.start_rps
    while rate is not None and not search.stuck:
        best = search.best_step
        hold = settings.longest(settings.hold_duration(min(rate, best.rate_rps) if best else rate))
        # A confirmation and one retry at a lower rate matter more than a narrower interval
        # or a higher lower bound: a hold can miss where the short steps passed (slow queue
        # growth, or errors only a longer hold shows), bracketed or not.
        if not run.fits(settings.longest(settings.step_duration(rate)) + HOLDS_KEPT * hold):
            search.stop_reason = (f"the rest of the {settings.budget_s:g}s budget kept for "
                                  f"the confirmation (next step {rate:.0f}/s)")
            return
        outcome = run.measure(rate, settings.step_duration(rate), hold=False)
        if outcome.verdict != "client_bound":
            rate = _next_rate(search, rate, settings)
        elif best is None:
            rate *= settings.down       # nothing judged yet: a lower rate the client can keep
        else:
            search.stop_reason = (f"the client fell behind its schedule at {rate:.0f}/s, "
                                  "so that rate could not be judged")
            return


def _confirm(run: _Runner) -> str:
    search, settings = run.search, run.settings
    best = search.best_step
    if best is None:
        return "no rate passed, so none was held"
    rate, misses = best.rate_rps, 0
    while not search.stuck:
        duration = settings.hold_duration(rate)
        if not run.fits(settings.longest(duration)):
            return f"no time left in the budget to hold {rate:.0f}/s"
        outcome = run.measure(rate, duration, hold=True)
        if outcome.passed:
            search.confirmed = outcome
            return f"confirmed by a {duration:g}s hold"
        # Lower by the resolution, doubling with each further miss (the short steps
        # overestimate by more than that), or to a lower rate a step passed, if any:
        # measured evidence with more margin than a guess.
        misses += 1
        lower = rate * max(0.5, 1 - settings.resolution * 2 ** (misses - 1))
        passed_below = [step.rate_rps for step in search.steps
                        if step.passed and not step.hold and step.rate_rps <= lower]
        rate = max(passed_below, default=lower)
    return "not confirmed"


def find_capacity(step: Step, settle: Settle, knee_rps: float, settings: SearchSettings,
                  clock: Callable[[], float] = time.monotonic) -> CapacitySearch:
    """`step(rate, duration_s, hold)` measures and judges one step; `settle()` waits until the
    server has worked off a backlog. Both count against the budget."""
    search = CapacitySearch(knee_rps, knee_rps * settings.start_fraction)
    began = clock()
    run = _Runner(step, settle, search, settings, clock, began + settings.budget_s)
    _bracket(run)
    confirmation = _confirm(run)
    search.stop_reason = "; ".join(part for part in (search.stop_reason, confirmation) if part)
    search.spent_s = clock() - began
    return search
