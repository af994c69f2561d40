"""An unset side-by-side window is sized by the answers it must hold, not by seconds."""

from __future__ import annotations

import pytest

from pipeline.regression.side_by_side import (
    LONGEST_WINDOW_S,
    SHORTEST_WINDOW_S,
    WINDOW_ANSWERS,
    window_seconds,
)


@pytest.mark.parametrize(("rates", "seconds"), [
    ([2 * WINDOW_ANSWERS, 4 * WINDOW_ANSWERS], 0.5),     # the slower server sets it
    ([WINDOW_ANSWERS / 0.25], 0.25),
    ([50 * WINDOW_ANSWERS], SHORTEST_WINDOW_S),           # a fast model: the floor
    ([WINDOW_ANSWERS / 10], LONGEST_WINDOW_S),            # a slow model: the cap
    ([0.0, 5000.0], LONGEST_WINDOW_S),                    # nothing answered: the cap
    ([], LONGEST_WINDOW_S),
])
def test_a_window_holds_the_answers_at_the_slower_rate(rates: list[float],
                                                       seconds: float) -> None:
    assert window_seconds(rates) == pytest.approx(seconds)


def test_the_bounds_are_ordered_and_the_floor_still_holds_the_answers_at_2000_per_s() -> None:
    assert 0 < SHORTEST_WINDOW_S < LONGEST_WINDOW_S
    assert window_seconds([2000.0]) * 2000.0 >= WINDOW_ANSWERS
