"""A comparison record as one self-contained HTML page, styled like the run report:
inline CSS and SVG, no script, every string escaped by the serializer."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from pipeline.report.elements import add_banner, add_element, add_section, add_table
from pipeline.report.html import new_document
from pipeline.report.sidebyside.charts import latency_chart, throughput_chart
from pipeline.report.sidebyside.views import (
    failure_rows,
    kinds,
    number,
    summary_rows,
    translation_rows,
    verdict_line,
)


def _banner(parent: ET.Element, record: Mapping[str, Any]) -> None:
    winner = record.get("winner")
    _, left = add_banner(parent, "passed" if winner else "other",
                         "pass" if winner else "other", (winner or "no winner").upper(),
                         f"{' vs '.join(kinds(record))} · {record.get('name')}",
                         f"compare {record.get('compare_id')} · spec {record.get('spec_file')}"
                         f" · {number(record.get('duration_s'), ' s', 0)}")
    # Under the heading, not beside it: the verdict line is a sentence, not a badge.
    add_element(left, "div", verdict_line(record), id="verdict",
                style="font-size: 16px; font-weight: 600; margin-top: 8px")


def _rows(parent: ET.Element, title: str, headers: list[str], rows: list[list[str]],
          table_id: str) -> None:
    body = add_table(add_section(parent, title), [(h, "") for h in headers], table_id)
    for row in rows:
        tr = add_element(body, "tr")
        add_element(tr, "td", row[0], cls="label")
        for cell in row[1:]:
            add_element(tr, "td", cell, cls="mono")


def _windows(parent: ET.Element, record: Mapping[str, Any]) -> None:
    section = add_section(parent, "Every window, in the order it ran")
    plan = record.get("plan", {})
    add_element(section, "p", f"{plan.get('rounds')} rounds over load points "
                f"{plan.get('load_points')}, {plan.get('window_s')} s each, one server loaded at a "
                f"time; who goes first alternates by round. Interleaved: "
                f"{number(plan.get('interleaved'))}. {record.get('client', {}).get('differs')}.",
                cls="muted")
    body = add_table(section, [(h, "") for h in ("#", "round", "server", "concurrency",
                                             "throughput", "p50", "p95", "p99", "errors",
                                             "SLO")], "windows")
    for w in record.get("windows", []):
        tr = add_element(body, "tr", cls="pass" if w["met_slo"] else "fail")
        for cell in (str(w["index"] + 1), str(w["round"] + 1), w["kind"],
                     str(w["concurrency"]), number(w["throughput_rps"], "/s", 0),
                     number(w["p50_ms"], " ms", 2), number(w["p95_ms"], " ms", 2),
                     number(w["p99_ms"], " ms", 2), f"{w['error_rate']:.2%}",
                     "met" if w["met_slo"] else "missed"):
            add_element(tr, "td", cell, cls="mono")


def _configs(parent: ET.Element, record: Mapping[str, Any]) -> None:
    section = add_section(parent, "The serving artifact and config each needs")
    for kind in kinds(record):
        server = record["servers"][kind]
        add_element(section, "h3", f"{kind}: {server.get('artifact', {}).get('config_name', '')}")
        add_element(section, "pre", str(server.get("config", "not built")), cls="mono")


def render_sidebyside_html(record: Mapping[str, Any]) -> str:
    html, main = new_document(f"serve-pipeline compare · {record.get('compare_id')}")
    _banner(main, record)
    names = kinds(record)
    _rows(main, "Side by side", ["", *names],
          [[label, *cells] for label, cells in summary_rows(record)], "side-by-side")
    curves = {kind: record["servers"][kind].get("curve", []) for kind in names}
    charts = add_section(main, "Latency and throughput against offered load")
    charts.append(latency_chart(curves, record.get("slo", {}).get("p99_ms")))
    charts.append(throughput_chart(curves, {k: record["servers"][k].get("throughput_at_slo")
                                            for k in names}))
    _rows(main, "The failure path", ["probe", *names],
          [[probe, *cells] for probe, cells in failure_rows(record)], "failure-path")
    _rows(main, "The server block, as each server is given it", ["spec key", "written",
                                                                 *names],
          [[key, written, *cells] for key, written, cells in translation_rows(record)],
          "translation")
    _windows(main, record)
    _configs(main, record)
    return "<!DOCTYPE html>\n" + ET.tostring(html, encoding="unicode", method="html") + "\n"
