"""The latency stage's windows made of side-by-side rounds (pipeline/regression/).

The rounds here are a stand-in that measures nothing: what is under test is how a
latency window is composed of rounds and what happens when the verdict is done or the
live release dies, which no server is needed for. The real rounds on real Triton are in
tests/integration/test_side_by_side_regression.py.
"""

from __future__ import annotations

import pytest

from pipeline.measure.load_result import LoadResult
from pipeline.measure.sender import LoadSender
from pipeline.regression.beside import LiveBeside, window_measurer
from pipeline.regression.paired import PairedRound, PairedSettings, Schedule, WindowFigures
from pipeline.regression.side_by_side import (
    LIVE,
    PairedRounds,
    ServerDied,
    SideBySideLoad,
    candidate_window,
)

SETTINGS = PairedSettings(("p50_ms",), 0.1, 0.001, 0.95, Schedule(16, 16, 64))


def answered(seconds: float, requests: int) -> LoadResult:
    result = LoadResult(seconds)
    for index in range(requests):
        result.record(1000 + index, seconds * (index + 1) / requests)
    return result


class StandInRounds(PairedRounds):
    """Rounds of 100 answers in 250 ms each; done after `done_after` rounds; the live
    release dies in round `dies_in` (None: never)."""

    def __init__(self, done_after: int = 1000, dies_in: int | None = None) -> None:
        super().__init__(SideBySideLoad(LoadSender(1.0), 8, 0.0, 0.25), {}, {}, SETTINGS,
                         lambda text: None)
        self.done_after, self.dies_in, self.measured = done_after, dies_in, 0

    @property
    def done(self) -> bool:
        return self.measured >= self.done_after

    def measure_round(self) -> LoadResult:
        if self.measured == self.dies_in:
            raise ServerDied(LIVE, "exited with code -9")
        self.measured += 1
        one = WindowFigures(1.0, 1.0, 1.0, 400.0, 0, 100)
        self.looks.rounds.append(PairedRound(one, one))
        return answered(0.25, 100)


def test_a_window_is_made_of_rounds_while_the_verdict_is_open() -> None:
    rounds = StandInRounds()
    plain: list[float] = []

    def alone(seconds: float) -> LoadResult:
        plain.append(seconds)
        return answered(seconds, 0)

    window = candidate_window(rounds, 1.0, alone)
    assert rounds.measured == 4 and rounds.in_latency_stage == 4 and plain == []
    assert window.requests == 400 and window.duration_s == pytest.approx(1.0)
    assert list(window.finished_s) == sorted(window.finished_s)   # one time line


def test_a_window_whose_verdict_is_done_half_way_ends_plain() -> None:
    rounds = StandInRounds(done_after=2)
    plain: list[float] = []

    def alone(seconds: float) -> LoadResult:
        plain.append(seconds)
        return answered(seconds, 200)

    window = candidate_window(rounds, 1.0, alone)
    assert rounds.measured == 2 and plain == [pytest.approx(0.5)]
    assert window.requests == 400 and window.duration_s == pytest.approx(1.0)


def test_a_live_release_that_dies_in_a_window_is_lost_and_the_window_measured_alone(
        ) -> None:
    beside = LiveBeside("20261206T000000Z-aaaaaaaa", rounds=StandInRounds(dies_in=1))
    labels: list[str] = []

    def plain(seconds: float, label: str) -> LoadResult:
        labels.append(label)
        return answered(seconds, 300)

    measure = window_measurer(beside, plain)
    window = measure(1.0, "window 1")
    assert window.requests == 300 and labels == ["window 1"]
    assert beside.rounds is None and beside.problem is not None
    assert "died" in beside.problem and "exited with code -9" in beside.problem
    assert measure(1.0, "window 2").requests == 300    # alone from then on


def test_without_a_live_release_beside_every_window_is_plain() -> None:
    measure = window_measurer(None, lambda seconds, label: answered(seconds, 7))
    assert measure(1.0, "window 1").requests == 7
