from __future__ import annotations

from itertools import pairwise

from pipeline.measure.loadgen import LoadResult, Phase, schedule
from pipeline.measure.stability import measure_until_decided, settled, spread


def window(throughput: float, p99_us: int) -> LoadResult:
    result = LoadResult(1.0)
    result.completed = int(throughput)
    for _ in range(200):
        result.histogram.record_value(p99_us)
    return result


def test_spread() -> None:
    assert spread([10.0, 10.0, 10.0]) == 0.0
    assert abs(spread([9.0, 10.0, 11.0]) - 0.2) < 1e-12
    assert spread([]) == 0.0


def test_windows_repeat_until_decided_and_every_window_counts() -> None:
    series = [(1000, 9000), (700, 4000), (1000, 5000), (1010, 5100), (990, 5050), (1000, 5000)]
    outcome = measure_until_decided(lambda i: (window(*series[i]), i),
                                    lambda ws: settled(ws, 3, 0.05), min_windows=3,
                                    max_windows=6)
    assert outcome.decided and len(outcome.windows) == 5
    assert outcome.extras == [0, 1, 2, 3, 4]
    # Nothing is dropped: the early windows that disagreed count too.
    assert outcome.merged().completed == 1000 + 700 + 1000 + 1010 + 990
    assert not outcome.stable(0.05)


def test_the_cap_is_respected_and_reported() -> None:
    noisy = [(1000, 1000), (2000, 9000)] * 5
    outcome = measure_until_decided(lambda i: (window(*noisy[i]), None),
                                    lambda ws: settled(ws, 3, 0.05), min_windows=3,
                                    max_windows=4)
    assert not outcome.decided and len(outcome.windows) == 4
    assert not settled(outcome.windows, 3, 0.05)


def test_constant_and_poisson_schedules() -> None:
    phases = [Phase("before", 10.0, 1.0), Phase("burst", 100.0, 0.5)]
    constant = schedule(phases)
    assert len(constant) == 60
    assert constant[0] == (0.0, "before") and constant[10] == (1.0, "burst")
    assert all(b[0] > a[0] for a, b in pairwise(constant))
    poisson = schedule([Phase("steady", 200.0, 10.0)], "poisson", seed=3)
    assert 1800 <= len(poisson) <= 2200          # Poisson(2000): well inside 4 sigma
    assert poisson == schedule([Phase("steady", 200.0, 10.0)], "poisson", seed=3)
    gaps = [b[0] - a[0] for a, b in pairwise(poisson)]
    assert abs(sum(gaps) / len(gaps) - 0.005) < 0.0005   # mean inter-arrival 1/rate
