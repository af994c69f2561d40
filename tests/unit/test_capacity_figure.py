"""The one capacity figure: from the search, exact or a lower bound with its cap, its
interval, and as every record writes it (promote's saturation stage, tune, compare)."""

from __future__ import annotations

from typing import Any

from pipeline.outcomes.saturation import SaturationOutcome
from pipeline.statistics.capacity import CapacitySearch, StepOutcome, Verdict
from pipeline.statistics.capacity_figure import CapacityFigure


def step(rate: float, verdict: Verdict, hold: bool) -> StepOutcome:
    return StepOutcome(rate, 1.0, 10.0, 0.0, 1000, 0.0, 0.0, 0.1, verdict, "judged",
                       hold=hold)


def search(*steps: StepOutcome, capped_by: str = "") -> CapacitySearch:
    return CapacitySearch(knee_rps=2000.0, start_rps=1500.0, steps=list(steps),
                          stop_reason="bracketed", capped_by=capped_by)


def test_a_failing_rate_above_the_held_one_makes_it_exact_with_its_interval() -> None:
    figure = CapacityFigure.of(search(step(1200, "pass", True), step(1320, "fail", False),
                                      step(1500, "fail", False)))
    # The interval is the hold verdict's calibrated one: held / 1.1 to failed / 0.8.
    assert figure == CapacityFigure(1200.0, 1200.0 / 1.1, 1320.0 / 0.8, "exact",
                                    "a failing rate at 1,320/s", 1320.0)
    assert figure.text() == "capacity 1,200/s (exact: 1,091–1,650/s at 90%)"


def test_no_failing_rate_above_is_a_lower_bound_that_names_its_cap() -> None:
    figure = CapacityFigure.of(search(step(1200, "pass", True), step(1500, "pass", False),
                                      capped_by="the time budget"))
    assert figure is not None and figure.bound == "lower_bound" and figure.high_rps is None
    assert figure.low_rps == 1200.0 / 1.1 and figure.failed_rps is None
    assert figure.text() == "capacity ≥ 1,200/s (lower bound: capped by the time budget)"


def test_a_passing_short_step_without_a_held_rate_is_no_figure() -> None:
    assert CapacityFigure.of(search(step(1500, "pass", False))) is None
    assert CapacityFigure.of(search(step(100, "fail", True))) is None


def test_overlapping_intervals_cannot_tell_which_is_higher() -> None:
    low = CapacityFigure(1000.0, 1000.0, 1100.0, "exact", "")
    high = CapacityFigure(1100.0, 1100.0, 1210.0, "exact", "")
    far = CapacityFigure(1400.0, 1400.0, 1540.0, "exact", "")
    bound = CapacityFigure(900.0, 900.0, None, "lower_bound", "the time budget")
    assert low.overlaps(high) and high.overlaps(low)
    assert not low.overlaps(far) and far.surely_above(low) and not low.surely_above(far)
    assert bound.overlaps(far) and not far.surely_above(bound)


def test_json_round_trips_and_anything_else_reads_as_none() -> None:
    figure = CapacityFigure(1200.0, 1200.0, None, "lower_bound", "the load generator")
    assert CapacityFigure.from_json(figure.to_json()) == figure
    bad: list[Any] = [None, {}, [1200.0], {"rps": True, "low_rps": 1.0, "bound": "exact"},
                      {"rps": 1.0, "low_rps": 1.0, "high_rps": "x", "bound": "exact"},
                      {"rps": 1.0, "low_rps": 1.0, "high_rps": None, "bound": "lower"}]
    assert all(CapacityFigure.from_json(body) is None for body in bad)


def test_the_saturation_stage_records_the_figure_beside_its_older_keys() -> None:
    from stages.saturation import _record_capacity

    details: dict[str, Any] = {}
    text, measured = _record_capacity(search(step(1200, "pass", True), step(2000, "pass", False),
                                             capped_by="the time budget"),
                                      SaturationOutcome(), details)
    assert details["capacity"] == {"rps": 1200.0, "low_rps": 1200.0 / 1.1, "high_rps": None,
                                   "bound": "lower_bound", "capped_by": "the time budget",
                                   "failed_rps": None}
    assert details["capacity_interval_rps"] == [1200.0, None]
    assert measured.capacity_rps == 1200.0 and measured.capacity_lower_bound == 1.0
    assert "capped by the time budget" in text
