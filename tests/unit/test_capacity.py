from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler

import pytest

from pipeline.gates.capacity import capacity_gate
from pipeline.measure.capacity_steps import step_in_flight, step_measurement
from pipeline.measure.drain import until_prompt
from pipeline.measure.load_result import LoadResult
from pipeline.measure.loadgen import HardEnd, Phase, open_loop
from pipeline.measure.open_loop import _OpenLoopWindow
from pipeline.measure.wire.transport import Sent
from pipeline.request_types import HttpRequest
from pipeline.statistics import capacity, capacity_hold
from pipeline.statistics.capacity import Drained, find_capacity, judge
from pipeline.statistics.order_stats import quantile_ranks, samples_for_upper_bound
from tests.support.http_server import serving

LIMITS = capacity.Limits(slo_p99_ms=50.0, error_rate=0.001)


def measured(rate: float, p99: float = 5.0, first: float = 2.0, second: float = 2.2,
             samples: int = 1000, errors: float = 0.0, drain: float = 0.003,
             client_bound: bool = False, duration_s: float = 1.0) -> capacity.StepMeasurement:
    # From the actual send, a late client's step looks fine: the lag is all the client's.
    return capacity.StepMeasurement(rate, duration_s, p99, first, second, errors, samples,
                                    drain, 0.1, client_bound, from_send_p99_ms=4.0)


class FakeClock:
    """Advances by each step's duration: the budget is spent as measuring would."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def recorded() -> list[float]:
    """An empty log for a fake step or settle to append to (`[]` alone has no type)."""
    return []


def queue(capacity_rps: float, clock: FakeClock, calls: list[float],
          hold_capacity_rps: float | None = None):
    """An M/D/1-like server: fine below `capacity_rps`, a growing backlog above it. A hold
    (a step longer than 1 s) sees `hold_capacity_rps`: slow growth that 1 s cannot show."""
    def step(rate: float, duration_s: float, hold: bool = False) -> capacity.StepOutcome:
        calls.append(rate)
        clock.now += duration_s
        if duration_s > 1.0 and hold_capacity_rps is not None:
            capacity_rps_now = hold_capacity_rps
        else:
            capacity_rps_now = capacity_rps
        return outcome(rate, duration_s, capacity_rps_now)

    def outcome(rate: float, duration_s: float, capacity_rps: float) -> capacity.StepOutcome:
        if rate <= capacity_rps:
            return judge(measured(rate, duration_s=duration_s), LIMITS)
        backlog_s = (rate / capacity_rps - 1) * duration_s
        return judge(measured(rate, p99=backlog_s * 1e3, first=backlog_s * 250,
                              second=backlog_s * 750, drain=backlog_s,
                              duration_s=duration_s), LIMITS)

    return step


def settler(clock: FakeClock, seconds: float = 0.25, drains: bool = True,
            calls: list[float] | None = None):
    """Waiting for the backlog to drain takes `seconds` of the budget."""
    def settle() -> Drained:
        clock.now += seconds
        if calls is not None:
            calls.append(clock.now)
        return Drained(seconds, drains, 2)

    return settle


def settings(budget_s: float = 30, step_s: float = 1.0, hold_s: float = 3.0,
             timeout_s: float = 0.2) -> capacity.SearchSettings:
    return capacity.SearchSettings(budget_s, step_s, hold_s, timeout_s)


def test_starts_below_the_knee_and_bisects_to_a_confirmed_capacity() -> None:
    clock, calls = FakeClock(), recorded()
    search = find_capacity(queue(1000.0, clock, calls), settler(clock), 1600.0, settings(),
                           clock)
    # Half the knee's throughput first: there the server is never idle, so an open loop
    # at the knee itself only builds a queue.
    assert calls[0] == pytest.approx(800.0) and calls[1] == pytest.approx(1200.0)
    assert search.start_rps == pytest.approx(800.0) and search.bound == "exact"
    assert search.best is search.confirmed and search.confirmed is not None
    assert search.confirmed.hold and search.confirmed.duration_s == 3.0
    low, high = search.interval_rps or (0.0, None)
    assert high is not None and low <= 1000.0 < high and high <= low * 1.05
    assert search.confirmed.rate_rps == low
    assert "bracketed within 5%" in search.stop_reason
    assert "confirmed by a 3s hold" in search.stop_reason


def test_climbs_from_a_passing_start() -> None:
    clock, calls = FakeClock(), recorded()
    search = find_capacity(queue(5000.0, clock, calls), settler(clock), 1000.0 / 0.5,
                           settings(), clock)
    assert [round(rate) for rate in calls[:4]] == [1000, 1500, 2250, 3375]
    assert search.bound == "exact"
    low, high = search.interval_rps or (0.0, None)
    assert high is not None and low <= 5000.0 < high


def test_the_server_drains_after_each_failing_step_on_the_budget() -> None:
    clock, calls, settled = FakeClock(), recorded(), recorded()
    search = find_capacity(queue(1000.0, clock, calls), settler(clock, 0.5, calls=settled),
                           1600.0, settings(budget_s=15.5), clock)
    failing = [step for step in search.steps if not step.passed]
    assert failing and len(settled) == len(failing)
    assert all(step.settle_s == 0.5 for step in failing)
    assert all(step.settle_s == 0.0 for step in search.steps if step.passed)
    assert search.spent_s == pytest.approx(clock.now) and clock.now <= 15.5
    # Draining takes budget: with slow drains the same budget affords fewer steps.
    slow_clock, slow_calls = FakeClock(), recorded()
    find_capacity(queue(1000.0, slow_clock, slow_calls), settler(slow_clock, 2.0), 1600.0,
                  settings(budget_s=15.5), slow_clock)
    assert len(slow_calls) < len(calls)


def test_a_server_that_does_not_drain_stops_the_search() -> None:
    clock, calls = FakeClock(), recorded()
    search = find_capacity(queue(1000.0, clock, calls), settler(clock, 10.0, drains=False),
                           2400.0, settings(), clock)
    assert calls == [1200.0] and search.stuck
    assert search.bound == "none"  # the one rate tried missed: a real failure
    assert "still had a backlog" in search.stop_reason


def test_a_missed_hold_drops_the_rate_by_twice_the_resolution() -> None:
    # The 1 s steps bracket ~1040/s, but held for 3 s the server keeps up with 900/s only.
    clock, calls = FakeClock(), recorded()
    search = find_capacity(queue(1040.0, clock, calls, hold_capacity_rps=900.0),
                           settler(clock), 2000.0, settings(budget_s=20), clock)
    holds = [step for step in search.steps if step.hold]
    rates = [step.rate_rps for step in holds]
    # Down by twice the resolution, doubling with each further miss: no step passed that low.
    assert [round(b / a, 3) for a, b in itertools.pairwise(rates)] == [0.9, 0.8]
    assert [step.passed for step in holds] == [False, False, True]
    assert search.confirmed is holds[-1] and search.confirmed.rate_rps <= 900.0
    low, high = search.interval_rps or (0.0, None)
    assert low == search.confirmed.rate_rps and high == holds[-2].rate_rps
    # The figure is under the short steps' bracket: the reason names the holds that missed
    # and the rate that held, not only the bracket.
    missed = ", ".join(f"{step.rate_rps:.0f}/s" for step in holds[:2])
    assert "short steps bracketed within 5%" in search.stop_reason
    assert (f"holds at {missed} missed; {holds[-1].rate_rps:.0f}/s confirmed by a"
            in search.stop_reason)


def test_the_first_hold_is_the_best_short_step_less_the_spec_discount() -> None:
    # The 1 s steps bracket ~1000/s; held, the server keeps up with 850/s. At the default
    # 80% the first hold (about 800/s) passes: one hold instead of three.
    clock, calls = FakeClock(), recorded()
    search = find_capacity(queue(1000.0, clock, calls, hold_capacity_rps=850.0),
                           settler(clock), 1600.0, replace(settings(), first_hold=0.8), clock)
    holds = [step for step in search.steps if step.hold]
    best_step = max(s.rate_rps for s in search.steps if s.passed and not s.hold)
    assert len(holds) == 1 and holds[0].passed
    assert holds[0].rate_rps == pytest.approx(0.8 * best_step)
    assert search.bound == "exact" and search.confirmed is holds[0]
    assert f"{holds[0].rate_rps:.0f}/s confirmed by a 3s hold" in search.stop_reason
    # A discount that would fall to a rate already held holds the best step itself.
    assert capacity.first_hold_rate(1000.0, 850.0, replace(settings(), first_hold=0.8)) \
        == 1000.0
    assert capacity.first_hold_rate(1000.0, 700.0, replace(settings(), first_hold=0.8)) \
        == pytest.approx(800.0)


def test_a_missed_hold_falls_back_to_a_lower_rate_a_step_passed() -> None:
    clock, calls = FakeClock(), recorded()
    search = find_capacity(queue(1000.0, clock, calls, hold_capacity_rps=850.0),
                           settler(clock), 1600.0, settings(), clock)
    holds = [step for step in search.steps if step.hold]
    assert [step.passed for step in holds] == [False, False, True]
    # The second miss lowers the rate by 20% (the first by 10%), or to a rate a step passed
    # within 10% under that.
    lowered = holds[1].rate_rps * 0.8
    passed_steps = [s.rate_rps for s in search.steps if s.passed and not s.hold]
    assert holds[2].rate_rps == max([r for r in passed_steps if lowered * 0.9 <= r <= lowered],
                                    default=lowered)
    assert holds[2].rate_rps >= lowered * 0.9 and search.confirmed is holds[2]


def test_a_rate_that_always_passes_is_a_lower_bound() -> None:
    clock, calls = FakeClock(), recorded()
    search = find_capacity(queue(1e12, clock, calls), settler(clock), 1000.0 / 0.5,
                           settings(budget_s=13.5), clock)
    assert search.bound == "lower" and search.confirmed is not None
    assert search.interval_rps == (search.confirmed.rate_rps, None)
    assert "kept for the confirmation" in search.stop_reason


def test_a_hold_missed_before_any_step_failed_still_has_time_for_its_retries() -> None:
    # Every short step passes, so nothing brackets the capacity; held for 3 s the server
    # keeps up with less than the last step. The budget kept room for two more holds.
    clock, calls = FakeClock(), recorded()
    search = find_capacity(queue(1e12, clock, calls, hold_capacity_rps=4500.0),
                           settler(clock), 1000.0 / 0.5, settings(budget_s=15.5), clock)
    holds = [step for step in search.steps if step.hold]
    assert all(step.passed for step in search.steps if not step.hold)
    assert [step.passed for step in holds] == [False, False, True]
    assert search.confirmed is holds[2] and search.confirmed.rate_rps <= 4500.0
    assert search.bound == "exact" and clock.now <= 15.5


def test_no_rate_confirmed_within_the_budget_is_unknown_not_zero() -> None:
    clock = FakeClock()

    def late(rate: float, duration_s: float, hold: bool = False) -> capacity.StepOutcome:
        clock.now += duration_s
        return judge(measured(rate, p99=80.0, client_bound=True), LIMITS)

    search = find_capacity(late, settler(clock), 1000.0, settings(budget_s=11.5), clock)
    assert search.steps and all(step.verdict == "client_bound" for step in search.steps)
    assert search.bound == "unknown" and search.best is None
    gate = capacity_gate(search, 100.0)
    assert gate is not None and gate.outcome == "inconclusive" and gate.observed == "unknown"
    assert "no rate confirmed within the budget" in gate.reason
    # A budget too small for a step and a hold: nothing measured, capacity unknown.
    clock.now = 0.0
    nothing = find_capacity(late, settler(clock), 1000.0, settings(budget_s=3.0), clock)
    assert nothing.steps == [] and nothing.bound == "unknown"
    gate = capacity_gate(nothing, 100.0)
    assert gate is not None and gate.outcome == "inconclusive"


def test_missing_the_slo_at_every_rate_tried_fails_the_gate() -> None:
    clock = FakeClock()

    def slow(rate: float, duration_s: float, hold: bool = False) -> capacity.StepOutcome:
        clock.now += duration_s
        return judge(measured(rate, p99=80.0), LIMITS)

    # Each step leaves the budget room for three holds at its rate: 700 samples each.
    search = find_capacity(slow, settler(clock), 1000.0, settings(budget_s=27), clock)
    assert [round(s.rate_rps) for s in search.steps] == [500, 250, 125]
    assert search.bound == "none" and search.interval_rps is None
    # Missing at 125/s says nothing about 100/s; at a minimum of 150/s it decides.
    gate = capacity_gate(search, 100.0)
    assert gate is not None and gate.outcome == "inconclusive"
    gate = capacity_gate(search, 150.0)
    assert gate is not None and gate.outcome == "failed" and gate.observed == "< 125/s"
    # A capacity capped by a failing rate under the minimum fails.
    clock.now = 0.0
    low = find_capacity(queue(90.0, clock, []), settler(clock), 150.0, settings(budget_s=50),
                        clock)
    gate = capacity_gate(low, 100.0)
    assert low.confirmed is not None and gate is not None and gate.outcome == "failed"
    assert gate.observed == low.confirmed.rate_rps < 100.0


def test_a_client_bound_step_is_not_judged_and_stops_the_search() -> None:
    clock = FakeClock()

    def step(rate: float, duration_s: float, hold: bool = False) -> capacity.StepOutcome:
        clock.now += duration_s
        late = rate > 1200
        return judge(measured(rate, p99=80.0 if late else 5.0, client_bound=late), LIMITS)

    search = find_capacity(step, settler(clock), 1000.0 / 0.5, settings(), clock)
    # Measured once more before it stops: a late client is often one busy moment.
    assert [s.verdict for s in search.steps] == ["pass", "client_bound", "client_bound",
                                                 "pass"]
    assert search.steps[1].rate_rps == search.steps[2].rate_rps
    assert search.steps[-1].hold and search.bound == "lower"
    assert search.best is not None and search.best.rate_rps == pytest.approx(1000.0)
    assert "fell behind its schedule at 1500/s, 2 times, so that rate could not be judged" \
        in search.stop_reason
    # With nothing judged yet, it goes down to a rate the client can keep.
    clock.now = 0.0
    search = find_capacity(step, settler(clock), 2000.0 / 0.5, settings(budget_s=12.5), clock)
    assert [s.verdict for s in search.steps][:2] == ["client_bound", "pass"]
    assert search.best is not None and search.best.rate_rps == pytest.approx(1000.0)


def test_a_client_late_once_is_measured_again_and_the_search_goes_on() -> None:
    clock = FakeClock()
    late_once: set[float] = set()

    def step(rate: float, duration_s: float, hold: bool = False) -> capacity.StepOutcome:
        clock.now += duration_s
        late = rate > 1200 and rate not in late_once
        late_once.add(rate)
        p99 = 80.0 if late else (5.0 if rate < 1800 else 80.0)
        return judge(measured(rate, p99=p99, client_bound=late), LIMITS)

    search = find_capacity(step, settler(clock), 1000.0 / 0.5, settings(budget_s=40), clock)
    verdicts = [s.verdict for s in search.steps]
    assert verdicts[:3] == ["pass", "client_bound", "pass"], verdicts
    assert search.steps[1].rate_rps == search.steps[2].rate_rps
    assert "fell behind" not in search.stop_reason
    assert search.best is not None and search.best.rate_rps > 1200.0


def test_a_step_passes_on_the_p99_upper_bound_not_its_point_estimate() -> None:
    def bounded(low: float | None, high: float | None) -> capacity.StepMeasurement:
        return replace(measured(100.0, p99=45.0), p99_interval_ms=(low, high))

    # A bracketing step only locates the capacity: its point estimate decides.
    assert judge(bounded(40.0, 50.5), LIMITS).passed
    # The hold confirms it: the p99's upper bound must be within the SLO too.
    assert judge(bounded(40.0, 49.0), LIMITS, on_bound=True).passed
    assert judge(bounded(40.0, 50.0), LIMITS, on_bound=True).passed   # on the threshold
    over = judge(bounded(40.0, 50.5), LIMITS, on_bound=True)
    assert over.verdict == "fail" and "upper confidence bound 50.5ms" in over.reason
    assert over.p99_interval_ms == (40.0, 50.5)
    unbounded = judge(bounded(40.0, None), LIMITS, on_bound=True)
    assert unbounded.verdict == "fail" and "too few samples" in unbounded.reason


def test_a_hold_is_long_enough_for_its_p99_bound() -> None:
    needed = samples_for_upper_bound(0.99, 0.95)
    assert quantile_ranks(needed, 0.99, 0.95)[1] <= needed - 2
    assert quantile_ranks(needed - 1, 0.99, 0.95)[1] > needed - 3
    held = capacity.SearchSettings(budget_s=30.0, step_s=1.0, hold_s=3.0, step_timeout_s=0.2,
                          hold_min_samples=needed)
    assert held.hold_samples() == max(needed, 7 * 100)    # 100 in each of seven blocks
    assert held.hold_duration(10_000.0) == 3.0
    assert held.hold_duration(100.0) == pytest.approx(1.2 * held.hold_samples() / 100.0)


def test_the_capacity_gate_carries_the_calibrated_interval() -> None:
    clock, calls = FakeClock(), recorded()
    search = find_capacity(queue(1000.0, clock, calls), settler(clock), 1000.0,
                           settings(budget_s=30.0), clock)
    gate = capacity_gate(search, 100.0)
    assert search.confirmed is not None and search.interval_rps is not None
    assert gate is not None and gate.outcome == "passed"
    # The figure's 90% interval (held / 1.1 to failed / 0.8), as the capacity text states
    # it, not the bracket (held, failed).
    held, top = search.interval_rps
    assert top is not None and gate.interval is not None
    assert list(gate.interval) == [pytest.approx(held / 1.1), pytest.approx(top / 0.8)]
    assert gate.samples == search.confirmed.samples
    failed = capacity_gate(search, 5000.0)
    assert failed is not None and failed.outcome == "failed"


def test_low_rates_get_longer_steps_for_enough_samples() -> None:
    assert settings().step_duration(1000.0) == 1.0
    assert settings().step_duration(20.0) == 6.0
    assert settings().hold_duration(1000.0) == 3.0
    assert settings().hold_duration(20.0) == pytest.approx(1.2 * 700 / 20.0)
    assert settings().longest(1.0) == pytest.approx(1.2)


def test_a_step_keeps_few_connections() -> None:
    assert step_in_flight(10_000.0, 0.05) == 512     # Triton's HTTP front end's limit
    assert step_in_flight(1000.0, 0.05) == 100       # twice what the SLO allows on average
    assert step_in_flight(10.0, 0.05) == 32


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
    overloaded = judge(capacity.StepMeasurement(100.0, 1.0, 300.0, 50.0, 200.0, 0.0, 1000, 0.3,
                                                20.0, True, from_send_p99_ms=280.0), LIMITS)
    assert overloaded.verdict == "fail" and "the server's" in overloaded.reason
    # Jitter of a fraction of a millisecond on a fast model is not a growing queue.
    assert judge(measured(100.0, first=0.4, second=1.2), LIMITS).passed


class _Delayed(BaseHTTPRequestHandler):
    """Answers after the number of milliseconds in the path: a server that falls behind."""

    protocol_version = "HTTP/1.1"
    answered = 0
    counting = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        threading.Event().wait(int(self.path.strip("/")) / 1e3)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        # Counted before the answer leaves: counted after it, a client that has read every
        # answer could look at the count before the last handler thread had added its own.
        with self.counting:
            type(self).answered += 1
        try:
            self.wfile.write(b"ok")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with self.counting:
                type(self).answered -= 1

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def delayed() -> Iterator[str]:
    # A stdlib server on loopback stands for a server that answers late on demand, which a
    # real Triton does not do within a unit test's time.
    with serving(_Delayed) as url:
        yield url


def _request(base: str, delay_ms: int) -> HttpRequest:
    return HttpRequest("POST", f"{base}/{delay_ms}", b"x", {})


def test_a_step_ends_at_its_duration_plus_the_timeout(delayed: str) -> None:
    # Every answer takes 600 ms, the step 400 ms with a 100 ms timeout: at 500 ms all of
    # them are still in flight; they count as timeouts, censored at the timeout, and their
    # connections stay open until their answers came (the linger, 5 s at most).
    _Delayed.answered = 0
    started = time.perf_counter()
    outcome = asyncio.run(open_loop(_request(delayed, 600), [Phase("steady", 50.0, 0.4)], 0.1,
                                    hard_end=HardEnd(0.5, 5.0)))
    elapsed = time.perf_counter() - started
    steady = outcome.phases["steady"]
    # Each is a timeout from 100 ms after its send (the last sent near 400 ms).
    assert steady.errors == {"timeout": 20} and steady.completed == 0
    # Censored at the timeout (100 ms), from the intended send: a late event loop adds its
    # lag, never the 600 ms the answers took.
    assert 99.0 <= steady.percentile_ms(99) < 300.0
    # Bounds far from the 5 s linger cap, so that a slow machine cannot fail them.
    assert 0.05 < outcome.lingered_s < 3.0 and outcome.unsettled == 0
    assert _Delayed.answered == 20 and elapsed < 0.5 + 3.5
    # With a short linger the rest are given up: the whole step is bounded anyway.
    started = time.perf_counter()
    outcome = asyncio.run(open_loop(_request(delayed, 8000), [Phase("steady", 50.0, 0.4)],
                                    0.1, hard_end=HardEnd(0.5, 0.2)))
    assert time.perf_counter() - started < 0.5 + 0.2 + 4.0      # the answers take 8 s
    errors = outcome.phases["steady"].errors  # given up at the timeout plus the linger
    assert outcome.lingered_s <= 0.5 and sum(errors.values()) == 20
    assert set(errors) <= {"unanswered", "timeout"}


def test_an_answer_after_the_timeout_is_a_timeout_on_a_kept_connection(delayed: str) -> None:
    _Delayed.answered = 0
    outcome = asyncio.run(open_loop(_request(delayed, 150), [Phase("steady", 20.0, 0.5)], 0.1,
                                    hard_end=HardEnd(1.0, 2.0)))
    steady = outcome.phases["steady"]
    assert steady.errors == {"timeout": 10} and _Delayed.answered == 10
    assert 99.0 <= steady.percentile_ms(99) < 150.0     # the timeout, not the 150 ms answer


class _LosesTheFirst(BaseHTTPRequestHandler):
    """Answers at once, except the first `lost` requests: those only after 3 s, as if the
    server had lost them. No real server loses requests on demand."""

    protocol_version = "HTTP/1.1"
    wbufsize = -1   # the head and body in one write: two wait on Nagle and a delayed ACK
    lost = 0
    counting = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        with self.counting:
            losing = type(self).lost > 0
            type(self).lost -= 1
        if losing:
            threading.Event().wait(3.0)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(b"ok")
            self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def test_requests_past_the_timeout_do_not_hold_the_in_flight_slots() -> None:
    # Four requests are lost, four slots in all: each is a timeout 100 ms after its send,
    # and its slot goes to the next arrival; the rest are answered. Held for the whole
    # linger, the four slots made every later arrival a client_overload (0 completed).
    _LosesTheFirst.lost = 4
    with serving(_LosesTheFirst) as url:
        outcome = asyncio.run(open_loop(_request(url, 0), [Phase("steady", 50.0, 1.0)], 0.1,
                                        max_in_flight=4, hard_end=HardEnd(1.2, 1.0)))
    # Arrivals while the four are still inside their timeout (80 to ~160 ms) find no slot.
    steady = outcome.phases["steady"]
    assert steady.errors["timeout"] == 4 and steady.completed >= 36
    assert set(steady.errors) <= {"timeout", "client_overload"}


def test_draining_waits_for_one_prompt_answer(delayed: str) -> None:
    drained = asyncio.run(until_prompt(_request(delayed, 0), 0.05, 1.0))
    assert drained.drained and drained.requests == 1
    stuck = asyncio.run(until_prompt(_request(delayed, 300), 0.05, 0.5))
    assert not stuck.drained and 0.5 <= stuck.seconds < 1.5      # bounded near its 0.5 s limit


def test_a_step_that_has_failed_stops_sending(delayed: str) -> None:
    # Past its error budget a step has failed whatever comes: the rest are not sent, so
    # that an overload lasts no longer than it must.
    outcome = asyncio.run(open_loop(_request(delayed, 300), [Phase("steady", 50.0, 1.0)], 0.1,
                                    hard_end=HardEnd(1.1, 1.0, max_errors=2)))
    errors = outcome.phases["steady"].errors
    assert errors["unsent"] > 20 and sum(errors.values()) == 50


def test_a_holds_warm_up_errors_neither_stop_it_nor_count(delayed: str) -> None:
    # Every request times out. The warm-up's errors do not stop the window: all of it is
    # sent; the block after it stops sending once its own errors pass the budget.
    phases = [Phase("part0", 20.0, 0.5), Phase("burst", 20.0, 1.0)]
    outcome = asyncio.run(open_loop(_request(delayed, 150), phases, 0.1,
                                    hard_end=HardEnd(1.6, 1.0, max_errors=2,
                                                     warmup_phases=1)))
    assert "unsent" not in outcome.phases["part0"].errors
    assert outcome.phases["part0"].error_count == 10
    assert outcome.phases["burst"].errors["unsent"] > 0
    # The hold's error rate is that of the blocks after its warm-up.
    quiet = replace(outcome, phases={"part0": outcome.phases["part0"],
                                     "burst": LoadResult(1.0)})
    assert step_measurement(20.0, 1.0, quiet, True, 0.95).error_rate == 0.0
    assert step_measurement(20.0, 1.0, quiet, False, 0.95).error_rate == 1.0


def test_the_threshold_is_held_first_then_the_capacity_refined() -> None:
    clock, calls = FakeClock(), recorded()
    search = find_capacity(queue(1000.0, clock, calls), settler(clock), 1600.0,
                           settings(budget_s=40.0), clock, threshold_rps=100.0)
    first = search.steps[0]
    # The lowest rate a 3 s hold has 700 samples for (280/s), above the threshold.
    assert first.hold and first.passed and first.rate_rps == pytest.approx(280.0)
    assert search.threshold_outcome == "held" and search.bound == "exact"
    gate = capacity_gate(search, 100.0)
    assert gate is not None and gate.outcome == "passed"
    assert search.confirmed is not None and search.confirmed.rate_rps > 800.0


def test_a_failed_hold_at_the_threshold_fails_the_gate() -> None:
    clock, calls = FakeClock(), recorded()
    search = find_capacity(queue(90.0, clock, calls), settler(clock), 150.0,
                           settings(budget_s=60.0), clock, threshold_rps=100.0)
    assert search.steps[0].hold and search.steps[0].rate_rps == 100.0
    assert search.threshold_outcome == "failed"
    # Failed, whatever the search then found below the threshold.
    gate = capacity_gate(search, 100.0)
    assert gate is not None and gate.outcome == "failed"


def test_an_undecided_hold_measures_on_until_decided() -> None:
    # Blocks whose p99 interval straddles the SLO at first, then clearly within it: the
    # hold goes on (one recorded step of several segments) and passes once decided.
    clock, segments = FakeClock(), recorded()

    def step(rate: float, duration_s: float, hold: bool = False) -> capacity.StepOutcome:
        clock.now += duration_s
        segments.append(duration_s)
        p99s = [30.0, 48.0, 30.0, 48.0, 30.0, 48.0] if len(segments) == 1 else [30.0] * 6
        blocks = tuple(capacity_hold.Block(200, 2.0, p) for p in [5.0, *p99s])
        return judge(replace(measured(rate, duration_s=duration_s), blocks=blocks,
                             settled_p99_ms=max(p99s)), LIMITS, on_bound=True)

    held = capacity.hold_rate(step, settler(clock), 100.0, settings(budget_s=60.0), LIMITS,
                              clock)
    assert held.passed and held.segments == len(segments) >= 2
    assert held.duration_s == pytest.approx(sum(segments))
    # Never decided: it stops at the looks' cap, undecided (not a pass).
    clock.now, segments[:] = 0.0, []

    def straddling(rate: float, duration_s: float, hold: bool = False) -> capacity.StepOutcome:
        clock.now += duration_s
        segments.append(duration_s)
        blocks = tuple(capacity_hold.Block(200, 2.0, p)
                       for p in [5.0, 30.0, 49.0, 30.0, 49.0, 30.0, 49.0])
        return judge(replace(measured(rate, duration_s=duration_s), blocks=blocks,
                             settled_p99_ms=47.0), LIMITS, on_bound=True)

    undecided = capacity.hold_rate(straddling, settler(clock), 100.0, settings(budget_s=60.0),
                                   LIMITS, clock)
    assert undecided.verdict == "undecided" and len(segments) == capacity_hold.HOLD_LOOKS


def test_a_block_over_the_slo_blocks_a_pass_until_the_hold_can_weigh_it() -> None:
    def blocks(count: int) -> list[capacity_hold.Block]:
        # One episode: a block at 55 ms among blocks at 10 ms.
        return [capacity_hold.Block(200, 2.0, 55.0 if i == 2 else 10.0) for i in range(count)]

    # One segment's worth: the interval is within 50 ms, but the episode is not weighed.
    short = capacity_hold.judge_hold(blocks(6), 12.0, 50.0, 0.99)
    assert short.interval_ms[1] is not None and short.interval_ms[1] <= 50.0
    assert short.verdict == "undecided" and "1 of 6 blocks" in short.reason
    # Four segments' worth: one such block in 24 is weighed, where episodes may be (a
    # rate under half the knee's throughput), and never nearer the knee.
    weighed = capacity_hold.judge_hold(blocks(24), 12.0, 50.0, 0.99, weigh_episodes=True)
    assert weighed.verdict == "pass"
    assert capacity_hold.judge_hold(blocks(18), 12.0, 50.0, 0.99, True).verdict == "undecided"
    assert capacity_hold.judge_hold(blocks(24), 12.0, 50.0, 0.99).verdict == "undecided"


def test_the_sized_budget_fits_a_hold_at_the_threshold_after_a_miss_above_it() -> None:
    # A slow threshold: 700 samples at 10/s take 84 s; the first hold is at 168/s, where
    # one 5 s segment has them (under half the knee's throughput: no span waited for).
    spanned = replace(settings(budget_s=0.0, hold_s=5.0), hold_span_s=10.0)
    budget = spanned.needed_budget(200.0, 10.0)
    clock = FakeClock()

    def missing_above_ten(rate: float, duration_s: float, hold: bool = False,
                          ) -> capacity.StepOutcome:
        clock.now += duration_s
        return judge(measured(rate, p99=5.0 if rate <= 10.0 else 80.0,
                              duration_s=duration_s), LIMITS)

    search = find_capacity(missing_above_ten, settler(clock), 400.0,
                           replace(spanned, budget_s=budget), clock, threshold_rps=10.0)
    holds = [step for step in search.steps if step.hold]
    assert [round(step.rate_rps) for step in holds[:2]] == [168, 10]
    assert search.threshold_outcome == "held" and clock.now <= budget


def test_a_hold_fails_on_errors_once_the_binomial_bound_decides() -> None:
    # 840 requests at an SLO of 0.1%: 4 errors or more come by chance under 5% of the time.
    assert capacity.failing_errors(840, 0.001, 0.95) == 4
    two = judge(measured(10.0, samples=840, errors=2 / 840), LIMITS, on_bound=True)
    assert two.verdict == "undecided" and "4 would decide" in two.reason
    four = judge(measured(10.0, samples=840, errors=4 / 840), LIMITS, on_bound=True)
    assert four.verdict == "fail"
    # A short step only locates the capacity: its point estimate decides.
    assert judge(measured(10.0, samples=840, errors=2 / 840), LIMITS).verdict == "fail"


def test_a_pass_waits_for_the_span_only_near_the_knee() -> None:
    # One clean segment of 3 s against a 20 s span: near the knee it is undecided (an
    # episode the hold missed could have failed it); under half the knee's throughput a
    # server slowed to half its speed still keeps up, so it passes at once.
    blocks = tuple(capacity_hold.Block(200, 2.0, p) for p in [5.0, *[10.0] * 6])
    segment = judge(replace(measured(100.0, duration_s=3.0), blocks=blocks,
                            settled_p99_ms=10.0), LIMITS, on_bound=True)
    near = capacity.combine_segments([segment], LIMITS, 20.0, weigh_episodes=False)
    assert near.verdict == "undecided" and "20s a pass needs" in near.reason
    far = capacity.combine_segments([segment], LIMITS, 20.0, weigh_episodes=True)
    assert far.verdict == "pass"


def test_a_hold_near_the_knee_looks_half_way_through_its_span() -> None:
    # A 30 s span in two halves: a hold whose p99 is over the SLO fails at the first look
    # (15 s, not 30 s); a clean one is undecided there and passes once it has lasted 30 s.
    spanned = replace(settings(budget_s=120.0), hold_span_s=30.0)
    assert spanned.span_segments(1000.0) == [15.0, 15.0]
    assert spanned.span_cost(1000.0) == pytest.approx(2 * (15.0 + 0.2))

    def hold(p99_ms: float) -> tuple[capacity.StepOutcome, list[float]]:
        clock, segments = FakeClock(), recorded()

        def step(rate: float, duration_s: float, hold: bool = False) -> capacity.StepOutcome:
            clock.now += duration_s
            segments.append(duration_s)
            blocks = tuple(capacity_hold.Block(2000, 2.0, p99_ms) for _ in range(7))
            return judge(replace(measured(rate, duration_s=duration_s), blocks=blocks,
                                 settled_p99_ms=p99_ms), LIMITS, on_bound=True)

        return capacity.hold_rate(step, settler(clock), 1500.0, spanned, LIMITS,
                                  clock), segments

    missed, looked = hold(80.0)
    assert missed.verdict == "fail" and looked == [15.0]
    held, looked = hold(10.0)
    assert held.passed and looked == [15.0, 15.0] and held.duration_s == pytest.approx(30.0)
    # Where half the span is too short for a segment's samples, the span is one segment.
    assert replace(spanned, hold_s=20.0).span_segments(1000.0) == [30.0]


class _AnswersAtOnce:
    """A transport whose every answer is a timeout, with no wait (a unit's own fault)."""

    async def send(self, timeout_s: float) -> Sent:
        return Sent("timeout", None)

    async def close(self) -> None:
        """Nothing to close."""


def test_a_request_answered_just_before_the_hard_end_is_counted_once() -> None:
    # The race behind a 21-of-20 tally: a request finished (and counted) but its
    # done-callback had not yet taken it out of the in-flight set when the hard end came.
    async def race() -> dict[str, int]:
        window = _OpenLoopWindow([Phase("steady", 10.0, 0.1)], [(0.0, "steady")], 0.1, 8,
                                 HardEnd(0.1, 0.1), _AnswersAtOnce())
        bucket = window.results["steady"]
        task = asyncio.create_task(window.one(0.0, 0.0, bucket, False))
        window.in_flight[task] = (bucket, False)
        while not task.done():
            await asyncio.sleep(0)
        window.detach()
        return dict(bucket.errors)

    assert asyncio.run(race()) == {"timeout": 1}
