"""The paired regression verdict: signed-rank bounds, error counts, margins, looks."""

from __future__ import annotations

import itertools
import math
import random
import typing

import numpy as np
import pytest

from pipeline.regression.error_counts import binomial_cdf, compare_errors, rate_bounds
from pipeline.regression.paired import (
    WATCHABLE,
    PairedRound,
    PairedSettings,
    Schedule,
    WindowFigures,
    judge,
    run_sequential,
)
from pipeline.regression.settings import paired_settings
from pipeline.regression.signed_rank import bound_rank, median_interval
from pipeline.spec.stage_settings import RegressionStage, WatchedSideBySide
from pipeline.statistics.distributions import normal_quantile


def figures(scale: float, errors: int = 0, requests: int = 1000) -> WindowFigures:
    return WindowFigures(4.0 * scale, 6.0 * scale, 8.0 * scale, 1000.0 / scale, errors,
                         requests)


def rounds_at(ratios: list[float]) -> list[PairedRound]:
    return [PairedRound(figures(ratio), figures(1.0)) for ratio in ratios]


def jittered(center: float, n: int, spread: float, seed: int = 7) -> list[float]:
    rng = random.Random(seed)
    return [center * math.exp(rng.uniform(-spread, spread)) for _ in range(n)]


def test_bound_rank_matches_the_exact_signed_rank_distribution() -> None:
    # n = 6: only the all-positive pattern (1 of 64) has W+ = 0.
    assert bound_rank(6, 1 / 64) == 1
    assert bound_rank(6, 1 / 65) == 0
    # n = 8, brute force over the 256 sign patterns.
    sums = [sum(r for r, s in zip(range(1, 9), signs, strict=True) if s)
            for signs in itertools.product((0, 1), repeat=8)]
    k = bound_rank(8, 0.02)
    assert sum(w <= k - 1 for w in sums) / 256 <= 0.02 < sum(w <= k for w in sums) / 256


def test_median_interval_is_unbounded_with_too_few_differences() -> None:
    assert median_interval([0.1, 0.2, 0.3], 0.01).high is None
    interval = median_interval([0.1 * i for i in range(10)], 0.02)
    assert interval.low is not None and interval.high is not None
    assert interval.low < interval.estimate < interval.high


def test_median_interval_covers_at_its_stated_error() -> None:
    rng = random.Random(3)
    misses = 0
    for _ in range(600):
        sample = [rng.gauss(0.2, 1.0) for _ in range(10)]
        high = median_interval(sample, 0.05).high
        misses += high is not None and high < 0.2
    assert misses / 600 < 0.05 + 0.03


def test_rate_bounds_are_clopper_pearson() -> None:
    low, high = rate_bounds(0, 8000, 0.025)
    assert low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / 8000), rel=1e-6)
    low, high = rate_bounds(5, 100, 0.025)
    assert binomial_cdf(5, 100, high) == pytest.approx(0.025, abs=1e-6)
    assert 1 - binomial_cdf(4, 100, low) == pytest.approx(0.025, abs=1e-6)


def test_one_error_in_8000_against_none_is_no_regression_not_infinite() -> None:
    compared = compare_errors((1, 8000), (0, 8000), 0.10, 0.001, 0.0125)
    assert compared.outcome == "no_regression"
    assert compared.difference_high < 0.001


def test_many_more_errors_is_a_regression() -> None:
    compared = compare_errors((120, 8000), (2, 8000), 0.10, 0.001, 0.0125)
    assert compared.outcome == "regression"
    assert compared.ratio_low > 1.1 and compared.difference_low > 0.001


def test_a_few_more_errors_are_not_surely_worse() -> None:
    compared = compare_errors((3, 2000), (1, 2000), 0.10, 0.0, 0.0125)
    assert compared.outcome == "no_regression" and "not surely worse" in compared.reason
    assert compared.ratio_high > 1.1                   # not shown within the margin


def test_errors_fail_on_the_absolute_allowance() -> None:
    """60 against 2 in 8,000: a regression at a 0.1% allowance, not at a 1% one."""
    assert compare_errors((60, 8000), (2, 8000), 0.10, 0.001, 0.0125).outcome == "regression"
    assert compare_errors((60, 8000), (2, 8000), 0.10, 0.01, 0.0125).outcome == \
        "no_regression"


def test_no_requests_on_one_side_fails_closed() -> None:
    assert compare_errors((0, 0), (0, 8000), 0.10, 0.001, 0.0125).outcome == "inconclusive"


def test_same_speed_is_no_regression_and_stops_at_the_first_look() -> None:
    settings = PairedSettings(WATCHABLE, 0.10, 0.001, 0.95, Schedule(8, 4, 16))
    ratios = jittered(1.0, 16, 0.02)
    verdict, measured = run_sequential(lambda i: rounds_at(ratios)[i], settings)
    assert verdict.outcome == "no_regression"
    assert len(measured) == 8 and verdict.looks == 1
    p99 = next(v for v in verdict.metrics if v.metric == "p99_ms")
    assert p99.ratio_low is not None and p99.ratio_high is not None
    assert p99.ratio_low < 1.0 < p99.ratio_high < 1.1


def test_25_percent_slower_is_a_regression_on_every_ratio_metric() -> None:
    settings = PairedSettings(WATCHABLE, 0.10, 0.001, 0.95, Schedule(8, 4, 16))
    ratios = jittered(1.25, 16, 0.03)
    verdict, _ = run_sequential(lambda i: rounds_at(ratios)[i], settings)
    assert verdict.outcome == "regression"
    outcomes = {v.metric: v.outcome for v in verdict.metrics}
    assert outcomes == {"p99_ms": "regression", "p95_ms": "regression",
                        "p50_ms": "regression", "throughput_rps": "regression",
                        "error_rate": "no_regression"}


def test_the_gate_fails_on_its_margin() -> None:
    """5% slower: within a 10% margin, a regression against a 3% margin."""
    rounds = rounds_at(jittered(1.05, 16, 0.005))
    within = judge(rounds, ["p99_ms"], 0.10, 0.0125, 0.001, 0.95, 1)
    beyond = judge(rounds, ["p99_ms"], 0.03, 0.0125, 0.001, 0.95, 1)
    assert within.outcome == "no_regression"
    assert beyond.outcome == "regression"
    assert beyond.metrics[0].ratio_low is not None and beyond.metrics[0].ratio_low > 1.03


def test_a_ratio_at_the_margin_stays_inconclusive_to_the_cap() -> None:
    settings = PairedSettings(("p99_ms",), 0.10, 0.001, 0.95, Schedule(8, 4, 16))
    # Symmetric about the margin itself: no amount of rounds can clear or refuse it.
    ratios = [1.10 * math.exp((-1) ** i * 0.02 * (1 + i % 3)) for i in range(16)]
    verdict, measured = run_sequential(lambda i: rounds_at(ratios)[i], settings)
    assert verdict.outcome == "inconclusive" and len(measured) == 16
    assert verdict.looks == 3


def test_throughput_is_judged_in_its_own_direction() -> None:
    rounds = [PairedRound(figures(1.0), figures(1.0)) for _ in range(10)]
    faster = [PairedRound(WindowFigures(4, 6, 8, 700.0 * f, 0, 1000), figures(1.0))
              for f in jittered(1.0, 10, 0.01)]
    assert judge(rounds, ["throughput_rps"], 0.1, 0.02, 0.0, 0.95, 1).outcome == \
        "no_regression"
    assert judge(faster, ["throughput_rps"], 0.1, 0.02, 0.0, 0.95, 1).outcome == "regression"


def test_schedule_always_looks_at_the_cap() -> None:
    assert Schedule(8, 4, 16).looks() == [8, 12, 16]
    assert Schedule(8, 5, 16).looks() == [8, 13, 16]
    errors = [Schedule(8, 8, 24, None).error_at(look, 0.95) for look in range(3)]
    # O'Brien-Fleming-type spending: the first look's bound is the strictest; the later
    # looks' levels add up to more than 5%, as they share their rounds with the looks before.
    assert errors == sorted(errors) and errors[0] < 0.005
    assert sum(errors) > 0.05 and errors[-1] < 0.05
    # Linear spending (the default): the first look spends its share, 8/24 of 5%, at once.
    linear = [Schedule(8, 8, 24).error_at(look, 0.95) for look in range(3)]
    assert linear[0] == pytest.approx(0.05 / 3) and errors[0] < linear[0] < linear[-1] < 0.05


@pytest.mark.parametrize("gamma", [None, -2.0, 1.0])
def test_the_looks_together_keep_the_stated_error(gamma: float | None) -> None:
    """A statistic that is a random walk over rounds crosses its bound at some look in 5%
    of sequences when the truth sits on the bound: the sequence's error, not each look's,
    whichever spending function spends it."""
    schedule = Schedule(16, 16, 96, gamma)
    looks = schedule.looks()
    bounds = np.array([-normal_quantile(schedule.error_at(look, 0.95))
                       for look in range(len(looks))])
    walks = np.cumsum(np.random.default_rng(7).normal(size=(200_000, looks[-1])), axis=1)
    at_looks = walks[:, np.array(looks) - 1] / np.sqrt(looks)
    crossed = (at_looks > bounds).any(axis=1).mean()
    assert crossed == pytest.approx(0.05, abs=0.0025)


def test_the_spec_watches_what_the_verdict_can_judge() -> None:
    stage = RegressionStage.model_validate({"margin": "5%", "watch": ["p99_ms"],
                                            "first_look": 8, "look_every": 8,
                                            "max_rounds": 16})
    settings = paired_settings(stage, 50.0)
    assert set(typing.get_args(WatchedSideBySide)) == set(WATCHABLE)
    assert settings.metrics == ("p99_ms",) and settings.margin == pytest.approx(0.05)
    assert settings.schedule.looks() == [8, 16]
    assert paired_settings(RegressionStage(), 50.0).schedule.looks() == list(range(16, 161, 16))
    # The tail allowance: 2% of slo.p99 unless the spec sets it.
    assert settings.tail_allowance_ms == pytest.approx(1.0)
    assert paired_settings(RegressionStage(), 200.0).tail_allowance_ms == pytest.approx(4.0)
    zero = RegressionStage.model_validate({"tail_allowance": "0ms"})
    assert paired_settings(zero, 50.0).tail_allowance_ms == 0.0
    with pytest.raises(ValueError, match="watch"):
        RegressionStage.model_validate({"watch": ["knee"]})


def tail_rounds(ratio: float, live_p99_ms: float, n: int = 16) -> list[PairedRound]:
    """Rounds whose p95 and p99 are `ratio` times live's (p99 `live_p99_ms`), p50 and
    throughput the same on both sides."""
    def window(scale: float) -> WindowFigures:
        return WindowFigures(1.0, 0.8 * live_p99_ms * scale, live_p99_ms * scale, 1000.0, 0,
                             1000)
    return [PairedRound(window(r), window(1.0)) for r in jittered(ratio, n, 0.01)]


def test_the_tail_allowance_clears_a_small_absolute_change_of_a_fast_tail() -> None:
    """A p99 of 2 ms against 1.5 ms (x1.33): a regression against the margin alone, no
    regression with 1 ms allowed on top (limit 1.1 + 1 / 1.5 = 1.77)."""
    rounds = tail_rounds(1.33, 1.5)
    alone = judge(rounds, ["p99_ms", "p95_ms"], 0.10, 0.0125, 0.001, 0.95, 1)
    allowed = judge(rounds, ["p99_ms", "p95_ms"], 0.10, 0.0125, 0.001, 0.95, 1,
                    tail_allowance_ms=1.0)
    assert alone.outcome == "regression"
    assert allowed.outcome == "no_regression"
    p99 = allowed.metrics[0]
    assert p99.limit == pytest.approx(1.1 + 1.0 / 1.5, rel=0.01)
    assert "1ms over live's 1.5ms" in p99.reason


def test_the_tail_allowance_fails_on_its_threshold() -> None:
    """A 20 ms p99 that grows by 4 ms (x1.2): beyond 10% + 1 ms (limit 1.15), within
    10% + 3 ms (limit 1.25)."""
    rounds = tail_rounds(1.2, 20.0)
    assert judge(rounds, ["p99_ms"], 0.10, 0.0125, 0.001, 0.95, 1,
                 tail_allowance_ms=1.0).outcome == "regression"
    assert judge(rounds, ["p99_ms"], 0.10, 0.0125, 0.001, 0.95, 1,
                 tail_allowance_ms=3.0).outcome == "no_regression"


def test_the_tail_allowance_leaves_the_median_and_throughput_to_the_margin() -> None:
    """25% slower on p50 and throughput is a regression whatever the tail allowance."""
    settings = PairedSettings(("p50_ms", "throughput_rps"), 0.10, 0.001, 0.95,
                              Schedule(8, 4, 16), tail_allowance_ms=100.0)
    ratios = jittered(1.25, 16, 0.03)
    verdict, _ = run_sequential(lambda i: rounds_at(ratios)[i], settings)
    assert {v.metric: v.outcome for v in verdict.metrics} == {
        "p50_ms": "regression", "throughput_rps": "regression"}
    assert all(v.limit in (pytest.approx(1.1), pytest.approx(0.9)) for v in verdict.metrics)
