"""The tune run's report: a rich table for the terminal and one offline HTML file, styled
as the run report, with a chart of every measured config's capacity at the SLO (and its
interval) against its p99, and the SLO line.

Measured numbers are shown as they are; predictions are always labelled "predicted".
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from rich.table import Table

from pipeline.report.charts import RangePoint, capacity_chart
from pipeline.report.elements import add_banner, add_element, add_section, add_table
from pipeline.report.html import new_document
from pipeline.statistics.capacity_figure import CapacityFigure


def _rate(value: Any) -> str:
    return f"{value:,.0f}/s" if isinstance(value, (int, float)) else "-"


def _ms(value: Any) -> str:
    return f"{value:.2f}ms" if isinstance(value, (int, float)) else "-"


def _mib(value: Any) -> str:
    return f"{value:,.0f} MiB" if isinstance(value, (int, float)) else "not measured"


def measured_candidates(section: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The verified configs, the baseline first when it is outside the space (older records
    have no baseline)."""
    candidates: list[Mapping[str, Any]] = list(section["candidates"])
    baseline = section.get("baseline")
    if baseline and not section.get("baseline_in_space"):
        candidates.insert(0, baseline)
    return candidates


def drift_factor(section: Mapping[str, Any]) -> float:
    """The factor the run widened every interval by (1 for older records, or none)."""
    factor = (section.get("drift") or {}).get("factor")
    return float(factor) if isinstance(factor, (int, float)) and factor > 1 else 1.0


def drift_text(section: Mapping[str, Any]) -> str:
    """The record's line on the machine's drift ("" for older records)."""
    return str((section.get("drift") or {}).get("text") or "")


def capacity_text(measured: Mapping[str, Any], drift: float = 1.0) -> str:
    """The capacity with its interval, exact or a lower bound, and the interval as the
    decision saw it, widened by the machine's drift; the older records' single
    throughput figure otherwise."""
    figure = CapacityFigure.from_json(measured.get("capacity"))
    if figure is None:
        return _rate(measured.get("throughput_rps"))
    if figure.bound == "lower_bound":
        text = f"≥ {figure.rps:,.0f}/s (lower bound: {figure.capped_by})"
    else:
        text = f"{figure.rps:,.0f}/s [{figure.low_rps:,.0f}–{figure.top:,.0f}/s]"
    if drift <= 1.0:
        return text
    wide = figure.widened(drift)
    top = "" if wide.high_rps is None else f"{wide.high_rps:,.0f}/s"
    return f"{text}; with the drift [{wide.low_rps:,.0f}/s–{top or '…'}]"


def _model(predicted: Mapping[str, Any], measured: Mapping[str, Any]) -> str:
    rate = predicted.get("throughput_rps")
    if not isinstance(rate, (int, float)):
        return "not predicted"
    seen = measured.get("throughput_rps")
    ratio = f", measured/predicted {seen / rate:.2f}" \
        if isinstance(seen, (int, float)) and rate > 0 else ""
    return f"{_rate(rate)} (predicted{ratio})"


def candidate_rows(section: Mapping[str, Any]) -> list[list[str]]:
    winner = (section.get("winner") or {}).get("label")
    baseline = (section.get("baseline") or {}).get("label")
    tie = set(section.get("tie") or [])
    drift = drift_factor(section)
    rows = []
    for candidate in measured_candidates(section):
        measured = candidate.get("measured") or {}
        predicted = candidate.get("predicted") or {}
        verdict = "winner" if candidate["label"] == winner else (
            ("tied with the best" if candidate["label"] in tie else "meets SLO")
            if candidate["meets_slo"] else "missed: " + "; ".join(candidate["missed"])[:160])
        label = candidate["label"] + (" (baseline)" if candidate["label"] == baseline else "")
        rows.append([label, capacity_text(measured, drift),
                     _ms(measured.get("p99_ms")), _mib(measured.get("rss_mb")),
                     _gpu(measured.get("gpu_mb"), section),
                     _model(predicted, measured), verdict])
    return rows


def _gpu(value: Any, section: Mapping[str, Any]) -> str:
    if isinstance(value, (int, float)):
        return f"{value:,.0f} MiB"
    return "not measured" if "not measured" in str(section.get("gpu_memory")) else "-"


HEADERS = ["config", "capacity at the SLO", "p99 (latency stage)", "memory (RSS)", "GPU memory",
           "model", "result"]


def render_tune_table(record: Mapping[str, Any]) -> Table:
    section = record["tune"]
    title = (f"tune {record['name']} · run {record['run_id']}: {len(section['candidates'])} of "
             f"{section['space_size']} configs measured, {len(section['pruned'])} pruned")
    table = Table(title=title, title_justify="left", caption=drift_text(section) or None,
                  caption_justify="left")
    for header in HEADERS:
        table.add_column(header)
    for row in candidate_rows(section):
        style = "bold green" if row[-1] == "winner" else None
        table.add_row(*row, style=style)
    return table


def render_tune_html(record: Mapping[str, Any]) -> str:
    """The tune report, styled as the run report: the verdict, the chart of every measured
    config's capacity with its interval, the table, the recommended block, what was pruned."""
    section = record["tune"]
    html, main = new_document(f"serve-pipeline tune · run {record['run_id']}")
    passed = record["status"] == "passed"
    _, left = add_banner(main, "passed" if passed else "failed", "pass" if passed else "fail",
                         str(record["status"]).upper(), f"tune · {record['name']}",
                         f"run {record['run_id']}")
    add_element(left, "div", section["why"], id="verdict",
                style="font-size: 16px; font-weight: 600; margin-top: 8px")
    add_element(main, "p", (
        f"{section['space_size']} configs in the space, {section['configs_explored']} "
        f"explored, {section['configs_measured']} verified with the latency and saturation "
        f"stages; wall {section['wall_s']:.0f}s of a {section['budget_s']:.0f}s budget"
        f"{' (budget exhausted)' if section['budget_exhausted'] else ''}; "
        f"{section['restarts']}; GPU memory {section['gpu_memory']}."), cls="muted")
    if drift_text(section):
        add_element(main, "p", drift_text(section) + ".", id="tune-drift", cls="muted")
    drift = drift_factor(section)
    chart = add_section(main, "Capacity at the SLO against p99, with each interval" + (
        f" widened by the machine's drift (x{drift:.2f}), as the pick saw it"
        if drift > 1.0 else ""))
    chart.append(capacity_points_chart(section))
    body = add_table(add_section(main, "Every measured config"),
                     [(text, "") for text in HEADERS], "tune-candidates")
    for row in candidate_rows(section):
        line = add_element(body, "tr", cls="pass" if row[-1] == "winner" else None)
        add_element(line, "td", row[0], cls="label")
        for text in row[1:]:
            add_element(line, "td", text, cls="mono")
    if section.get("recommended"):
        add_element(add_section(main, "Recommended server block"), "pre",
                    recommended_yaml(section["recommended"]))
    _pruned(main, section)
    return "<!DOCTYPE html>\n" + ET.tostring(html, encoding="unicode", method="html") + "\n"


def _pruned(parent: ET.Element, section: Mapping[str, Any]) -> None:
    body = add_table(add_section(parent, f"Pruned by the model ({len(section['pruned'])})"),
                     [("config", ""), ("why", "")], "tune-pruned")
    for item in section["pruned"]:
        line = add_element(body, "tr")
        add_element(line, "td", item["label"], cls="label")
        add_element(line, "td", item["reason"])


def recommended_yaml(block: Mapping[str, Any]) -> str:
    server = block["server"]
    batching = server["batching"]
    return (f"server:\n  device: {server['device']}\n  instances: {server['instances']}\n"
            f"  batching:\n    max_batch_size: {batching['max_batch_size']}\n"
            f"    max_queue_delay: {batching['max_queue_delay']}\n"
            f"    preferred_batch_sizes: {batching['preferred_batch_sizes']}\n")


def capacity_points_chart(section: Mapping[str, Any]) -> ET.Element:
    """Each measured config's capacity at the SLO (y, with its interval; the older records'
    single throughput without one) against its latency stage's p99 (x); slo.p99 as a line.
    The intervals are widened by the run's drift, as the decision widened them."""
    winner = (section.get("winner") or {}).get("label")
    drift = drift_factor(section)
    points = []
    for candidate in measured_candidates(section):
        measured = candidate.get("measured") or {}
        if measured.get("p99_ms") is None:
            continue
        figure = CapacityFigure.from_json(measured.get("capacity"))
        figure = figure.widened(drift) if figure else None
        rate = figure.rps if figure else float(measured.get("throughput_rps") or 0.0)
        low = figure.low_rps if figure else rate
        high = figure.high_rps if figure else rate
        outcome = "winner" if candidate["label"] == winner else \
            "pass" if candidate["meets_slo"] else "missed"
        points.append(RangePoint(float(measured["p99_ms"]), rate, low, high,
                                 candidate["label"], outcome))
    return capacity_chart(points, slo=float(section["slo"]["p99_ms"]))
