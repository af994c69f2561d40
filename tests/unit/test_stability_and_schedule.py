from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import pytest

from pipeline.measure.load_result import merge_windows
from pipeline.measure.loadgen import LoadResult, Phase, schedule
from pipeline.statistics.sequential import WindowPlan, run_windows
from pipeline.statistics.stability import settled, spread


def window(throughput: float, p99_us: int) -> LoadResult:
    result = LoadResult(1.0)
    result.completed = int(throughput)
    for _ in range(200):
        result.histogram.record_value(p99_us)
    return result


def test_spread_and_settled() -> None:
    assert spread([10.0, 10.0, 10.0]) == 0.0
    assert abs(spread([9.0, 10.0, 11.0]) - 0.2) < 1e-12
    assert spread([]) == 0.0
    agreeing = [window(1000, 5000), window(1010, 5050), window(990, 5000)]
    assert settled(agreeing, 3, 0.05)
    assert not settled([*agreeing, window(2000, 9000)], 3, 0.05)
    assert not settled(agreeing, 4, 0.05)


@dataclass(frozen=True)
class FakeLook:
    """A look that decides once `decide_at` windows are kept and names `outlier` once."""

    decided: bool
    outlier: int | None


def looks(decide_at: int, outlier: int | None = None,
          ) -> Callable[[list[LoadResult], float], FakeLook]:
    seen: list[float] = []

    def look(windows: list[LoadResult], alpha: float) -> FakeLook:
        seen.append(alpha)
        return FakeLook(len(windows) >= decide_at, outlier)
    return look


def test_the_loop_stops_at_the_first_decided_look_after_the_fewest_windows() -> None:
    plan = WindowPlan(3, 6, 2)
    run = run_windows(lambda i: window(1000, 5000), looks(1), lambda _: None, plan)
    assert run.decided and len(run.windows) == 3 and not run.notes()
    run = run_windows(lambda i: window(1000, 5000), looks(5), lambda _: None, plan)
    assert run.decided and len(run.windows) == 5


def test_the_cap_is_respected_and_undecided_is_reported() -> None:
    run = run_windows(lambda i: window(1000, 5000), looks(99), lambda _: None,
                      WindowPlan(3, 4, 1))
    assert not run.decided and len(run.measured) == 4 and run.last is not None


def test_a_window_the_client_could_not_drive_is_left_out_and_re_measured() -> None:
    starved = {1, 2, 3}
    run = run_windows(lambda i: window(1000 + i, 5000), looks(3),
                      lambda w: "short of CPU" if w.completed - 1000 in starved else None,
                      WindowPlan(3, 6, 2))
    # Two re-measures: windows 2 and 3 are left out; window 4 counts, and says so.
    assert run.kept == [0, 3, 4] and sorted(run.left_out) == [1, 2]
    assert run.notes() == ["window 2 left out and re-measured: short of CPU",
                           "window 3 left out and re-measured: short of CPU",
                           "window 4 re-measured: short of CPU (no re-measure left: it counts)"]
    assert merge_windows(run.windows).completed == 1000 + 1003 + 1004


def test_an_outlier_window_is_re_measured_once_and_still_counts() -> None:
    run = run_windows(lambda i: window(1000, 5000), looks(1, outlier=0), lambda _: None,
                      WindowPlan(3, 6, 2))
    # The first look names window 1: one more window, which does not count to the cap;
    # the next look names it again and decides (a window is re-measured only once).
    assert run.kept == [0, 1, 2, 3] and run.decided
    assert run.notes() == ["window 1 re-measured: far from the other windows "
                           "(instability test); it still counts"]


def test_the_looks_spend_the_stated_error_in_all() -> None:
    plan = WindowPlan(3, 6, 2, confidence=0.95)
    alphas = [plan.look_alpha(look) for look in range(plan.looks)]
    assert plan.looks == 4 and sum(alphas) == pytest.approx(0.05)
    assert all(a > 0 for a in alphas) and alphas[0] < alphas[-1]
    assert plan.last_alpha == alphas[-1]
    assert WindowPlan(3, 3, 1).looks == 1 and WindowPlan(3, 3, 1).last_alpha == \
        pytest.approx(0.05)


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
