"""The tune run's report: a rich table for the terminal and one offline HTML file with a
chart of throughput at the SLO against p99, one point per verified config, the SLO line.

Measured numbers are shown as they are; predictions are always labelled "predicted".
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from typing import Any

from rich.table import Table

from pipeline.statistics.capacity_figure import CapacityFigure

INK, MUTED, GRID, PASS, FAIL, WIN = "#1f2328", "#656d76", "#e6e9ed", "#1a7f37", "#cf222e", \
    "#2f81f7"
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640.0, 320.0, 64.0, 24.0, 24.0, 48.0
CSS = ("body{font:14px system-ui,sans-serif;color:#1f2328;max-width:980px;margin:24px auto}"
       "table{border-collapse:collapse;margin:8px 0}td,th{border-bottom:1px solid #e6e9ed;"
       "padding:4px 8px;text-align:left}.ok{color:#1a7f37}.bad{color:#cf222e}"
       ".muted{color:#656d76}pre{background:#f6f8fa;padding:8px}")


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


def capacity_text(measured: Mapping[str, Any]) -> str:
    """The capacity with its interval, exact or a lower bound; the older records' single
    throughput figure otherwise."""
    figure = CapacityFigure.from_json(measured.get("capacity"))
    if figure is None:
        return _rate(measured.get("throughput_rps"))
    if figure.bound == "lower_bound":
        return f"≥ {figure.rps:,.0f}/s (lower bound: {figure.capped_by})"
    return f"{figure.rps:,.0f}/s [{figure.low_rps:,.0f}–{figure.top:,.0f}/s]"


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
    rows = []
    for candidate in measured_candidates(section):
        measured = candidate.get("measured") or {}
        predicted = candidate.get("predicted") or {}
        verdict = "winner" if candidate["label"] == winner else (
            ("tied with the best" if candidate["label"] in tie else "meets SLO")
            if candidate["meets_slo"] else "missed: " + "; ".join(candidate["missed"])[:160])
        label = candidate["label"] + (" (baseline)" if candidate["label"] == baseline else "")
        rows.append([label, capacity_text(measured),
                     _ms(measured.get("p99_ms")), _mib(measured.get("rss_mb")),
                     _gpu(measured.get("gpu_mb"), section),
                     _model(predicted, measured), verdict])
    return rows


def _gpu(value: Any, section: Mapping[str, Any]) -> str:
    if isinstance(value, (int, float)):
        return f"{value:,.0f} MiB"
    return "not measured" if "not measured" in str(section.get("gpu_memory")) else "-"


Scale = Callable[[float], float]
HEADERS = ["config", "capacity at the SLO", "p99 (latency stage)", "memory (RSS)", "GPU memory",
           "model", "result"]


def render_tune_table(record: Mapping[str, Any]) -> Table:
    section = record["tune"]
    title = (f"tune {record['name']} · run {record['run_id']}: {len(section['candidates'])} of "
             f"{section['space_size']} configs measured, {len(section['pruned'])} pruned")
    table = Table(title=title, title_justify="left")
    for header in HEADERS:
        table.add_column(header)
    for row in candidate_rows(section):
        style = "bold green" if row[-1] == "winner" else None
        table.add_row(*row, style=style)
    return table


def render_tune_html(record: Mapping[str, Any]) -> str:
    section = record["tune"]
    html = ET.Element("html", {"lang": "en"})
    head = ET.SubElement(html, "head")
    ET.SubElement(head, "meta", {"charset": "utf-8"})
    ET.SubElement(head, "title").text = f"tune {record['name']} {record['run_id']}"
    ET.SubElement(head, "style").text = CSS
    body = ET.SubElement(html, "body")
    ET.SubElement(body, "h1").text = f"tune {record['name']} · run {record['run_id']}"
    verdict = ET.SubElement(body, "p", {"class": "ok" if record["status"] == "passed"
                                        else "bad"})
    verdict.text = section["why"]
    notes = ET.SubElement(body, "p", {"class": "muted"})
    notes.text = (f"{section['space_size']} configs in the space, "
                  f"{section['configs_explored']} explored, {section['configs_measured']} "
                  f"verified with the latency and saturation stages; wall "
                  f"{section['wall_s']:.0f}s of a {section['budget_s']:.0f}s budget"
                  f"{' (budget exhausted)' if section['budget_exhausted'] else ''}; "
                  f"{section['restarts']}; GPU memory {section['gpu_memory']}.")
    body.append(throughput_chart(section))
    table = ET.SubElement(body, "table")
    header = ET.SubElement(table, "tr")
    for text in HEADERS:
        ET.SubElement(header, "th").text = text
    for row in candidate_rows(section):
        line = ET.SubElement(table, "tr")
        for text in row:
            ET.SubElement(line, "td").text = text
    if section.get("recommended"):
        ET.SubElement(body, "h2").text = "recommended server block"
        ET.SubElement(body, "pre").text = recommended_yaml(section["recommended"])
    _pruned(body, section)
    return "<!doctype html>\n" + ET.tostring(html, encoding="unicode", method="html") + "\n"


def _pruned(body: ET.Element, section: Mapping[str, Any]) -> None:
    ET.SubElement(body, "h2").text = f"pruned by the model ({len(section['pruned'])})"
    table = ET.SubElement(body, "table")
    for item in section["pruned"]:
        line = ET.SubElement(table, "tr")
        ET.SubElement(line, "td").text = item["label"]
        ET.SubElement(line, "td").text = item["reason"]


def recommended_yaml(block: Mapping[str, Any]) -> str:
    server = block["server"]
    batching = server["batching"]
    return (f"server:\n  device: {server['device']}\n  instances: {server['instances']}\n"
            f"  batching:\n    max_batch_size: {batching['max_batch_size']}\n"
            f"    max_queue_delay: {batching['max_queue_delay']}\n"
            f"    preferred_batch_sizes: {batching['preferred_batch_sizes']}\n")


def throughput_chart(section: Mapping[str, Any]) -> ET.Element:
    """Throughput at the SLO (y) against the latency stage's p99 (x), one point per
    verified config; the vertical line is slo.p99."""
    points = [(float(c["measured"]["p99_ms"]), float(c["measured"]["throughput_rps"] or 0.0), c)
              for c in section["candidates"]
              if c.get("measured") and c["measured"].get("p99_ms") is not None]
    slo = float(section["slo"]["p99_ms"])
    svg = ET.Element("svg", {"id": "tune-chart", "viewBox": f"0 0 {WIDTH:g} {HEIGHT:g}",
                             "width": f"{WIDTH:g}", "height": f"{HEIGHT:g}", "role": "img",
                             "font-size": "12"})
    ET.SubElement(svg, "title").text = "throughput at the SLO against p99, one point per config"
    x_max = max([slo * 1.15] + [p[0] * 1.1 for p in points])
    y_max = max([1.0] + [p[1] * 1.15 for p in points])

    def x(value: float) -> float:
        return LEFT + value / x_max * (WIDTH - LEFT - RIGHT)

    def y(value: float) -> float:
        return HEIGHT - BOTTOM - value / y_max * (HEIGHT - TOP - BOTTOM)

    _axes(svg, x_max, y_max, x, y)
    _line(svg, x(slo), TOP, x(slo), HEIGHT - BOTTOM, FAIL, dash=True)
    _text(svg, x(slo) + 4, TOP + 10, f"SLO p99 {slo:g}ms", FAIL)
    winner = (section.get("winner") or {}).get("label")
    for p99, rate, candidate in points:
        colour = WIN if candidate["label"] == winner else PASS if candidate["meets_slo"] \
            else FAIL
        dot = ET.SubElement(svg, "circle", {"cx": f"{x(p99):.1f}", "cy": f"{y(rate):.1f}",
                                            "r": "6" if colour == WIN else "4",
                                            "fill": colour})
        ET.SubElement(dot, "title").text = (f"{candidate['label']}: {_rate(rate)} at the SLO, "
                                            f"p99 {_ms(p99)} (measured)")
        _text(svg, x(p99) + 7, y(rate) - 6, candidate["label"], MUTED)
    return svg


def _axes(svg: ET.Element, x_max: float, y_max: float, x: Scale, y: Scale) -> None:
    for step in range(5):
        value = y_max * step / 4
        _line(svg, LEFT, y(value), WIDTH - RIGHT, y(value), GRID)
        _text(svg, LEFT - 6, y(value) + 4, f"{value:,.0f}", MUTED, anchor="end")
        xv = x_max * step / 4
        _text(svg, x(xv), HEIGHT - BOTTOM + 16, f"{xv:.1f}", MUTED, anchor="middle")
    _text(svg, (LEFT + WIDTH - RIGHT) / 2, HEIGHT - 8, "p99 (ms, latency stage)", INK,
          anchor="middle")
    _text(svg, 12, TOP - 8, "throughput at the SLO (/s)", INK)


def _line(svg: ET.Element, x1: float, y1: float, x2: float, y2: float, colour: str,
          dash: bool = False) -> None:
    attrs = {"x1": f"{x1:.1f}", "y1": f"{y1:.1f}", "x2": f"{x2:.1f}", "y2": f"{y2:.1f}",
             "stroke": colour}
    if dash:
        attrs["stroke-dasharray"] = "4 3"
    ET.SubElement(svg, "line", attrs)


def _text(svg: ET.Element, x: float, y: float, text: str, colour: str,
          anchor: str = "start") -> None:
    ET.SubElement(svg, "text", {"x": f"{x:.1f}", "y": f"{y:.1f}", "fill": colour,
                                "text-anchor": anchor}).text = text
