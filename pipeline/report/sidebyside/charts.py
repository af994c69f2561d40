"""Inline SVG charts of a comparison: both servers' curves on one set of axes.

Built with the run report's chart helpers (pipeline/report/charts.py), so they look
and escape the same way."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.report.charts import (
    FAIL,
    MUTED,
    Margins,
    Scale,
    _el,
    _empty,
    _log2_bounds,
    _log2_x_axis,
    _num,
    _root,
    _y_axis,
    ticks,
)

SERVER_COLOURS = ("#2f81f7", "#bf8700")
# p99 solid and thick; p95 dashed; p50 dotted.
PERCENTILE_STYLE = {"p99_ms": ("", 2.2), "p95_ms": ("6 3", 1.4), "p50_ms": ("2 3", 1.4)}


def _frame(chart_id: str, title: str, x_values: Sequence[float], y_max: float,
           y_label: str, width: float, height: float) -> tuple[ET.Element, Scale, Scale,
                                                                 tuple[float, float]]:
    margins = Margins(right=230)
    svg = _root(chart_id, width, height, title)
    left, right = margins.left, width - margins.right
    bottom, top = height - margins.bottom, margins.top
    low, high = _log2_bounds(list(x_values))
    x_scale = Scale(low, high, left + 8, right - 8)
    levels = ticks(max(y_max, 1e-9) * 1.05, 5)
    y_of = Scale(0, levels[-1], bottom, top)
    _y_axis(svg, levels, y_of, left, right)
    _log2_x_axis(svg, x_scale, (low, high), (left, right, bottom))
    _el(svg, "text", "offered load: concurrency (log₂ scale)", x=(left + right) / 2,
        y=height - 8, text_anchor="middle", fill=MUTED)
    _el(svg, "text", y_label, x=14, y=(top + bottom) / 2, text_anchor="middle", fill=MUTED,
        transform=f"rotate(-90 14 {_num((top + bottom) / 2)})")
    return svg, x_scale, y_of, (left, right)


def _series(svg: ET.Element, points: list[tuple[float, float]], x_scale: Scale, y_of: Scale,
            colour: str, dash: str, width: float, css: str, label: str) -> None:
    coords = [(x_scale(math.log2(x)), y_of(y)) for x, y in points]
    line = _el(svg, "polyline", class_=css, fill="none", stroke=colour, stroke_width=width,
               points=" ".join(f"{_num(x)},{_num(y)}" for x, y in coords))
    if dash:
        line.set("stroke-dasharray", dash)
    _el(line, "title", label)
    for (x, y), (raw_x, raw_y) in zip(coords, points, strict=True):
        dot = _el(svg, "circle", class_=css, cx=x, cy=y, r=2.5, fill=colour)
        _el(dot, "title", f"{label}: concurrency {raw_x:g}: {raw_y:,.2f}")


def _legend(svg: ET.Element, entries: list[tuple[str, str, str]], x: float) -> None:
    for index, (text, colour, dash) in enumerate(entries):
        y = 30 + index * 18
        line = _el(svg, "line", x1=x, x2=x + 24, y1=y - 4, y2=y - 4, stroke=colour,
                   stroke_width=2)
        if dash:
            line.set("stroke-dasharray", dash)
        _el(svg, "text", text, x=x + 30, y=y, fill=colour)


def latency_chart(curves: Mapping[str, list[dict[str, Any]]], slo_ms: float | None,
                  chart_id: str = "latency-chart", width: float = 860,
                  height: float = 320) -> ET.Element:
    """p50, p95 and p99 of each server against concurrency, with the SLO line."""
    title = "p50 / p95 / p99 latency against offered load, both servers"
    xs = [p["concurrency"] for curve in curves.values() for p in curve]
    if not xs:
        return _empty(chart_id, width, title, "no measured windows")
    top = max([p["p99_ms"] for curve in curves.values() for p in curve] + [slo_ms or 0])
    svg, x_scale, y_of, (left, right) = _frame(chart_id, title, xs, top, "latency (ms)",
                                               width, height)
    if slo_ms is not None:
        y = y_of(slo_ms)
        _el(svg, "line", class_="slo", x1=left, x2=right, y1=y, y2=y, stroke=FAIL,
            stroke_width=1.5, stroke_dasharray="6 4")
        _el(svg, "text", f"SLO p99 {slo_ms:g} ms", x=left + 6, y=y - 6, fill=FAIL,
            font_weight="bold")
    legend = []
    for colour, (kind, curve) in zip(SERVER_COLOURS, curves.items(), strict=False):
        for key, (dash, stroke) in PERCENTILE_STYLE.items():
            label = f"{kind} {key.removesuffix('_ms')}"
            _series(svg, [(p["concurrency"], p[key]) for p in curve], x_scale, y_of, colour,
                    dash, stroke, f"curve {kind} {key}", label)
            legend.append((label, colour, dash))
    _legend(svg, legend, right + 16)
    return svg


def throughput_chart(curves: Mapping[str, list[dict[str, Any]]],
                     at_slo: Mapping[str, float | None], chart_id: str = "throughput-chart",
                     width: float = 860, height: float = 280) -> ET.Element:
    """Throughput of each server against concurrency; a ring where it met the SLO best."""
    title = "throughput against offered load, both servers (ring: throughput at the SLO)"
    xs = [p["concurrency"] for curve in curves.values() for p in curve]
    if not xs:
        return _empty(chart_id, width, title, "no measured windows")
    top = max(p["throughput_rps"] for curve in curves.values() for p in curve)
    svg, x_scale, y_of, (_, right) = _frame(chart_id, title, xs, top, "throughput (/s)",
                                            width, height)
    legend = []
    for colour, (kind, curve) in zip(SERVER_COLOURS, curves.items(), strict=False):
        _series(svg, [(p["concurrency"], p["throughput_rps"]) for p in curve], x_scale, y_of,
                colour, "", 2.0, f"curve {kind} throughput", f"{kind} throughput")
        for point in curve:
            x, y = x_scale(math.log2(point["concurrency"])), y_of(point["throughput_rps"])
            if not point["met_slo"]:
                _el(svg, "circle", class_="missed", cx=x, cy=y, r=4.5, fill=FAIL)
        best = at_slo.get(kind)
        if best:
            y = y_of(best)
            _el(svg, "line", class_="at-slo", x1=x_scale.start, x2=x_scale.end, y1=y, y2=y,
                stroke=colour, stroke_dasharray="8 3")
        legend.append((f"{kind}" + (f": {best:,.0f}/s at the SLO" if best else
                                    ": never met the SLO"), colour, ""))
    legend.append(("red dot: SLO missed", FAIL, ""))
    _legend(svg, legend, right + 16)
    return svg
