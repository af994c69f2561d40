"""The knee and the capacity in every report format: exact, or labelled as a lower bound."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.record import RunRecord
from pipeline.release.regression import regression_gates
from pipeline.report.formats import render
from pipeline.report.html import render_html
from pipeline.spec.models import RegressionStage
from tests.support.htmldom import parse_html

DATA = Path(__file__).resolve().parent / "data"
typed = RunRecord.from_json


def saturation(record: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in record["stages"] if s["name"] == "saturation")
    return found


def with_capacity(bound: str, knee_bound: str = "exact") -> dict[str, Any]:
    record: dict[str, Any] = json.loads((DATA / "record_triton.json").read_text())
    stage = saturation(record)
    interval = [4100.0, 4400.0] if bound == "exact" else [6000.0, None]
    rate = interval[0]
    stage["metrics"].update(capacity_rps=rate, capacity_p99_ms=21.5,
                            capacity_lower_bound=1.0 if bound == "lower" else 0.0,
                            capacity_steps=2.0,
                            knee_lower_bound=1.0 if knee_bound == "lower" else 0.0)
    stage["details"].update(
        knee_bound=knee_bound, capacity_bound=bound, capacity_interval_rps=interval,
        capacity_stop_reason="bracketed within 5%" if bound == "exact" else
        "time budget 10s spent (next step 9000/s)",
        capacity_steps=[
            {"rate_rps": rate, "duration_s": 1.0, "p99_ms": 21.5, "error_rate": 0.0,
             "samples": 4000, "drain_s": 0.01, "backlog_growth_ms": 0.1, "lag_p99_ms": 0.2,
             "verdict": "pass", "reason": "p99 21.5ms, no backlog", "passed": True},
            {"rate_rps": 4400.0, "duration_s": 1.0, "p99_ms": 80.0, "error_rate": 0.0,
             "samples": 4400, "drain_s": 0.3, "backlog_growth_ms": 30.0, "lag_p99_ms": 0.2,
             "verdict": "fail", "reason": "p99 80.0ms over the SLO 50ms", "passed": False}])
    return record


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "html", "json"])
def test_a_lower_bound_is_labelled_as_such_in_every_format(fmt: str) -> None:
    text = render(typed(with_capacity("lower", knee_bound="lower")), fmt)  # type: ignore[arg-type]
    exact = render(typed(with_capacity("exact")), fmt)  # type: ignore[arg-type]
    if fmt == "json":
        assert '"capacity_bound": "lower"' in text and '"knee_bound": "lower"' in text
        assert '"capacity_bound": "exact"' in exact
        return
    assert "Capacity ≥ 6,000/s (lower bound)" in text
    assert "cap reached" in text and "a lower bound" in text
    assert "Knee at concurrency 60" not in text
    assert "Capacity 4,100/s at p99 21.5 ms" in exact and "lower bound" not in exact
    assert "Bisected between 4,100/s (met) and 4,400/s (missed)" in exact
    assert "Knee at concurrency 60" in exact


def test_the_chart_marks_throughput_the_knee_and_the_capacity() -> None:
    chart = parse_html(render_html(typed(with_capacity("exact")))).by_id("knee-chart")
    assert chart is not None
    assert len(chart.find_all("rect", cls="throughput")) == 10
    assert len(chart.find_all("line", cls="capacity")) == 1
    assert "Capacity 4,100/s at p99 21.5 ms" in chart.text() and "knee: 60" in chart.text()
    lower = parse_html(render_html(typed(with_capacity("lower", "lower")))).by_id("knee-chart")
    assert lower is not None
    assert "Capacity ≥ 6,000/s (lower bound)" in lower.text()
    assert "cap reached, lower bound" in lower.text() and "knee: 60" not in lower.text()


def test_regression_watches_capacity_when_both_runs_have_it() -> None:
    settings = RegressionStage(gate=True)
    baseline, current = with_capacity("exact"), with_capacity("exact")
    saturation(current)["metrics"]["capacity_rps"] = 3000.0       # -27 %
    gates, _ = regression_gates(typed(current), typed(baseline), settings)
    names = {gate.name: gate.passed for gate in gates}
    assert names["regression.saturation.capacity_rps"] is False
    assert "regression.saturation.knee_throughput_rps" not in names
    older = copy.deepcopy(baseline)
    for key in ("capacity_rps", "capacity_p99_ms"):
        del saturation(older)["metrics"][key]
    gates, _ = regression_gates(typed(current), typed(older), settings)
    names = {gate.name: gate.passed for gate in gates}
    assert "regression.saturation.knee_throughput_rps" in names
    assert "regression.saturation.capacity_rps" not in names


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "html"])
def test_an_unknown_capacity_is_not_shown_as_zero(fmt: str) -> None:
    record = with_capacity("exact")
    stage = saturation(record)
    for key in ("capacity_rps", "capacity_p99_ms", "capacity_lower_bound"):
        stage["metrics"].pop(key)
    stage["details"].update(capacity_bound="unknown", capacity_stop_reason=(
        "time budget 10s kept for the confirmation; no time left in the budget to hold 4100/s"))
    stage["details"].pop("capacity_interval_rps")
    hold = dict(stage["details"]["capacity_steps"][1], hold=True, duration_s=3.0, settle_s=0.4)
    stage["details"]["capacity_steps"].append(hold)
    text = render(typed(record), fmt)  # type: ignore[arg-type]
    assert "Capacity unknown: no rate was confirmed within the budget" in text
    assert "hold 3s: p99 80.0ms" in text and "backlog drained 0.40s after" in text
    assert "apacity 0/s" not in text and "Capacity ≥" not in text
