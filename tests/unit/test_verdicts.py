"""Percentile verdicts: the order-statistic bounds, the sequential decision, censoring."""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from http.server import BaseHTTPRequestHandler

import pytest
from hdrh.histogram import HdrHistogram

from pipeline.gates.order_stats import quantile_interval_us, quantile_ranks, values_at_ranks
from pipeline.gates.verdict import judge_percentile, per_look_confidence
from pipeline.measure.loadgen import LoadResult, closed_loop, new_histogram
from pipeline.measure.stability import measure_until_decided, merge
from pipeline.results import Gate, StageResult, Status
from pipeline.servers.base import HttpRequest
from tests.support.http_server import serving


def exact_ranks(n: int, q: float, c: float) -> tuple[int, int]:
    p = Fraction(q).limit_denominator(1000)
    cdf, running = [], Fraction(0)
    for k in range(n + 1):
        running += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        cdf.append(float(running))
    upper = next((k for k in range(1, n + 1) if cdf[k - 1] >= c), n + 1)
    lower = max((k for k in range(1, n + 1) if cdf[k - 1] <= 1 - c), default=0)
    return lower, upper


@pytest.mark.parametrize("n", [1, 20, 100, 299, 300, 600])
@pytest.mark.parametrize("q", [0.5, 0.95, 0.99])
def test_ranks_match_the_exact_binomial(n: int, q: float) -> None:
    for c in (0.9, 0.95, 0.99):
        assert quantile_ranks(n, q, c) == exact_ranks(n, q, c)


def test_too_few_samples_give_no_upper_bound() -> None:
    # 1 - 0.99**n >= 0.95 needs n >= 299: below that no sample bounds p99 from above.
    assert quantile_ranks(298, 0.99, 0.95)[1] == 299
    assert quantile_ranks(299, 0.99, 0.95)[1] == 299


def test_coverage_by_simulation() -> None:
    rng = random.Random(11)
    n, q, c, trials = 400, 0.99, 0.9, 1500
    true_quantile = -math.log(1 - q)          # of Exp(1)
    lower, upper = quantile_ranks(n, q, c)
    upper_holds = lower_holds = 0
    for _ in range(trials):
        ordered = sorted(rng.expovariate(1.0) for _ in range(n))
        upper_holds += ordered[upper - 1] >= true_quantile
        lower_holds += lower == 0 or ordered[lower - 1] <= true_quantile
    # Each one-sided bound covers at least c (binomial ranks are conservative), and
    # not absurdly more than that.
    for holds in (upper_holds, lower_holds):
        assert c - 0.025 <= holds / trials <= 0.995


def histogram_of(values_us: list[int]) -> HdrHistogram:
    histogram = new_histogram()
    for value in values_us:
        histogram.record_value(value)
    return histogram


def test_hdr_resolution_only_widens_the_interval() -> None:
    values = sorted(random.Random(3).randrange(1_000, 90_000) for _ in range(2000))
    histogram = histogram_of(values)
    for rank in (1, 17, 1000, 1990, 2000):
        low, high = values_at_ranks(histogram, [rank])[0]
        assert low <= values[rank - 1] <= high and high - low <= values[rank - 1] * 0.002
    low_us, high_us = quantile_interval_us(histogram, 0.99, 0.95)
    lower, upper = quantile_ranks(2000, 0.99, 0.95)
    assert low_us is not None and high_us is not None
    assert low_us <= values[lower - 1] and high_us >= values[upper - 1]


def window_us(rng: random.Random, centre_us: float, count: int = 600) -> LoadResult:
    result = LoadResult(1.0)
    result.completed = count
    for _ in range(count):
        result.histogram.record_value(int(rng.expovariate(1.0) * centre_us) + 1)
    return result


def judge(windows: list[LoadResult], threshold_ms: float, c: float = 0.95) -> str:
    merged = merge(windows)
    return judge_percentile(merged.histogram, [w.histogram for w in windows], 99, threshold_ms,
                            c).outcome


def test_clear_pass_clear_fail_and_straddle() -> None:
    # Seed 5 draws one of the 5% of samples whose bound misses; 6 is a typical one.
    rng = random.Random(6)
    windows = [window_us(rng, 1000) for _ in range(3)]   # p99 of Exp: 4.6 ms
    assert judge(windows, 50) == "passed"
    assert judge(windows, 2) == "failed"
    assert judge(windows, 4.6) == "inconclusive"


def test_windows_that_disagree_cannot_pass_or_fail_on_the_pooled_bound() -> None:
    rng = random.Random(6)
    steady = [window_us(rng, 1000, 3000) for _ in range(5)]
    drifting = [*steady, window_us(rng, 3000, 600)]      # one window far slower
    verdict = judge_percentile(merge(drifting).histogram, [w.histogram for w in drifting],
                               99, 8.0, 0.95)
    assert verdict.high_ms is not None and verdict.high_ms <= 8.0   # pooled alone: pass
    assert verdict.outcome == "inconclusive" and "windows disagree" in verdict.reason


def test_no_samples_fail_closed_and_thin_ones_are_inconclusive() -> None:
    assert judge([LoadResult(1.0)], 50) == "failed"
    assert judge([window_us(random.Random(1), 1000, 150)], 50) == "inconclusive"


def test_sequential_decision_stops_early_when_clear_and_gives_up_at_the_cap() -> None:
    c = per_look_confidence(0.95, looks=8)
    rng = random.Random(9)

    def run(centre_us: float, threshold_ms: float) -> tuple[int, str]:
        measured = measure_until_decided(
            lambda i: (window_us(rng, centre_us), None),
            lambda ws: judge(ws, threshold_ms, c) != "inconclusive",
            min_windows=3, max_windows=10)
        return len(measured.windows), judge(measured.windows, threshold_ms, c)

    assert run(1000, 50) == (3, "passed")
    assert run(1000, 1.5) == (3, "failed")
    assert run(1000, 4.6) == (10, "inconclusive")


def test_gate_outcomes_and_old_records() -> None:
    old = {"name": "latency.p99", "observed": 3.0, "threshold": 50.0, "passed": True,
           "comparison": "<=", "unit": "ms"}
    gate = StageResult.from_json({"name": "latency", "status": "passed",
                                  "gates": [old]}).gates[0]
    assert gate.outcome == "passed" and gate.interval is None and gate.samples is None
    assert Gate.at_most("x", 3.0, 2.0).outcome == "failed"
    with pytest.raises(ValueError):
        Gate("x", 1.0, 2.0, True, outcome="inconclusive")
    unsure = Gate.decided("latency.p99", 49.0, 50.0, "inconclusive", "<=", "ms",
                          (45.0, None), 120, "too few requests")
    again = StageResult.from_json(StageResult("latency", Status.FAILED, gates=[unsure])
                                  .to_json()).gates[0]
    assert again == unsure and not again.passed
    assert "INCONCLUSIVE" in unsure.describe() and "[45, -]ms" in unsure.describe()
    assert StageResult.judged("latency", [unsure], "ok").status is Status.FAILED
    accepted = StageResult.judged("latency", [unsure], "ok", accept_inconclusive=True)
    assert accepted.status is Status.PASSED and "inconclusive" in accepted.message


class _Flaky(BaseHTTPRequestHandler):
    """Every 3rd request: a fast 500; every 5th: no answer within the client timeout."""

    calls = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        with self.lock:
            type(self).calls += 1
            call = self.calls
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if call % 5 == 0:
            time.sleep(0.5)
        status = 500 if call % 3 == 0 else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky_url() -> Iterator[str]:
    with serving(_Flaky) as url:
        yield f"{url}/infer"


def test_failed_and_timed_out_requests_count_at_the_timeout(flaky_url: str) -> None:
    request = HttpRequest("POST", flaky_url, b"{}", {"Content-Type": "application/json"})
    result = asyncio.run(closed_loop(request, 2, 1.5, 0.2))
    recorded = result.histogram.get_total_count()
    assert result.errors["timeout"] > 0 and result.errors["http_500"] > 0
    assert recorded >= result.completed + result.error_count - 2  # late answers included
    censored = sum(item.count_added_in_this_iter_step
                   for item in result.histogram.get_recorded_iterator()
                   if item.value_iterated_to >= 199_000)
    assert censored >= result.error_count
    # About a third of the requests failed: p99 (even p50 here) is the timeout.
    assert result.percentile_ms(99) >= 200
