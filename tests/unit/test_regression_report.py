"""The side-by-side regression check in the reports: what decides, then the fold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline.record import RunRecord
from pipeline.regression.paired import PairedRound, PairedSettings, Schedule, WindowFigures, judge
from pipeline.regression.side_by_side import SideBySide
from pipeline.report.html import render_html
from pipeline.report.markdown import render_markdown
from pipeline.stage_result import StageResult, Status
from tests.support.htmldom import parse_html

DATA = Path(__file__).resolve().parent / "data"


def with_regression_stage(slower: float) -> RunRecord:
    body: dict[str, Any] = json.loads((DATA / "record_triton.json").read_text())
    record = RunRecord.from_json(body)
    rounds = [PairedRound(WindowFigures(4 * slower * f, 6 * slower * f, 8 * slower * f,
                                        1000 / slower, 0, 1000),
                          WindowFigures(4, 6, 8, 1000, 0, 1000))
              for f in (1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99)]
    settings = PairedSettings(("p99_ms", "error_rate"), 0.1, 0.001, 0.95, Schedule(8, 8, 8))
    verdict = judge(rounds, settings.metrics, 0.1, 0.05, 0.001, 0.95, 1)
    windows = [{"round": 0, "server": "candidate", "p99_ms": 8.0}]
    side = SideBySide(verdict, windows, 16.0)
    record.stages.append(StageResult("regression", Status.PASSED, "", details={
        "live_release_id": "20261201T000000Z-live",
        "same": {"model": True, "config": True, "served": True},
        **side.to_json()}))
    return record


def test_markdown_leads_with_the_watched_metrics_and_folds_the_windows() -> None:
    text = render_markdown(with_regression_stage(1.25))
    section = text.split("### Against the live release, side by side")[1]
    assert "❌ **regression** against live release `20261201T000000Z-live`" in section
    assert "Same model, config and served files as the live release." in section
    assert "| p99 (ms) | 8 | 10 | 1.250 | [1.2" in section
    verdicts, fold = section.split("<details><summary>Every window, as measured</summary>")
    assert "error rate" in verdicts and "candidate" in fold.split("</details>")[0]


def test_html_shows_the_verdict_and_every_window_in_a_fold() -> None:
    dom = parse_html(render_html(with_regression_stage(1.0)))
    section = dom.by_id("side-by-side-regression")
    assert section is not None and "no regression" in section.text()
    watched = dom.by_id("watched")
    assert watched is not None and len(watched.find_all("tr")) == 3
    assert dom.by_id("regression-windows") is not None


def test_a_run_without_the_side_by_side_check_shows_no_section() -> None:
    record = RunRecord.from_json(json.loads((DATA / "record_triton.json").read_text()))
    assert "side by side" not in render_markdown(record)
