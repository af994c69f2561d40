"""Percentile verdicts: the order-statistic bounds, the sequential decision, censoring."""

from __future__ import annotations

import asyncio
import math
import random
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram

from pipeline.gates.evidence import evidence_of
from pipeline.gates.latency import percentile_gate
from pipeline.gates.percentile_verdict import PercentileVerdict, judge_percentile
from pipeline.measure.load_result import merge_windows
from pipeline.measure.loadgen import LoadResult, closed_loop, new_histogram
from pipeline.request_types import HttpRequest
from pipeline.servers.specs import load_spec
from pipeline.stage_result import Gate, GateOutcome, StageResult, Status
from pipeline.statistics.order_stats import quantile_interval_us, quantile_ranks, values_at_ranks
from pipeline.statistics.sequential import WindowPlan, run_windows
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


def window_us(rng: random.Random, centre_us: float, count: int = 600,
              batch: int = 1) -> LoadResult:
    """A window of Exp(centre) latencies in completion order; `batch` consecutive requests
    share one latency (a dynamically formed batch)."""
    result = LoadResult(1.0)
    value = 1
    for index in range(count):
        if index % batch == 0:
            value = int(rng.expovariate(1.0) * centre_us) + 1
        result.record(value, index / count)
    return result


def verdict_of(windows: list[LoadResult], threshold_ms: float,
               alpha: float = 0.05) -> PercentileVerdict:
    evidence = evidence_of(windows, merge_windows(windows), 99)
    return judge_percentile(evidence, 99, threshold_ms, alpha)


def judge(windows: list[LoadResult], threshold_ms: float, alpha: float = 0.05) -> str:
    return verdict_of(windows, threshold_ms, alpha).outcome


def test_clear_pass_clear_fail_and_straddle() -> None:
    rng = random.Random(6)
    windows = [window_us(rng, 1000) for _ in range(3)]   # p99 of Exp: 4.6 ms
    assert judge(windows, 50) == "passed"
    assert judge(windows, 2) == "failed"
    straddle = verdict_of(windows, 4.6)
    assert straddle.outcome == "inconclusive" and "straddles" in straddle.reason
    assert straddle.low_ms is not None and straddle.high_ms is not None
    assert straddle.low_ms <= 4.6 <= straddle.high_ms


def test_requests_sharing_a_batch_count_as_fewer_samples() -> None:
    rng = random.Random(4)
    independent = verdict_of([window_us(rng, 1000, 4000) for _ in range(3)], 5.0)
    batched = verdict_of([window_us(rng, 1000, 4000, batch=8) for _ in range(3)], 5.0)
    assert independent.design_effect < 3 <= batched.design_effect
    assert batched.effective_samples < independent.effective_samples / 2
    assert independent.samples == batched.samples == 12000
    # The wider bound of the batched stream: at least as wide as the independent one's.
    assert batched.high_ms is not None and independent.high_ms is not None
    assert batched.low_ms is not None and independent.low_ms is not None
    assert batched.high_ms - batched.low_ms > independent.high_ms - independent.low_ms


def test_a_window_far_from_the_others_is_named() -> None:
    rng = random.Random(6)
    steady = [window_us(rng, 1000, 3000) for _ in range(5)]
    slow = window_us(rng, 3000, 3000)                    # one window far slower
    verdict = verdict_of([*steady[:2], slow, *steady[2:]], 30.0)
    assert verdict.outlier is not None and verdict.outlier.window == 2
    assert abs(verdict.outlier.z) > verdict.outlier.critical
    assert verdict_of(steady, 30.0).outlier is None


def test_no_samples_fail_closed_and_thin_ones_are_inconclusive() -> None:
    assert judge([LoadResult(1.0)], 50) == "failed"
    thin = verdict_of([window_us(random.Random(1), 1000, 150)], 50)
    assert thin.outcome == "inconclusive" and "too few requests" in thin.reason


def steady_windows(requests: int, value_us: int = 1000, count: int = 3) -> list[LoadResult]:
    """`count` windows sharing `requests` requests that all took `value_us`."""
    windows = []
    for index in range(count):
        window = LoadResult(1.0)
        share = requests // count + (index < requests % count)
        for request in range(share):
            window.record(value_us, request / max(share, 1))
        windows.append(window)
    return windows


def test_an_undecided_verdict_says_a_number_of_requests_that_decides_it() -> None:
    # 300 requests at 1ms against 50ms at 80% confidence: with the design effect's floor of
    # 2, 150 effective requests, too few for an upper bound on p99 (0.99^150 > 0.2).
    thin = verdict_of(steady_windows(300), 50, alpha=0.2)
    assert thin.outcome == "inconclusive" and "too few requests" in thin.reason
    assert thin.more_requests is not None and thin.more_requests >= 1
    assert verdict_of(steady_windows(300 + thin.more_requests), 50, alpha=0.2).outcome \
        == "passed"
    # Roughly the fewest: a tenth fewer would not decide.
    fewer = 300 + thin.more_requests * 9 // 10
    assert verdict_of(steady_windows(fewer), 50, alpha=0.2).outcome == "inconclusive"


def test_the_latency_gate_names_more_requests_and_windows_never_0(project: Path) -> None:
    spec = load_spec(project / "serve.yaml").spec
    windows = steady_windows(300)
    gate = percentile_gate(spec, verdict_of(windows, 50, alpha=0.2), 50, windows, 10.0)
    found = re.search(r"about (\d+) more requests \(~(\d+) more windows\)", gate.reason)
    assert found is not None, gate.reason
    assert int(found[1]) >= 1 and int(found[2]) >= 1


@dataclass(frozen=True)
class _Look:
    verdict: PercentileVerdict

    @property
    def decided(self) -> bool:
        return self.verdict.outcome != "inconclusive"

    @property
    def outlier(self) -> int | None:
        return None


def test_sequential_decision_stops_early_when_clear_and_gives_up_at_the_cap() -> None:
    rng = random.Random(9)

    def run(centre_us: float, threshold_ms: float) -> tuple[int, str]:
        measured = run_windows(lambda i: window_us(rng, centre_us, 2000),
                               lambda ws, alpha: _Look(verdict_of(ws, threshold_ms, alpha)),
                               lambda _: None, WindowPlan(3, 10, 0))
        assert measured.last is not None
        return len(measured.windows), measured.last.verdict.outcome

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
        Gate("x", 1.0, 2.0, True, outcome=GateOutcome.INCONCLUSIVE)
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
    assert recorded == result.requests    # one count: late answers in both
    censored = sum(item.count_added_in_this_iter_step
                   for item in result.histogram.get_recorded_iterator()
                   if item.value_iterated_to >= 199_000)
    assert censored >= result.error_count
    # About a third of the requests failed: p99 (even p50 here) is the timeout.
    assert result.percentile_ms(99) >= 200
