"""A comparison record (comparison.json) in the terminal: side-by-side tables, the
verdict last."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pipeline.report.sidebyside import views


def _table(title: str, first: list[str], record: Mapping[str, Any]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in [*first, *views.kinds(record)]:
        table.add_column(column)
    return table


def _curves(record: Mapping[str, Any]) -> Table:
    table = Table(title="p50 / p95 / p99 (ms) and throughput against offered load "
                        "(closed-loop concurrency), windows merged", title_justify="left")
    table.add_column("concurrency", justify="right")
    for kind in views.kinds(record):
        table.add_column(kind, justify="right")
    by_kind = {kind: {p["concurrency"]: p for p in record["servers"][kind].get("curve", [])}
               for kind in views.kinds(record)}
    for point in record.get("plan", {}).get("load_points", []):
        cells = []
        for kind in views.kinds(record):
            p = by_kind[kind].get(point)
            cells.append("–" if p is None else
                         f"{p['p50_ms']:.1f} / {p['p95_ms']:.1f} / {p['p99_ms']:.1f} · "
                         f"{p['throughput_rps']:,.0f}/s" + ("" if p["met_slo"] else " ✗"))
        table.add_row(str(point), *cells)
    return table


def render_sidebyside_terminal(record: Mapping[str, Any]) -> RenderableType:
    translation = _table("The server block, as each server is given it",
                         ["spec key", "written"], record)
    for key, written, cells in views.translation_rows(record):
        translation.add_row(key, written, *cells)
    summary = _table("Side by side", [""], record)
    for label, cells in views.summary_rows(record):
        summary.add_row(label, *cells)
    failures = _table("The failure path (status code, and whether the server stays up)",
                      ["probe"], record)
    for probe, cells in views.failure_rows(record):
        failures.add_row(probe, *cells)
    plan = record.get("plan", {})
    plan_line = (f"plan: {plan.get('rounds')} rounds × load points {plan.get('load_points')} "
                 f"× {views.number(plan.get('window_s'), ' s')} windows, interleaved: "
                 f"{views.number(plan.get('interleaved'))}; "
                 f"{record.get('client', {}).get('differs')}")
    winner = record.get("winner")
    style = "bold green" if winner else "bold yellow"
    return Group(translation, summary, _curves(record), failures, Text(plan_line),
                 Text.assemble(("verdict: ", "bold"), (views.verdict_line(record), style)))
