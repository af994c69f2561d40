"""Rounds that are not independent widen the per-round interval; alternation never narrows it."""

from __future__ import annotations

import math
import random

import pytest

from pipeline.regression.paired import PairedRound, WindowFigures, judge_ratio
from pipeline.regression.serial import MAX_RHO, lag1_correlation, serial_level
from pipeline.statistics.distributions import normal_quantile, normal_survival


def ar1(rho: float, n: int, seed: int) -> list[float]:
    rng, value, values = random.Random(seed), 0.0, []
    for _ in range(n):
        value = rho * value + math.sqrt(1 - rho * rho) * rng.gauss(0, 0.1)
        values.append(value)
    return values


def test_lag1_correlation_reads_a_persistent_state() -> None:
    assert lag1_correlation(ar1(0.5, 4000, 1)) == pytest.approx(0.5, abs=0.05)
    assert abs(lag1_correlation(ar1(0.0, 4000, 2))) < 0.05
    assert lag1_correlation([0.1, 0.2, 0.3]) == 0.0          # too few rounds to say


def test_the_level_tightens_with_positive_correlation_only() -> None:
    alternating = [(-1) ** i * 0.05 + 0.001 * i for i in range(40)]
    assert lag1_correlation(alternating) < 0
    assert serial_level(0.01, alternating) == 0.01
    persistent = ar1(0.4, 400, 3)
    assert serial_level(0.01, persistent) < 0.01 / 3
    # A state that barely changes is read at the cap, not as an interval of infinite width.
    capped = normal_survival(-normal_quantile(0.01) * math.sqrt((1 + MAX_RHO) / (1 - MAX_RHO)))
    assert serial_level(0.01, ar1(0.99, 400, 4)) == pytest.approx(capped)


def test_a_correlated_candidate_on_the_margin_is_not_cleared_as_if_independent() -> None:
    """The same log ratios, in an order that keeps the state from round to round, give a
    wider interval than shuffled: p50 judged at 10% on rounds whose ratio is 1.05."""
    logs = [math.log(1.05) + x for x in ar1(0.5, 64, 5)]

    def rounds(values: list[float]) -> list[PairedRound]:
        return [PairedRound(WindowFigures(math.exp(v), 2, 3, 100, 0, 100),
                            WindowFigures(1.0, 2, 3, 100, 0, 100)) for v in values]

    ordered = judge_ratio("p50_ms", rounds(logs), 0.1, 0.01)
    mixed = list(logs)
    random.Random(6).shuffle(mixed)
    assert lag1_correlation(mixed) < 0.1 < lag1_correlation(logs)
    shuffled = judge_ratio("p50_ms", rounds(mixed), 0.1, 0.01)
    assert ordered.ratio_high is not None and shuffled.ratio_high is not None
    assert ordered.ratio_high > shuffled.ratio_high
