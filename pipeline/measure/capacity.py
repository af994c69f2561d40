"""Capacity as a sustainable arrival rate: bisect the open-loop rate against the SLO.

Users arrive at a rate, whatever the server is doing. Each step offers one constant
rate (open loop, latency counted from each request's intended start) and is judged
on its p99 against the SLO, its error rate, and whether the backlog grew: a queue
that grows over the step shows as a later median in the step's second half, and as
a drain after the schedule ended. The search starts at the closed-loop knee's
throughput, moves up or down geometrically until it has a passing and a failing rate,
then bisects until they are within the resolution or the time budget is spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pipeline.measure.knee import Bound
from pipeline.measure.loadgen import MIN_SAMPLES_FOR

Verdict = Literal["pass", "fail", "client_bound"]
MIN_P99_SAMPLES = MIN_SAMPLES_FOR["p99"]


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

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"


def p99_supported(samples: int, limits: Limits) -> bool:
    # The seam for the latency stage's order-statistic verdict: until a step can be
    # judged on a confidence bound for its p99, it needs enough samples for a p99 at all.
    return samples >= limits.min_samples


def judge(step: StepMeasurement, limits: Limits) -> StepOutcome:
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
    return StepOutcome(step.rate_rps, step.duration_s, step.p99_ms, step.error_rate,
                       step.samples, step.drain_s, growth, step.lag_p99_ms, verdict, reason)


@dataclass(frozen=True)
class SearchSettings:
    budget_s: float
    step_s: float
    resolution: float = 0.05
    up: float = 1.5
    down: float = 0.5
    min_samples: int = MIN_P99_SAMPLES

    def step_duration(self, rate: float) -> float:
        """The configured step, longer where the rate is too low for enough samples."""
        return max(self.step_s, 1.2 * self.min_samples / rate)


@dataclass
class CapacitySearch:
    start_rps: float
    steps: list[StepOutcome] = field(default_factory=list)
    stop_reason: str = ""

    @property
    def best(self) -> StepOutcome | None:
        passing = [step for step in self.steps if step.passed]
        return max(passing, key=lambda step: step.rate_rps) if passing else None

    @property
    def first_failure_above(self) -> StepOutcome | None:
        """The lowest failing rate above the best passing one (the interval's top)."""
        best = self.best
        floor = best.rate_rps if best else 0.0
        failing = [step for step in self.steps
                   if step.verdict == "fail" and step.rate_rps > floor]
        return min(failing, key=lambda step: step.rate_rps) if failing else None

    @property
    def bound(self) -> Bound:
        """"exact" when a failing rate above capacity was measured, else "lower"."""
        return "exact" if self.first_failure_above is not None else "lower"

    @property
    def interval_rps(self) -> tuple[float, float | None] | None:
        best = self.best
        if best is None:
            return None
        top = self.first_failure_above
        return best.rate_rps, top.rate_rps if top else None


def _next_rate(search: CapacitySearch, rate: float, settings: SearchSettings) -> float | None:
    best, top = search.best, search.first_failure_above
    if top is None:
        return rate * settings.up
    if best is None:
        return rate * settings.down
    if top.rate_rps <= best.rate_rps * (1 + settings.resolution):
        search.stop_reason = (f"bracketed within {settings.resolution:.0%}: "
                              f"{best.rate_rps:.0f}–{top.rate_rps:.0f}/s")
        return None
    return (best.rate_rps + top.rate_rps) / 2


def find_capacity(step: Callable[[float, float], StepOutcome], start_rps: float,
                  settings: SearchSettings,
                  clock: Callable[[], float] = time.monotonic) -> CapacitySearch:
    """Bisect on rate; `step(rate, duration_s)` measures and judges one step."""
    search = CapacitySearch(start_rps)
    deadline = clock() + settings.budget_s
    rate: float | None = start_rps
    while rate is not None:
        duration = settings.step_duration(rate)
        if clock() + duration > deadline:
            search.stop_reason = (f"time budget {settings.budget_s:g}s spent "
                                  f"(next step {rate:.0f}/s)")
            break
        outcome = step(rate, duration)
        search.steps.append(outcome)
        if outcome.verdict != "client_bound":
            rate = _next_rate(search, rate, settings)
        elif search.best is None:
            rate *= settings.down       # nothing judged yet: a lower rate the client can keep
        else:
            search.stop_reason = (f"the client fell behind its schedule at {rate:.0f}/s, "
                                  "so that rate could not be judged")
            break
    return search
