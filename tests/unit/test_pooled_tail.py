"""The pooled tail ratio: its quantile, its estimate and its paired-bootstrap interval."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from pipeline.regression.paired import PairedRound, WindowFigures, judge_ratio
from pipeline.regression.pooled_tail import PooledRequests, pooled_ratio


def rounds_of(rng: random.Random, count: int, size: int, scale: float = 1.0,
              shared: list[float] | None = None) -> list[list[int]]:
    """`count` windows of log-normal latencies (µs); `shared`, a machine factor per round."""
    return [[int(4000 * scale * (shared[i] if shared else 1.0) * math.exp(rng.gauss(0, 0.3)))
             for _ in range(size)] for i in range(count)]


def test_the_quantile_is_the_value_at_that_share_of_the_requests() -> None:
    rng = random.Random(3)
    windows = rounds_of(rng, 5, 200)
    pooled = PooledRequests(windows)
    everyone = np.ones((1, 5), dtype=np.int32)
    values = sorted(v for w in windows for v in w)
    for q in (0.5, 0.95, 0.99):
        expected = np.quantile(values, q, method="inverted_cdf")
        assert pooled.quantiles(everyone, q)[0] == expected
    # A round counted twice weighs twice: only round 0, doubled, is its own quantile.
    only_first = np.array([[2, 0, 0, 0, 0]], dtype=np.int32)
    assert pooled.quantiles(only_first, 0.5)[0] == np.quantile(windows[0], 0.5,
                                                                method="inverted_cdf")


def test_the_tail_slice_finds_the_same_quantile_as_every_request() -> None:
    """The quantile is searched in the top of the requests first; resamples that weigh the
    slowest rounds heavily or not at all, and round sizes far apart, give what the
    computation over every request gives."""
    rng = np.random.default_rng(11)
    windows = [list(rng.integers(100, 50_000, size=int(size)))
               for size in rng.integers(1, 900, size=40)]
    windows[3] = [10**6] * 300                   # a stalled round: the whole tail
    pooled = PooledRequests(windows)
    weights = rng.integers(0, 4, size=(400, 40)).astype(np.int32)
    weights[:50, 3] = 0
    weights[50:60, 3] = 6
    for q in (0.5, 0.9, 0.95, 0.99, 0.999):
        full = pooled.values[np.minimum(pooled._full_index(weights, q),
                                        len(pooled.values) - 1)]
        assert np.array_equal(pooled.quantiles(weights, q), full), q


def test_the_same_requests_give_a_ratio_of_one_with_a_narrow_interval() -> None:
    windows = rounds_of(random.Random(5), 32, 400)
    interval = pooled_ratio(windows, windows, 99.0, 0.01)
    assert interval.estimate == 0.0
    assert interval.low is not None and interval.high is not None
    assert interval.low <= 0.0 <= interval.high
    assert interval.high - interval.low < 0.02    # identical sides: only their pairing


def test_a_slower_candidate_is_bounded_above_its_margin() -> None:
    rng = random.Random(7)
    machine = [math.exp(rng.gauss(0, 0.05)) for _ in range(32)]
    live = rounds_of(rng, 32, 400, shared=machine)
    slower = rounds_of(rng, 32, 400, scale=1.25, shared=machine)
    interval = pooled_ratio(slower, live, 99.0, 0.01)
    assert interval.low is not None and math.exp(interval.low) > 1.1
    assert math.exp(interval.estimate) == pytest.approx(1.25, rel=0.08)


def test_a_side_without_requests_bounds_nothing() -> None:
    interval = pooled_ratio([[], []], [[1000], [1200]], 99.0, 0.05)
    assert interval.low is None and interval.high is None
    with pytest.raises(ValueError):
        pooled_ratio([[1000]], [], 99.0, 0.05)


def test_the_verdict_pools_the_tail_when_the_rounds_keep_their_requests() -> None:
    rng = random.Random(11)
    rounds = []
    for _ in range(32):
        a, b = rounds_of(rng, 2, 400)
        rounds.append(PairedRound(
            WindowFigures(4, 6, float(np.quantile(a, 0.99)), 1000, 0, 400, tuple(a)),
            WindowFigures(4, 6, float(np.quantile(b, 0.99)), 1000, 0, 400, tuple(b))))
    pooled = judge_ratio("p99_ms", rounds, 0.10, 0.02)
    assert "pooled" in pooled.reason and pooled.outcome == "no_regression"
    figures_only = [PairedRound(WindowFigures(4, 6, r.candidate.p99_ms, 1000, 0, 400),
                                WindowFigures(4, 6, r.live.p99_ms, 1000, 0, 400))
                    for r in rounds]
    per_round = judge_ratio("p99_ms", figures_only, 0.10, 0.02)
    assert "pooled" not in per_round.reason and per_round.outcome == "no_regression"
    # Which interval is the narrower depends on the rounds (on independent requests the
    # two are alike); on a real server's the pooled one was, hence the pooling.
    assert pooled.ratio != per_round.ratio


def paired_rounds(rng: random.Random, count: int, scale: float) -> list[PairedRound]:
    rounds = []
    for _ in range(count):
        new, old = rounds_of(rng, 1, 400, scale)[0], rounds_of(rng, 1, 400)[0]
        rounds.append(PairedRound(
            WindowFigures(4, 6, float(np.quantile(new, 0.99)), 1000, 0, 400, tuple(new)),
            WindowFigures(4, 6, float(np.quantile(old, 0.99)), 1000, 0, 400, tuple(old))))
    return rounds


def test_the_pooled_tail_fails_beyond_its_margin_and_not_within_it() -> None:
    # The margin is 10%: a candidate 25% slower in its tail is a regression, one 0.5%
    # slower is cleared, on the same number of rounds.
    slower = judge_ratio("p99_ms", paired_rounds(random.Random(13), 48, 1.25), 0.10, 0.02)
    assert slower.outcome == "regression" and slower.ratio_low is not None
    assert slower.ratio_low > slower.limit == pytest.approx(1.10)
    near = judge_ratio("p99_ms", paired_rounds(random.Random(17), 48, 1.005), 0.10, 0.02)
    assert near.outcome == "no_regression"
    assert near.ratio_high is not None and near.ratio_high < 1.10


def test_an_episode_of_consecutive_rounds_widens_the_interval() -> None:
    """Consecutive rounds are resampled in blocks: six rounds in a row in which only the
    candidate stalled give a wider interval than the same six spread over the run (a
    bootstrap of single rounds cannot tell the two apart: it ignores their order)."""
    rng = random.Random(13)
    live = rounds_of(rng, 48, 400)
    candidate = rounds_of(rng, 48, 400)
    for index in range(6):
        candidate[index] = [value * 3 if value % 10 == 0 else value
                            for value in candidate[index]]
    spread_order = [index for first in range(8) for index in range(first, 48, 8)]
    in_a_row = pooled_ratio(candidate, live, 99.0, 0.05)
    spread = pooled_ratio([candidate[i] for i in spread_order],
                          [live[i] for i in spread_order], 99.0, 0.05)
    assert in_a_row.estimate == pytest.approx(spread.estimate)
    assert in_a_row.low is not None and in_a_row.high is not None
    assert spread.low is not None and spread.high is not None
    assert in_a_row.high - in_a_row.low > 1.3 * (spread.high - spread.low)
