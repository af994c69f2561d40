"""The gates on an exact or t bound: error rate, throughput; inconclusive accepted or not;
a window the client could not drive."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.gates.error_rate import GATE as ERROR_GATE
from pipeline.gates.error_rate import error_rate_gate
from pipeline.gates.latency import client_limited, window_seconds
from pipeline.gates.throughput import GATE as THROUGHPUT_GATE
from pipeline.gates.throughput import span_rates, throughput_gate
from pipeline.measure.load_result import LoadResult
from pipeline.servers.specs import load_spec
from pipeline.stage_result import Gate, StageResult, Status
from pipeline.statistics.distributions import clopper_pearson, t_quantile, trials_to_bound_zero


def test_exact_binomial_bounds_and_t_quantiles() -> None:
    low, high = clopper_pearson(0, 3000, 0.05)
    assert low == 0.0 and high == pytest.approx(1 - 0.05 ** (1 / 3000), rel=1e-6)
    low, high = clopper_pearson(10, 100, 0.025)        # R: binom.test(10, 100)$conf.int
    assert low == pytest.approx(0.04900, abs=2e-4) and high == pytest.approx(0.17622, abs=2e-4)
    assert t_quantile(0.975, 5) == pytest.approx(2.5706, abs=1e-3)
    assert t_quantile(0.95, 30) == pytest.approx(1.6973, abs=1e-3)
    assert trials_to_bound_zero(0.001, 0.05) == 2995


def test_the_error_rate_fails_on_its_lower_bound_and_passes_on_its_upper() -> None:
    failed = error_rate_gate(30, 10_000, 0.001, 0.05)          # 0.3% against 0.1%
    assert failed.name == ERROR_GATE and failed.outcome == "failed"
    assert error_rate_gate(0, 10_000, 0.001, 0.05).outcome == "passed"
    # At the SLO itself: never a pass.
    at_slo = error_rate_gate(10, 10_000, 0.001, 0.05)
    assert at_slo.outcome == "inconclusive" and "straddles" in at_slo.reason


def test_no_error_in_too_few_requests_is_inconclusive_with_the_count_needed() -> None:
    few = error_rate_gate(0, 800, 0.001, 0.05, "raise stages.latency.duration")
    assert few.outcome == "inconclusive"
    assert "about 2195 more requests" in few.reason and "stages.latency.duration" in few.reason
    assert error_rate_gate(0, 0, 0.001, 0.05).observed == "not measured"


def paced(rates: list[float], seconds: float = 1.0) -> LoadResult:
    """A window whose completions come at each rate in turn, for equal spans of time."""
    window = LoadResult(seconds)
    span = seconds / len(rates)
    for index, rate in enumerate(rates):
        count = round(rate * span)
        for k in range(count):
            window.record(1000, index * span + (k + 0.5) / count * span)
    return window


def test_throughput_fails_on_its_upper_bound() -> None:
    failed = throughput_gate([paced([85, 86, 84, 85]), paced([86, 85, 85, 84])], 100.0, 0.05)
    assert failed.name == THROUGHPUT_GATE and failed.outcome == "failed"
    assert failed.samples == 8 and failed.observed == pytest.approx(85, abs=1)
    # Two windows a factor 2 apart, far over the threshold: still a pass.
    passed = throughput_gate([paced([800] * 4), paced([1600] * 4)], 100.0, 0.05)
    assert passed.outcome == "passed"
    straddling = throughput_gate([paced([40, 250, 60, 200]), paced([300, 50, 90, 120])],
                                 100.0, 0.05)
    assert straddling.outcome == "inconclusive"
    assert not throughput_gate([], 100.0, 0.05).passed


def test_the_throughput_gates_observed_value_is_the_figure_its_interval_bounds() -> None:
    # Bursts: one span in four at 3,000/s, the rest at 100/s. Completions over time (825/s)
    # lie above the interval of the geometric mean; the gate shows that mean, in its bounds.
    bursty = throughput_gate([paced([3000, 100, 100, 100]) for _ in range(8)], 100.0, 0.05)
    assert bursty.interval is not None and isinstance(bursty.observed, float)
    low, high = (float(bound or 0.0) for bound in bursty.interval)
    assert low <= bursty.observed <= high < 825
    assert "overall 825.0/s" in bursty.reason


def test_a_stalled_span_is_a_low_rate_and_a_window_without_a_timeline_one_rate() -> None:
    stalled = span_rates(paced([400, 0, 400, 400]))
    assert len(stalled) == 4 and stalled[1] == pytest.approx(2.0)   # half a completion
    remote = LoadResult(2.0)
    remote.completed = 500                     # counted by workers, no timeline
    assert span_rates(remote) == [250.0]


def test_accepting_inconclusive_never_passes_what_leans_to_a_miss() -> None:
    under = Gate.decided("latency.p99", 48.0, 50.0, "inconclusive", "<=", "ms",
                         (40.0, 55.0), 900, "straddles")
    over = Gate.decided("latency.p99", 56.0, 50.0, "inconclusive", "<=", "ms",
                        (48.0, 64.0), 900, "straddles")
    assert StageResult.judged("latency", [under], "ok",
                              accept_inconclusive=True).status is Status.PASSED
    refused = StageResult.judged("latency", [over], "ok", accept_inconclusive=True)
    assert refused.status is Status.FAILED and "latency.p99" in refused.message
    low_rate = Gate.decided("latency.throughput", 90.0, 100.0, "inconclusive", ">=", "/s",
                            (70.0, 110.0), 3, "straddles")
    assert StageResult.judged("latency", [low_rate], "ok",
                              accept_inconclusive=True).status is Status.FAILED


def test_a_window_whose_client_waited_for_a_cpu_is_named() -> None:
    window = LoadResult(1.0)
    for index in range(1000):
        window.record(2000, index / 1000)               # 2 ms each
    assert window.requests == 1000 == window.histogram.get_total_count()
    window.client_wait_s = 0.1                          # 0.1 ms a request: not limited
    assert client_limited(window) is None
    window.client_wait_s = 1.0                          # 1 ms a request for a CPU
    why = client_limited(window)
    assert why is not None and "short of CPU" in why
    window.client_wait_s = None                         # the platform does not say
    assert client_limited(window) is None


def test_a_window_holds_the_requests_a_bound_needs_up_to_the_cap() -> None:
    spec = load_spec(Path(__file__).parents[2] / "examples/torchserve/serve.yaml").spec
    stage = spec.stages.latency
    windows = stage.stability.max_windows
    shortest = stage.duration.seconds / windows
    # A fast server: duration / max_windows already holds window_requests.
    assert window_seconds(spec, stage.window_requests / shortest * 10) == pytest.approx(shortest)
    # A slow one: each window lasts long enough for window_requests at the warm-up's rate.
    slow = stage.window_requests / (2 * shortest)
    assert window_seconds(spec, slow) == pytest.approx(2 * shortest)
    # Slower still, or no rate at all: the windows stop at max_duration in all.
    longest = stage.max_duration.seconds / windows
    assert window_seconds(spec, 1.0) == pytest.approx(longest)
    assert window_seconds(spec, 0.0) == pytest.approx(longest)


def test_a_zero_error_rate_slo_is_judged_on_the_count() -> None:
    """slo.error_rate left out is 0%: no bound meets it, so the count decides; no crash."""
    from pipeline.gates.error_rate import error_rate_gate, requests_to_decide

    clean = error_rate_gate(0, 16_000, 0.0, 0.01)
    assert clean.passed and clean.outcome == "passed"
    assert "an SLO of 0% is judged on the count" in clean.reason
    one = error_rate_gate(1, 16_000, 0.0, 0.01)
    assert not one.passed and one.outcome == "failed"
    assert requests_to_decide(0, 16_000, 0.0, 0.01) is None
