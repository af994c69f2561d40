"""Small inline SVG charts for the HTML report: pure functions, no state, no JS.

Charts are built as ElementTree elements so every label is escaped by the serializer;
`to_svg` gives the standalone text (with the SVG namespace) when a string is wanted.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

SVG_NS = "http://www.w3.org/2000/svg"
INK = "#1f2328"
MUTED = "#656d76"
GRID = "#e6e9ed"
PASS = "#1a7f37"
FAIL = "#cf222e"
BAR = "#6e7f96"
PREFERRED = "#2f81f7"


@dataclass(frozen=True)
class Margins:
    """Room around a chart's plot area for axis labels and the title, in SVG units."""

    left: float = 56      # the y-axis tick labels
    right: float = 20
    top: float = 22       # the title
    bottom: float = 46    # the x-axis tick labels and its label


@dataclass(frozen=True)
class ChartPoint:
    x: float
    y: float
    ok: bool
    label: str
    throughput: float | None = None


def _num(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def _el(parent: ET.Element, tag: str, text: str | None = None,
        **attrs: str | float) -> ET.Element:
    # Python names cannot hold "-" or be "class": stroke_width → stroke-width, class_ → class.
    element = ET.SubElement(parent, tag, {key.rstrip("_").replace("_", "-"): _num(value)
                                          if isinstance(value, float | int) else value
                                          for key, value in attrs.items()})
    if text is not None:
        element.text = text
    return element


def _root(chart_id: str, width: float, height: float, title: str) -> ET.Element:
    svg = ET.Element("svg", {"id": chart_id, "viewBox": f"0 0 {_num(width)} {_num(height)}",
                             "width": _num(width), "height": _num(height), "role": "img",
                             "aria-label": title, "font-size": "12"})
    _el(svg, "title", title)
    return svg


def _empty(chart_id: str, width: float, title: str, message: str) -> ET.Element:
    """A short placeholder that keeps the chart's id in the page."""
    svg = _root(chart_id, width, 40, title)
    _el(svg, "text", message, x=width / 2, y=24, text_anchor="middle", fill=MUTED)
    return svg


def nice_step(span: float, count: int = 5) -> float:
    """A 1, 2, 2.5 or 5 × 10^k step that divides `span` into about `count` intervals."""
    raw = span / max(count, 1)
    if raw <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(raw))
    return next(factor * magnitude for factor in (1.0, 2.0, 2.5, 5.0, 10.0)
                if factor * magnitude >= raw)


def ticks(maximum: float, count: int = 5) -> list[float]:
    """Ticks from 0 up to the first multiple of a nice step at or above `maximum`."""
    step = nice_step(maximum, count)
    top = max(1, math.ceil(maximum / step - 1e-9))
    return [step * index for index in range(top + 1)]


def _tick_text(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 or value.is_integer() else f"{value:g}"


class Scale:
    """Linear map from a data interval to a pixel interval (pixels may run downwards)."""

    def __init__(self, low: float, high: float, start: float, end: float) -> None:
        self.low, self.high, self.start, self.end = low, high, start, end

    def __call__(self, value: float) -> float:
        span = self.high - self.low or 1.0
        return self.start + (value - self.low) / span * (self.end - self.start)


def _y_axis(svg: ET.Element, levels: list[float], y_of: Scale, left: float,
            right: float) -> None:
    for level in levels:
        y = y_of(level)
        _el(svg, "line", x1=left, x2=right, y1=y, y2=y, stroke=GRID)
        _el(svg, "text", _tick_text(level), x=left - 6, y=y + 4, text_anchor="end", fill=MUTED)


def batch_chart(executions: Mapping[int, int], preferred: Collection[int], *,
                chart_id: str = "batch-chart", width: float = 560,
                height: float = 220) -> ET.Element:
    """Executions per formed batch size; preferred sizes in blue, a dashed stub where a
    preferred size never formed."""
    margins = Margins(left=60, bottom=40)
    sizes = sorted(set(executions) | set(preferred))
    if not sizes:
        return _empty(chart_id, width, "Batch executions by batch size", "no batch statistics")
    svg = _root(chart_id, width, height, "Batch executions by batch size")
    levels = ticks(max([*executions.values(), 1]), 4)
    bottom, top = height - margins.bottom, margins.top
    y_of = Scale(0, levels[-1], bottom, top)
    _y_axis(svg, levels, y_of, margins.left, width - margins.right)
    band = (width - margins.left - margins.right) / len(sizes)
    bar_width = min(44.0, band * 0.72)
    for index, size in enumerate(sizes):
        count = executions.get(size, 0)
        center = margins.left + band * (index + 0.5)
        is_preferred = size in preferred
        group = _el(svg, "g", class_="bar preferred" if is_preferred else "bar")
        _el(group, "title", f"batch size {size}: {count:,} executions"
            + (" (preferred)" if is_preferred else ""))
        if count == 0 and is_preferred:
            _el(group, "rect", x=center - bar_width / 2, y=bottom - 14, width=bar_width,
                height=14, fill="none", stroke=PREFERRED, stroke_dasharray="3 2")
            _el(group, "text", "none", x=center, y=bottom - 18, text_anchor="middle",
                fill=PREFERRED, font_size=10)
        else:
            bar_top = y_of(count)
            _el(group, "rect", x=center - bar_width / 2, y=bar_top, width=bar_width,
                height=max(bottom - bar_top, 1.0 if count else 0.0),
                fill=PREFERRED if is_preferred else BAR, rx=2)
            if band >= 26:
                _el(group, "text", f"{count:,}", x=center, y=bar_top - 4,
                    text_anchor="middle", fill=INK, font_size=10)
        _el(group, "text", str(size), x=center, y=bottom + 15, text_anchor="middle",
            fill=PREFERRED if is_preferred else INK,
            font_weight="bold" if is_preferred else "normal")
    _el(svg, "line", x1=margins.left, x2=width - margins.right, y1=bottom, y2=bottom,
        stroke=MUTED)
    _el(svg, "text", "batch size (server-formed)", x=(margins.left + width) / 2,
        y=height - 6, text_anchor="middle", fill=MUTED)
    _el(svg, "text", "executions", x=12, y=(top + bottom) / 2, text_anchor="middle",
        fill=MUTED, transform=f"rotate(-90 12 {_num((top + bottom) / 2)})")
    return svg


def _log2_bounds(values: Sequence[float]) -> tuple[int, int]:
    low = math.floor(math.log2(min(values)))
    high = math.ceil(math.log2(max(values)))
    return low, max(high, low + 1)


def knee_chart(points: Sequence[ChartPoint], *, slo: float | None, knee_x: float | None,
               knee_label: str | None = None, capacity_rps: float | None = None,
               capacity_label: str = "", chart_id: str = "knee-chart", width: float = 620,
               height: float = 300) -> ET.Element:
    """p99 (left y, linear) and throughput (right y, squares) against concurrency (x, log2),
    one circle per probe, the SLO as a dashed red line, the knee (or the cap's lower bound)
    as a ring with a vertical guide, and the open-loop capacity as a dashed blue line on the
    throughput axis."""
    usable = sorted((point for point in points if point.x > 0), key=lambda point: point.x)
    if not usable:
        return _empty(chart_id, width, "p99 latency and throughput against concurrency",
                      "no saturation probes")
    rates = [point.throughput for point in usable if point.throughput is not None]
    margins = Margins(right=64 if rates else 20)
    svg = _root(chart_id, width, height, "p99 latency and throughput against concurrency")
    left, right = margins.left, width - margins.right
    bottom, top = height - margins.bottom, margins.top
    low, high = _log2_bounds([point.x for point in usable])
    x_scale = Scale(low, high, left + 8, right - 8)

    def x_of(value: float) -> float:
        return x_scale(math.log2(value))

    levels = ticks(max([point.y for point in usable] + ([slo] if slo else [])) * 1.05, 5)
    y_of = Scale(0, levels[-1], bottom, top)
    _y_axis(svg, levels, y_of, left, right)
    _log2_x_axis(svg, x_scale, (low, high), (left, right, bottom))
    if slo is not None:
        y = y_of(slo)
        _el(svg, "line", class_="slo", x1=left, x2=right, y1=y, y2=y, stroke=FAIL,
            stroke_width=1.5, stroke_dasharray="6 4")
        _el(svg, "text", f"SLO p99 {slo:g} ms", x=left + 6, y=y - 6, text_anchor="start",
            fill=FAIL, font_weight="bold")
    if rates:
        _throughput_series(svg, usable, x_of, rates, capacity_rps, capacity_label,
                           (left, right, bottom, top))
    if knee_x is not None and knee_x > 0:
        _knee_guide(svg, x_of(knee_x), knee_label or f"knee: {knee_x:g}",
                    (left, right, bottom, top))
    _el(svg, "polyline", fill="none", stroke=BAR, stroke_width=1.5,
        points=" ".join(f"{_num(x_of(point.x))},{_num(y_of(point.y))}" for point in usable))
    for point in usable:
        x, y = x_of(point.x), y_of(point.y)
        if knee_x is not None and point.x == knee_x:
            _el(svg, "circle", class_="knee-marker", cx=x, cy=y, r=8, fill="none",
                stroke=INK, stroke_width=2)
        circle = _el(svg, "circle", class_="probe" + ("" if point.ok else " missed"), cx=x,
                     cy=y, r=4.5, fill=PASS if point.ok else FAIL, stroke="#ffffff")
        _el(circle, "title", point.label)
    _el(svg, "text", "concurrency (log₂ scale)", x=(left + right) / 2, y=height - 8,
        text_anchor="middle", fill=MUTED)
    _el(svg, "text", "p99 latency (ms)", x=14, y=(top + bottom) / 2, text_anchor="middle",
        fill=MUTED, transform=f"rotate(-90 14 {_num((top + bottom) / 2)})")
    return svg


def _log2_x_axis(svg: ET.Element, x_scale: Scale, exponents: tuple[int, int],
                 box: tuple[float, float, float]) -> None:
    """Ticks at the powers of two from 2**low to 2**high, and the axis line."""
    left, right, bottom = box
    for exponent in range(exponents[0], exponents[1] + 1):
        x = x_scale(exponent)
        _el(svg, "line", x1=x, x2=x, y1=bottom, y2=bottom + 4, stroke=MUTED)
        _el(svg, "text", _tick_text(2.0 ** exponent), x=x, y=bottom + 17,
            text_anchor="middle", fill=MUTED)
    _el(svg, "line", x1=left, x2=right, y1=bottom, y2=bottom, stroke=MUTED)


def _knee_guide(svg: ET.Element, x: float, label: str,
                box: tuple[float, float, float, float]) -> None:
    """A dotted vertical line at the knee, labelled on the side with more room."""
    left, right, bottom, top = box
    _el(svg, "line", class_="knee", x1=x, x2=x, y1=top, y2=bottom, stroke=INK,
        stroke_dasharray="2 3")
    anchor = "end" if x > (left + right) / 2 else "start"
    _el(svg, "text", label, class_="knee-label", x=x - 6 if anchor == "end" else x + 6,
        y=top + 10, text_anchor=anchor, fill=INK, font_weight="bold")


def _throughput_series(svg: ET.Element, usable: Sequence[ChartPoint],
                       x_of: Callable[[float], float], rates: list[float],
                       capacity_rps: float | None, capacity_label: str,
                       box: tuple[float, float, float, float]) -> None:
    """Throughput squares on a right-hand axis, and the capacity rate as a line on it."""
    left, right, bottom, top = box
    levels = ticks(max(rates + ([capacity_rps] if capacity_rps else [])) * 1.05, 5)
    y_of = Scale(0, levels[-1], bottom, top)
    for level in levels:
        _el(svg, "text", _tick_text(level), x=right + 6, y=y_of(level) + 4,
            text_anchor="start", fill=PREFERRED)
    measured = [point for point in usable if point.throughput is not None]
    _el(svg, "polyline", fill="none", stroke=PREFERRED, stroke_width=1.2,
        stroke_dasharray="4 2", points=" ".join(
            f"{_num(x_of(p.x))},{_num(y_of(p.throughput or 0.0))}" for p in measured))
    for point in measured:
        x, y = x_of(point.x), y_of(point.throughput or 0.0)
        square = _el(svg, "rect", class_="throughput", x=x - 3.5, y=y - 3.5, width=7,
                     height=7, fill=PREFERRED)
        _el(square, "title", f"concurrency {point.x:g}: {point.throughput:,.0f}/s")
    if capacity_rps is not None and capacity_rps > 0:
        y = y_of(capacity_rps)
        _el(svg, "line", class_="capacity", x1=left, x2=right, y1=y, y2=y, stroke=PREFERRED,
            stroke_width=1.5, stroke_dasharray="8 3")
        _el(svg, "text", capacity_label or f"capacity {capacity_rps:,.0f}/s",
            class_="capacity-label", x=right - 6, y=y - 6, text_anchor="end", fill=PREFERRED,
            font_weight="bold")
    _el(svg, "text", "throughput (/s)", x=right + 50, y=(top + bottom) / 2,
        text_anchor="middle", fill=PREFERRED,
        transform=f"rotate(90 {_num(right + 50)} {_num((top + bottom) / 2)})")


def to_svg(chart: ET.Element) -> str:
    """Standalone SVG text (the HTML report embeds the element itself, no namespace)."""
    standalone = ET.Element(chart.tag, {**chart.attrib, "xmlns": SVG_NS})
    standalone.extend(list(chart))
    return ET.tostring(standalone, encoding="unicode")


@dataclass(frozen=True)
class RangePoint:
    """One measured config: its p99 (x), its capacity (y) with the interval around it
    (`high` None: a lower bound, the true figure somewhere above), and how it fared."""

    x: float
    y: float
    low: float
    high: float | None
    label: str
    outcome: str          # "winner", "pass" or "missed"


def capacity_chart(points: Sequence[RangePoint], *, slo: float, chart_id: str = "tune-chart",
                   width: float = 640, height: float = 320) -> ET.Element:
    """Capacity at the SLO (y) against p99 (x), both on round ticks, one point per measured
    config with its interval as a bar (an arrow up for a lower bound), and slo.p99 as a
    dashed red line."""
    title = "capacity at the SLO against p99, one point per measured config"
    if not points:
        return _empty(chart_id, width, title, "no config was measured")
    margins = Margins(left=64, right=24, top=28)
    svg = _root(chart_id, width, height, title)
    left, right = margins.left, width - margins.right
    bottom, top = height - margins.bottom, margins.top
    y_levels = ticks(max(max(p.high or p.y * 1.15, p.y) for p in points) * 1.05, 5)
    x_levels = ticks(max([slo, *(p.x for p in points)]) * 1.1, 5)
    y_of = Scale(0, y_levels[-1], bottom, top)
    x_of = Scale(0, x_levels[-1], left, right)
    _y_axis(svg, y_levels, y_of, left, right)
    for level in x_levels:
        x = x_of(level)
        _el(svg, "line", x1=x, x2=x, y1=bottom, y2=bottom + 4, stroke=MUTED)
        _el(svg, "text", _tick_text(level), x=x, y=bottom + 17, text_anchor="middle",
            fill=MUTED)
    _el(svg, "line", x1=left, x2=right, y1=bottom, y2=bottom, stroke=MUTED)
    x = x_of(slo)
    _el(svg, "line", class_="slo", x1=x, x2=x, y1=top, y2=bottom, stroke=FAIL,
        stroke_width=1.5, stroke_dasharray="6 4")
    _el(svg, "text", f"SLO p99 {slo:g} ms", x=x + 6, y=top + 10, fill=FAIL,
        font_weight="bold")
    colours = {"winner": PREFERRED, "pass": PASS, "missed": FAIL}
    for point in points:
        _range_point(svg, point, x_of, y_of, top, colours.get(point.outcome, MUTED))
    _el(svg, "text", "p99 (ms, latency stage)", x=(left + right) / 2, y=height - 8,
        text_anchor="middle", fill=MUTED)
    _el(svg, "text", "capacity at the SLO (/s)", x=14, y=(top + bottom) / 2,
        text_anchor="middle", fill=MUTED,
        transform=f"rotate(-90 14 {_num((top + bottom) / 2)})")
    return svg


def _range_point(svg: ET.Element, point: RangePoint, x_of: Scale, y_of: Scale, top: float,
                 colour: str) -> None:
    x, y = x_of(point.x), y_of(point.y)
    group = _el(svg, "g", class_=f"config {point.outcome}")
    upper = f"{point.high:,.0f}/s" if point.high is not None else "a lower bound"
    _el(group, "title", f"{point.label}: capacity {point.y:,.0f}/s (interval "
        f"{point.low:,.0f}/s to {upper}), p99 {point.x:.2f} ms, measured")
    high_y = y_of(point.high) if point.high is not None else top + 6
    _el(group, "line", class_="interval", x1=x, x2=x, y1=y_of(point.low), y2=high_y,
        stroke=colour, stroke_width=1.5)
    if point.high is None:
        _el(group, "path", class_="lower-bound", fill=colour,
            d=f"M{_num(x - 4)},{_num(high_y + 6)} L{_num(x)},{_num(high_y)} "
              f"L{_num(x + 4)},{_num(high_y + 6)} Z")
    else:
        _el(group, "line", x1=x - 4, x2=x + 4, y1=high_y, y2=high_y, stroke=colour)
    _el(group, "line", x1=x - 4, x2=x + 4, y1=y_of(point.low), y2=y_of(point.low),
        stroke=colour)
    _el(group, "circle", cx=x, cy=y, r=6 if point.outcome == "winner" else 4.5, fill=colour,
        stroke="#ffffff")
    _el(group, "text", point.label, x=x + 8, y=y - 6, fill=MUTED, font_size=11)


@dataclass(frozen=True)
class TimePoint:
    """One time bucket of a replay: its start (s), the rate the log offered in it (/s),
    its p99 latency (ms) and its errors."""

    start_s: float
    offered_rps: float
    p99_ms: float
    errors: float = 0.0


def replay_chart(points: Sequence[TimePoint], *, bucket_s: float, slo: float | None,
                 chart_id: str = "replay-chart", width: float = 620,
                 height: float = 300) -> ET.Element:
    """The replay over time: the rate the log offered (right y, blue bars) against the p99
    latency of each bucket (left y, a line with a circle per bucket, red above the SLO),
    the SLO as a dashed red line."""
    title = "offered rate and p99 latency over the replay"
    if not points:
        return _empty(chart_id, width, title, "no replay")
    margins = Margins(right=64)
    svg = _root(chart_id, width, height, title)
    left, right = margins.left, width - margins.right
    bottom, top = height - margins.bottom, margins.top
    end = points[-1].start_s + bucket_s
    x_of = Scale(0.0, end, left + 4, right - 4)
    _rate_bars(svg, points, bucket_s, x_of, (right, bottom, top))
    levels = ticks(max([point.p99_ms for point in points] + ([slo] if slo else [])) * 1.05, 5)
    y_of = Scale(0, levels[-1], bottom, top)
    _y_axis(svg, levels, y_of, left, right)
    for tick in ticks(end, 6):
        x = x_of(tick)
        _el(svg, "line", x1=x, x2=x, y1=bottom, y2=bottom + 4, stroke=MUTED)
        _el(svg, "text", _tick_text(tick), x=x, y=bottom + 17, text_anchor="middle", fill=MUTED)
    _el(svg, "line", x1=left, x2=right, y1=bottom, y2=bottom, stroke=MUTED)
    if slo is not None:
        y = y_of(slo)
        _el(svg, "line", class_="slo", x1=left, x2=right, y1=y, y2=y, stroke=FAIL,
            stroke_width=1.5, stroke_dasharray="6 4")
        _el(svg, "text", f"SLO p99 {slo:g} ms", x=left + 6, y=y - 6, text_anchor="start",
            fill=FAIL, font_weight="bold")
    middle = [(x_of(point.start_s + bucket_s / 2), y_of(point.p99_ms), point)
              for point in points]
    _el(svg, "polyline", fill="none", stroke=INK, stroke_width=1.5,
        points=" ".join(f"{_num(x)},{_num(y)}" for x, y, _ in middle))
    for x, y, point in middle:
        missed = (slo is not None and point.p99_ms > slo) or point.errors > 0
        circle = _el(svg, "circle", class_="bucket" + (" missed" if missed else ""), cx=x,
                     cy=y, r=3, fill=FAIL if missed else PASS, stroke="#ffffff")
        _el(circle, "title", f"{point.start_s:g}-{point.start_s + bucket_s:g}s: offered "
                             f"{point.offered_rps:,.0f}/s, p99 {point.p99_ms:.2f} ms, "
                             f"{point.errors:g} errors")
    _el(svg, "text", "time from the replay's start (s)", x=(left + right) / 2, y=height - 8,
        text_anchor="middle", fill=MUTED)
    _el(svg, "text", "p99 latency (ms)", x=14, y=(top + bottom) / 2, text_anchor="middle",
        fill=MUTED, transform=f"rotate(-90 14 {_num((top + bottom) / 2)})")
    return svg


def _rate_bars(svg: ET.Element, points: Sequence[TimePoint], bucket_s: float, x_of: Scale,
               box: tuple[float, float, float]) -> None:
    """The offered rate as a bar per bucket on a right-hand axis."""
    right, bottom, top = box
    levels = ticks(max(point.offered_rps for point in points) * 1.05 or 1.0, 5)
    y_of = Scale(0, levels[-1], bottom, top)
    for level in levels:
        _el(svg, "text", _tick_text(level), x=right + 6, y=y_of(level) + 4,
            text_anchor="start", fill=PREFERRED)
    for point in points:
        x0, x1 = x_of(point.start_s), x_of(point.start_s + bucket_s)
        y = y_of(point.offered_rps)
        _el(svg, "rect", class_="offered", x=x0, y=y, width=max(x1 - x0 - 1, 0.5),
            height=max(bottom - y, 0), fill=PREFERRED, fill_opacity="0.25")
    _el(svg, "text", "offered (/s)", x=right + 50, y=(top + bottom) / 2,
        text_anchor="middle", fill=PREFERRED,
        transform=f"rotate(90 {_num(right + 50)} {_num((top + bottom) / 2)})")
