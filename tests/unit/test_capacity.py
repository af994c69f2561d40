from __future__ import annotations

from pipeline.measure.capacity import (
    Limits,
    SearchSettings,
    StepMeasurement,
    StepOutcome,
    find_capacity,
    judge,
)

LIMITS = Limits(slo_p99_ms=50.0, error_rate=0.001)


def measured(rate: float, p99: float = 5.0, first: float = 2.0, second: float = 2.2,
             samples: int = 1000, errors: float = 0.0, drain: float = 0.003,
             client_bound: bool = False) -> StepMeasurement:
    # From the actual send, a late client's step looks fine: the lag is all the client's.
    return StepMeasurement(rate, 1.0, p99, first, second, errors, samples, drain, 0.1,
                           client_bound, from_send_p99_ms=4.0)


class FakeClock:
    """Advances by each step's duration: the budget is spent as measuring would."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def queue(capacity_rps: float, clock: FakeClock, calls: list[float]):  # type: ignore[no-untyped-def]
    """An M/D/1-like server: fine below `capacity_rps`, a growing backlog above it."""
    def step(rate: float, duration_s: float) -> StepOutcome:
        calls.append(rate)
        clock.now += duration_s
        if rate <= capacity_rps:
            return judge(measured(rate), LIMITS)
        backlog_s = (rate / capacity_rps - 1) * duration_s
        return judge(measured(rate, p99=backlog_s * 1e3, first=backlog_s * 250,
                              second=backlog_s * 750, drain=backlog_s), LIMITS)

    return step


def test_bisects_to_the_capacity_from_above() -> None:
    clock, calls = FakeClock(), []
    search = find_capacity(queue(1000.0, clock, calls), 1600.0,
                           SearchSettings(budget_s=30, step_s=1.0), clock)
    assert search.bound == "exact" and search.best is not None
    low, high = search.interval_rps or (0.0, None)
    assert high is not None and low <= 1000.0 < high and high <= low * 1.05
    assert search.best.rate_rps == low and calls[0] == 1600.0 and calls[1] == 800.0
    assert "bracketed within 5%" in search.stop_reason


def test_climbs_from_a_passing_start() -> None:
    clock, calls = FakeClock(), []
    search = find_capacity(queue(5000.0, clock, calls), 1000.0,
                           SearchSettings(budget_s=30, step_s=1.0), clock)
    assert calls[:4] == [1000.0, 1500.0, 2250.0, 3375.0]
    assert search.bound == "exact"
    low, high = search.interval_rps or (0.0, None)
    assert high is not None and low <= 5000.0 < high


def test_a_rate_that_always_passes_is_a_lower_bound_when_the_budget_ends() -> None:
    clock, calls = FakeClock(), []
    search = find_capacity(queue(1e12, clock, calls), 1000.0,
                           SearchSettings(budget_s=3.5, step_s=1.0), clock)
    assert len(calls) == 3 and search.bound == "lower"
    assert search.interval_rps == (2250.0, None)
    assert "time budget 3.5s spent" in search.stop_reason


def test_a_client_bound_step_is_not_judged_and_stops_the_search() -> None:
    clock = FakeClock()

    def step(rate: float, duration_s: float) -> StepOutcome:
        clock.now += duration_s
        late = rate > 1200
        return judge(measured(rate, p99=80.0 if late else 5.0, client_bound=late), LIMITS)

    search = find_capacity(step, 1000.0, SearchSettings(budget_s=30, step_s=1.0), clock)
    assert [s.verdict for s in search.steps] == ["pass", "client_bound"]
    assert search.bound == "lower" and search.best is not None
    assert search.best.rate_rps == 1000.0
    assert "could not be judged" in search.stop_reason
    # With nothing judged yet, it goes down to a rate the client can keep.
    clock.now = 0.0
    search = find_capacity(step, 2000.0, SearchSettings(budget_s=2.5, step_s=1.0), clock)
    assert [s.verdict for s in search.steps] == ["client_bound", "pass"]
    assert search.best is not None and search.best.rate_rps == 1000.0


def test_low_rates_get_longer_steps_for_enough_samples() -> None:
    settings = SearchSettings(budget_s=30, step_s=1.0)
    assert settings.step_duration(1000.0) == 1.0
    assert settings.step_duration(20.0) == 6.0


def test_each_criterion_fails_a_step() -> None:
    assert judge(measured(100.0), LIMITS).passed
    reasons = {
        "p99": judge(measured(100.0, p99=51.0), LIMITS),
        "errors": judge(measured(100.0, errors=0.01), LIMITS),
        "samples": judge(measured(100.0, samples=99), LIMITS),
        "growth": judge(measured(100.0, first=3.0, second=9.0), LIMITS),
        "drain": judge(measured(100.0, drain=0.2), LIMITS),
    }
    assert all(outcome.verdict == "fail" for outcome in reasons.values())
    assert "over the SLO" in reasons["p99"].reason
    assert "error rate" in reasons["errors"].reason
    assert "only 99 samples" in reasons["samples"].reason
    assert "backlog grew" in reasons["growth"].reason
    assert "backlog grew" in reasons["drain"].reason
    # A late client only adds to latency from intended start: a pass stands, a miss is
    # not the server's to answer for.
    assert judge(measured(100.0, client_bound=True), LIMITS).passed
    late_miss = judge(measured(100.0, p99=51.0, client_bound=True), LIMITS)
    assert late_miss.verdict == "client_bound" and "not judged" in late_miss.reason
    overloaded = judge(StepMeasurement(100.0, 1.0, 300.0, 50.0, 200.0, 0.0, 1000, 0.3, 20.0,
                                       True, from_send_p99_ms=280.0), LIMITS)
    assert overloaded.verdict == "fail" and "the server's" in overloaded.reason
    # Jitter of a fraction of a millisecond on a fast model is not a growing queue.
    assert judge(measured(100.0, first=0.4, second=1.2), LIMITS).passed


def test_nothing_passes() -> None:
    clock = FakeClock()

    def step(rate: float, duration_s: float) -> StepOutcome:
        clock.now += duration_s
        return judge(measured(rate, p99=80.0), LIMITS)

    search = find_capacity(step, 1000.0, SearchSettings(budget_s=4, step_s=1.0), clock)
    assert search.best is None and search.interval_rps is None
    assert [s.rate_rps for s in search.steps] == [1000.0, 500.0, 250.0, 125.0]
