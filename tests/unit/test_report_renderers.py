"""The HTML and markdown reports, rendered from run records only."""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from pipeline.record import RunRecord
from pipeline.release.baseline_deltas import compare
from pipeline.report import charts
from pipeline.report.html import render_html
from pipeline.report.markdown import render_markdown
from tests.support.htmldom import Node, parse_html

DATA = Path(__file__).resolve().parent / "data"
HOSTILE = "<script>alert(1)</script>"


typed = RunRecord.from_json


def load(kind: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((DATA / f"record_{kind}.json").read_text())
    return body


@pytest.fixture(params=["triton", "torchserve"])
def record(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load(str(request.param))


def stage_of(record: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(item for item in record["stages"] if item["name"] == name)
    return found


def gate_of(record: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(gate for item in record["stages"] for gate in item["gates"]
                                 if gate["name"] == name)
    return found


def failing_p99(record: dict[str, Any]) -> dict[str, Any]:
    failed = copy.deepcopy(record)
    gate = gate_of(failed, "latency.p99")
    gate.update(observed=gate["threshold"] * 1.5, passed=False)
    stage_of(failed, "latency")["status"] = "failed"
    stage_of(failed, "latency")["message"] = "p99 over the SLO"
    failed["status"] = "failed"
    return failed


def scaled(record: dict[str, Any], factors: dict[str, float]) -> dict[str, Any]:
    changed = copy.deepcopy(record)
    for stage in changed["stages"]:
        for metric, factor in factors.items():
            if metric in stage["metrics"]:
                stage["metrics"][metric] *= factor
    return changed


def gate_table_rows(document: Node) -> dict[str, list[str]]:
    table = document.by_id("gates")
    assert table is not None and table.tag == "table"
    rows = table.find_all("tbody")[0].find_all("tr")
    return {cells[1]: cells for cells in ([td.text() for td in row.find_all("td")]
                                          for row in rows)}


def test_every_gate_appears_with_observed_and_threshold(record: dict[str, Any]) -> None:
    rows = gate_table_rows(parse_html(render_html(typed(record))))
    gates = [(stage["name"], gate) for stage in record["stages"] for gate in stage["gates"]]
    assert len(rows) == len(gates) == 12
    for stage_name, gate in gates:
        stage, _, observed, threshold, evidence, result = rows[gate["name"]]
        assert evidence == "—"       # a record from before gates carried an interval
        assert stage == stage_name
        assert result == "✓ pass"
        if isinstance(gate["observed"], str):
            assert (observed, threshold) == (gate["observed"], gate["threshold"])
    p99 = gate_of(record, "latency.p99")
    _, _, observed, threshold, _, _ = rows["latency.p99"]
    assert observed == f"{p99['observed']:.3g} ms"
    assert threshold == f"≤ {p99['threshold']:g} ms"
    assert rows["latency.throughput"][3] == "≥ 100/s"


def test_a_failing_gate_is_marked_in_both_renderers() -> None:
    failed = failing_p99(load("triton"))
    document = parse_html(render_html(typed(failed)))
    table = document.by_id("gates")
    assert table is not None
    failing = table.find_all("tr", cls="fail")
    assert [row.find_all("td")[1].text() for row in failing] == ["latency.p99"]
    assert failing[0].find_all("td")[-1].text() == "✗ FAIL"
    assert "1 gate FAILED" in document.text()
    assert "Stage latency failed: p99 over the SLO" in document.text()
    markdown = render_markdown(typed(failed))
    line = next(line for line in markdown.splitlines() if "`latency.p99`" in line)
    assert line.endswith("| ❌ **FAIL** |")
    assert markdown.startswith("## ❌ ")


def inconclusive_p99(record: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(record)
    gate_of(changed, "latency.p99").update(
        observed=48.2, threshold=50.0, passed=False, outcome="inconclusive",
        interval=[44.1, 53.9], samples=2345, reason="the interval straddles 50ms")
    gate_of(changed, "latency.p95").update(interval=[7.7, 8.3], samples=2345,
                                           outcome="passed")
    stage_of(changed, "latency")["status"] = "failed"
    changed["status"] = "failed"
    return changed


def test_every_format_shows_outcome_interval_samples_and_why() -> None:
    from pipeline.report.formats import render

    record = inconclusive_p99(load("triton"))
    rows = gate_table_rows(parse_html(render_html(typed(record))))
    assert rows["latency.p99"][4:] == ["[44.1, 53.9] ms, n=2,345", "? INCONCLUSIVE"]
    assert rows["latency.p95"][4:] == ["[7.7, 8.3] ms, n=2,345", "✓ pass"]
    why = "latency.p99 inconclusive: the interval straddles 50ms"
    assert why in parse_html(render_html(typed(record))).text()
    markdown = render_markdown(typed(record))
    line = next(line for line in markdown.splitlines() if "`latency.p99`" in line)
    assert line.endswith("| [44.1, 53.9] ms, n=2,345 | ❔ **INCONCLUSIVE** |")
    assert "inconclusive: the interval straddles 50ms" in markdown
    for fmt in ("terminal", "svg"):
        text = render(typed(record), fmt)
        assert "INCONCLUSIVE" in text and "n=2,345" in text and why in text.replace("&#160;", " ")
    body = json.loads(render(typed(record), "json"))
    assert gate_of(body, "latency.p99")["interval"] == [44.1, 53.9]
    live = copy.deepcopy(record)      # as rendered in-process, before a JSON round trip
    gate_of(live, "latency.p99")["interval"] = (44.1, None)
    assert "[44.1, —] ms, n=2,345" in render(typed(live), "terminal")


def test_strings_from_the_record_are_escaped() -> None:
    hostile = load("triton")
    gate_of(hostile, "latency.p99")["name"] = HOSTILE
    hostile["run_id"] = '"><img src=x onerror=alert(1)>'
    stage_of(hostile, "saturation")["details"]["stop_reason"] = HOSTILE
    hostile["model"] = {"source": "</style><script>alert(2)</script>"}
    markup = render_html(typed(hostile))
    assert "<script" not in markup and "<img" not in markup
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in markup
    document = parse_html(markup)
    assert document.find_all("script") == [] and document.find_all("img") == []
    assert HOSTILE in gate_table_rows(document)
    markdown = render_markdown(typed(hostile))
    assert "<script" not in markdown and "<img" not in markdown
    assert "&lt;script&gt;" in markdown


def test_the_page_is_self_contained(record: dict[str, Any]) -> None:
    markup = render_html(typed(record), baseline=typed(load("triton")))
    assert markup.startswith("<!DOCTYPE html>")
    assert not re.search(r"\b(src|href)\s*=|<script|<link|@import|url\(|https?://", markup)


def test_the_knee_chart_has_one_point_per_probe(record: dict[str, Any]) -> None:
    chart = parse_html(render_html(typed(record))).by_id("knee-chart")
    assert chart is not None and chart.tag == "svg"
    probes = stage_of(record, "saturation")["details"]["probes"]
    points = chart.find_all("circle", cls="probe")
    assert len(points) == len(probes) == 10
    assert len(chart.find_all("circle", cls="missed")) == sum(not p["passed"] for p in probes)
    assert len(chart.find_all("circle", cls="knee-marker")) == 1
    slo = gate_of(record, "latency.p99")["threshold"]
    assert f"SLO p99 {slo:g} ms" in chart.text()
    assert "knee: 60" in chart.text()


def test_the_knee_chart_puts_concurrency_on_a_log2_axis() -> None:
    points = [charts.ChartPoint(float(c), 10.0, True, "") for c in (1, 2, 4, 8)]
    svg = charts.knee_chart(points, slo=None, knee_x=None)
    xs = [float(circle.get("cx", "nan")) for circle in svg.iter("circle")]
    steps = {round(b - a, 1) for a, b in itertools.pairwise(xs)}
    assert len(steps) == 1
    assert charts.to_svg(svg).startswith('<svg id="knee-chart"')
    assert 'xmlns="http://www.w3.org/2000/svg"' in charts.to_svg(svg)


def test_the_batch_chart_and_words_say_which_preferred_size_never_formed() -> None:
    triton = load("triton")
    document = parse_html(render_html(typed(triton)))
    chart = document.by_id("batch-chart")
    assert chart is not None and chart.tag == "svg"
    executions = stage_of(triton, "latency")["details"]["batch_executions"]
    assert len(chart.find_all("g", cls="bar")) == len(executions) + 1  # + preferred 16
    assert len(chart.find_all("g", cls="preferred")) == 2
    assert "Preferred size 16 never formed (largest batch formed: 8)." in document.text()
    assert "No preferred batch sizes are configured." in render_html(typed(load("torchserve")))


def test_memory_burst_and_waits_are_shown() -> None:
    text = parse_html(render_html(typed(load("torchserve")))).text()
    assert "RSS 906 MiB" in text and "PSS 675 MiB" in text
    assert "GPU not measured" in text
    # A mean queue time is never shown against the p99-derived queue budget.
    assert "server queue (avg) 4.76 ms" in text and "4.76 ms (budget" not in text
    budgeted = copy.deepcopy(load("torchserve"))
    stage_of(budgeted, "latency")["metrics"]["queue_mean_budget_us"] = 2000.0
    text = parse_html(render_html(typed(budgeted))).text()
    assert "server queue (avg) 4.76 ms (mean budget 2 ms) — over budget" in text
    assert "invalid" in text and "burst at 200/s: p99 41.5 ms vs 36.8 ms" in text


def test_baseline_flags_a_30_percent_p99_regression_and_not_a_2_percent_one() -> None:
    live = load("triton")
    current = scaled(live, {"p99_ms": 1.30, "p50_ms": 1.02, "throughput_rps": 1.5})
    deltas = {delta.metric: delta for delta in compare(typed(current), typed(live))}
    assert deltas["p99_ms"].regressed and math.isclose(deltas["p99_ms"].change or 0, 0.30)
    assert not deltas["p50_ms"].regressed and not deltas["p50_ms"].improved
    assert deltas["throughput_rps"].improved and not deltas["throughput_rps"].regressed
    assert not any(delta.regressed for delta in compare(typed(current), typed(live), tolerance=0.5))

    table = parse_html(render_html(typed(current), baseline=typed(live))).by_id("deltas")
    assert table is not None
    by_metric = {row.find_all("td")[1].text(): row for row in table.find_all("tr")[1:]}
    assert by_metric["p99_ms"].attrs["class"] == "regressed"
    assert by_metric["p99_ms"].find_all("td")[-1].text() == "regression"
    assert by_metric["p50_ms"].attrs["class"] == "same"
    assert [name for name, row in by_metric.items() if row.attrs["class"] == "regressed"] \
        == ["p99_ms"]

    markdown = render_markdown(typed(current), baseline=typed(live))
    assert "❌ **1 regression:** `latency.p99_ms` +30.0%" in markdown
    p50 = next(line for line in markdown.splitlines() if "`p50_ms`" in line)
    assert p50.endswith("| +2.0% |  |")


def test_throughput_down_and_errors_from_zero_are_regressions() -> None:
    live = load("torchserve")
    current = scaled(live, {"knee_throughput_rps": 0.7})
    stage_of(current, "latency")["metrics"]["error_rate"] = 0.5
    regressed = {delta.metric for delta in compare(typed(current), typed(live)) if delta.regressed}
    assert regressed == {"knee_throughput_rps", "error_rate"}
    assert "no live release was given" in render_html(typed(live))


def test_markdown_has_the_gates_table_and_the_summary_lines(record: dict[str, Any]) -> None:
    markdown = render_markdown(typed(record))
    lines = markdown.splitlines()
    start = lines.index("| stage | gate | observed | threshold | interval, samples |  |")
    assert lines[start + 1] == "| --- | --- | ---: | ---: | ---: | --- |"
    gate_lines = lines[start + 2:start + 14]
    assert all(line.endswith("| ✅ pass |") for line in gate_lines)
    assert "| latency | `latency.p99` |" in markdown
    assert lines[0].startswith("## ✅ ")
    assert any(line.startswith("**Latency** (client p50/p95/p99/max):") for line in lines)
    assert any(line.startswith("**Batches** (size×executions): 1×") for line in lines)
    assert any(line.startswith("**Saturation:** Knee at concurrency 60") for line in lines)
    assert "<svg" not in markdown


def test_markdown_cells_cannot_break_the_table() -> None:
    odd = load("triton")
    gate_of(odd, "latency.p99")["name"] = "a | b\nc`d"
    markdown = render_markdown(typed(odd))
    assert "| a \\| b c\\`d |" in markdown


@pytest.mark.parametrize("sparse", [
    {},
    {"run_id": "20261129-161405-c8a525", "stages": []},
    {"status": "failed", "stages": [
        {"name": "readiness", "status": "failed", "message": "server exited"},
        {"name": "latency", "status": "aborted"}, {"name": "saturation", "status": "aborted",
                                                   "details": {"probes": [{"p99_ms": "x"}]}}]},
    {"stages": [{"name": "latency", "metrics": {"p99_ms": None, "p50_ms": True}, "gates": [
        {"name": "latency.p99"}], "details": {"batch_executions": {"x": 1, "2": "y"},
                                             "preferred_batch_sizes": "8"}}],
     "server": "triton", "model": {"sha256": None}},
])
def test_sparse_or_odd_records_render_without_errors(sparse: dict[str, Any]) -> None:
    document = parse_html(render_html(typed(sparse), baseline=typed(sparse)))
    for element_id in ("gates", "knee-chart", "batch-chart"):
        assert document.by_id(element_id) is not None
    assert render_markdown(typed(sparse), baseline=typed(sparse)).startswith("## ")


def test_brackets_in_a_message_are_text_not_markup() -> None:
    """A model's exception or a path may hold `[/x]`, and a contract `[n, 4]`: shown as
    written in the terminal report, never read as Rich markup (which raised, or hid them)."""
    from pipeline.report.formats import render
    record = load("triton")
    record["stages"][0]["message"] = "boom [/x] on model m/x[/y]/model.pt, shape [n, 4]"
    text = render(typed(record), "terminal")
    assert "boom [/x] on model m/x[/y]/model.pt, shape [n, 4]" in text
