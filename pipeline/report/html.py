"""Render a run record (never live objects) as one self-contained HTML page.

The page is built as an ElementTree and serialized once, so every string from the
record is escaped by the serializer; there is no hand-concatenated markup, no script and
no external URL. Stable ids (`gates`, `knee-chart`, `batch-chart`) let tests find the parts.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from importlib import resources

from pipeline.record import RunRecord
from pipeline.release.baseline_deltas import (
    DEFAULT_TOLERANCE,
    Direction,
    comparability_note,
    compare,
)
from pipeline.release.dossier import ReleaseDossier
from pipeline.report import charts
from pipeline.report import views as data
from pipeline.report.capacity import capacity as capacity_view
from pipeline.report.elements import add_banner, add_element, add_section, add_table
from pipeline.report.load_workers import HEADERS as WORKER_HEADERS
from pipeline.report.load_workers import worker_lines
from pipeline.report.regression_view import side_by_side
from pipeline.report.release_html import release_section
from pipeline.report.replay_view import replay as replay_view

STATUS_MARK = {"passed": "✓", "failed": "✗", "aborted": "–", "skipped": "·", "running": "…"}


def _css() -> str:
    """The page's style sheet (package data beside this module)."""
    return resources.files("pipeline.report").joinpath("report.css").read_text(encoding="utf-8")



def _banner(parent: ET.Element, record: RunRecord) -> None:
    status = record.status or "unknown"
    passed, failed = data.status_counts(data.gate_rows(record))
    badge = {"passed": "pass", "failed": "fail"}.get(status, "other")
    heading_text = record.name or "serve-pipeline run"
    if record.environment:
        heading_text += f" · {record.environment}"
    facts = [f"run {record.run_id or '—'}", f"release {record.release_id or '—'}"]
    if record.promoted_to:
        facts.append(f"{record.promoted_to} now points at this release")
    if record.interrupted:
        facts.append("interrupted")
    if record.extra.get("abandoned"):
        facts.append(f"abandoned: {record.extra['abandoned']}")
    banner, _ = add_banner(parent, status, badge, status.upper(), heading_text,
                           " · ".join(facts))
    verdict = f"{passed} of {passed + failed} gates passed"
    if failed:
        verdict = f"{failed} gate{'s' if failed > 1 else ''} FAILED ({verdict})"
    elif not passed:
        verdict = "no gate evaluated"
    add_element(banner, "div", verdict, cls="verdict")


def _stage_strip(parent: ET.Element, record: RunRecord) -> None:
    rows = data.stage_rows(record)
    if not rows:
        return
    strip = add_element(parent, "ul", cls="stages")
    for row in rows:
        item = add_element(strip, "li", cls=row.status, title=row.message)
        add_element(item, "span", STATUS_MARK.get(row.status, "?") + " ", cls="mark")
        add_element(item, "span", row.name)
        if row.duration_s is not None:
            add_element(item, "span", f"{row.duration_s:.1f}s", cls="time")
    failure = data.first_failure(record)
    if failure is not None:
        add_element(parent, "p", f"Stage {failure.name} failed: {failure.message or 'no message'}",
                    cls="failure")


_RESULT_MARK = {"passed": "✓", "failed": "✗", "inconclusive": "?"}


def _gates(parent: ET.Element, record: RunRecord) -> None:
    section = add_section(parent, "Gates", cls="wide")
    rows = data.gate_rows(record)
    body = add_table(section, [("stage", ""), ("gate", ""), ("observed", "num"),
                               ("threshold", "num"), ("interval, samples", "num"),
                            ("result", "")], table_id="gates")
    for gate in rows:
        row = add_element(body, "tr", cls="pass" if gate.passed else "fail")
        add_element(row, "td", gate.stage, cls="stage")
        add_element(row, "td", gate.name, cls="mono")
        value_cls = "num short" if gate.numeric else "num"
        add_element(row, "td", gate.observed, cls=value_cls)
        add_element(row, "td", gate.threshold, cls=value_cls)
        add_element(row, "td", gate.evidence or "—", cls="num")
        add_element(row, "td", _RESULT_MARK[gate.outcome] + " " + gate.label, cls="result")
    if not rows:
        add_element(add_element(body, "tr"), "td", "No gate was evaluated: the run stopped "
                    "before any gated stage.", cls="muted", colspan="6")
    reasons = [gate for gate in rows if gate.reason and not gate.passed]
    if reasons:
        listing = add_element(section, "ul", cls="gate-reasons")
        for gate in reasons:
            add_element(listing, "li", f"{gate.name} {gate.outcome}: {gate.reason}")


def _split_bar(parent: ET.Element, waits: data.Waits) -> None:
    queue, compute, outside = waits.queue_ms, waits.compute_total_ms, waits.outside_server_ms
    if not waits.mean_ms or queue is None or compute is None or outside is None:
        return
    parts = [("q", "server queue", queue), ("c", "server compute", compute),
             ("o", "outside the server (HTTP, network, client)", outside)]
    total = sum(value for _, _, value in parts) or 1.0
    add_element(parent, "p", f"Of the mean client latency {data.ms(waits.mean_ms)}:", cls="muted")
    bar = add_element(parent, "div", cls="split")
    legend = add_element(parent, "div", cls="legend")
    for cls, label, value in parts:
        add_element(bar, "span", cls=cls, style=f"width:{100 * value / total:.1f}%",
                    title=f"{label}: {data.ms(value)}")
        item = add_element(legend, "span")
        add_element(item, "i", cls=cls)
        add_element(item, "span", f"{label} {data.ms(value)} ({value / total:.0%})")


def _waits(parent: ET.Element, record: RunRecord) -> None:
    section = add_section(parent, "Where requests waited")
    waits = data.waits(record)
    if waits is None:
        add_element(section, "p", "The latency stage did not measure (see the stages above).",
                    cls="muted")
        return
    load = "Latency stage window"
    if waits.concurrency is not None:
        load += f", closed loop at concurrency {waits.concurrency:g}"
    if waits.throughput_rps is not None:
        load += f": {data.format_value(waits.throughput_rps, '/s')}"
    add_element(section, "p", load + ".", cls="muted")
    names = list(waits.client_ms)
    body = add_table(section, [("", ""), *((name, "num") for name in names)])
    row = add_element(body, "tr")
    add_element(row, "td", "client, end to end", cls="label")
    for name in names:
        add_element(row, "td", data.ms(waits.client_ms[name]), cls="num")
    for size in data.sizes(record):
        row = add_element(body, "tr")
        add_element(row, "td", f"client, size {size.size} "
                    f"({data.format_value(size.requests)} requests)", cls="label")
        for name in names:
            value = {"p50": size.p50_ms, "p99": size.p99_ms}.get(name)
            add_element(row, "td", data.ms(value) if value is not None else "—", cls="num")
    if waits.queue_ms is not None:
        row = add_element(body, "tr")
        add_element(row, "td", "server queue (avg)", cls="label")
        text = data.ms(waits.queue_ms)
        if waits.queue_budget_ms is not None:
            text += f" (mean budget {data.ms(waits.queue_budget_ms)})"
        over = waits.queue_budget_ms is not None and waits.queue_ms > waits.queue_budget_ms
        add_element(row, "td", text + (" — over budget" if over else ""),
                    cls="wide" + (" fail" if over else ""), colspan=str(len(names)))
    if waits.compute_ms:
        row = add_element(body, "tr")
        add_element(row, "td", "server compute (avg)", cls="label")
        parts = " + ".join(f"{name} {data.ms(value)}" for name, value in waits.compute_ms.items())
        text = data.ms(waits.compute_total_ms)
        if len(waits.compute_ms) > 1:
            text += f" = {parts}"
        add_element(row, "td", text, cls="wide", colspan=str(len(names)))
    _split_bar(section, waits)


def _tile(parent: ET.Element, label: str, value: str | None) -> None:
    tile = add_element(parent, "div", cls="tile")
    add_element(tile, "div", label, cls="label")
    add_element(tile, "div", value or "not measured", cls="value" + ("" if value else " na"))


def _memory(parent: ET.Element, record: RunRecord) -> None:
    section = add_section(parent, "Memory after warm traffic")
    memory = data.memory(record)
    if memory is None:
        add_element(section, "p", "Not measured in this run.", cls="muted")
        return

    def mib(value: float | None) -> str | None:
        return None if value is None else data.format_value(value, "MiB")

    tiles = add_element(section, "div", cls="tiles")
    _tile(tiles, "RSS", mib(memory.rss_mb))
    _tile(tiles, "PSS", mib(memory.pss_mb))
    _tile(tiles, "GPU", mib(memory.gpu_mb))
    _tile(tiles, "RSS at cold start", mib(memory.cold_rss_mb))
    scope = "Whole server process tree"
    if memory.processes is not None:
        scope += f" ({memory.processes:g} processes: server plus backend stubs)"
    add_element(section, "p", scope + ", measured after the latency stage's traffic.", cls="muted")


def _burst(parent: ET.Element, record: RunRecord) -> None:
    burst = data.burst(record)
    if burst is None:
        return
    section = add_section(parent, "Burst (open loop)")
    line = add_element(section, "p")
    if burst.valid is False:
        add_element(line, "span", "invalid", cls="badge warn").tail = " "
    elif burst.valid is True:
        add_element(line, "span", "valid", cls="badge pass").tail = " "
    add_element(line, "span", burst.summary())
    if burst.schedule_lag_p99_ms is not None:
        note = f"Client schedule lag p99 {data.ms(burst.schedule_lag_p99_ms)}"
        if burst.valid is False:
            note += ": the load generator fell behind its schedule, so the burst was not " \
                    "delivered as planned."
        add_element(section, "p", note, cls="muted")


def _replay(parent: ET.Element, record: RunRecord) -> None:
    view = replay_view(record)
    if view is None:
        return
    section = add_section(parent, "Replay of the request log")
    add_element(section, "p", view.summary())
    section.append(charts.replay_chart(view.points, bucket_s=view.bucket_s,
                                       slo=view.slo_p99_ms))
    add_element(section, "p", view.schedule_note(), cls="muted")


def _load_workers(parent: ET.Element, record: RunRecord) -> None:
    lines = worker_lines(record)
    if not lines:
        return
    section = add_section(parent, "Load workers")
    body = add_table(section, [(header, "num" if header in ("requests", "lag p99", "CPU") else "")
                               for header in WORKER_HEADERS])
    for line in lines:
        row = add_element(body, "tr", cls="fail" if line.client_bound else "pass")
        for text in line.cells():
            add_element(row, "td", text)
    add_element(section, "p", "Each worker sent and timed its share; the figures above are their "
                "merged histograms. A worker behind its schedule makes the load client-bound.",
                cls="muted")


def _knee(parent: ET.Element, record: RunRecord) -> None:
    section = add_section(parent, "Where the knee is")
    knee = data.knee(record)
    if knee is None:
        add_element(section, "p", "The saturation stage did not run.", cls="muted")
        section.append(charts.knee_chart([], slo=None, knee_x=None))
        return
    add_element(section, "p", knee.summary())
    capacity = capacity_view(record)
    if capacity is not None:
        line = add_element(section, "p", cls="capacity")
        if capacity.lower_bound:
            add_element(line, "span", "lower bound", cls="badge warn").tail = " "
        add_element(line, "span", capacity.summary())
    points = [charts.ChartPoint(
        probe.concurrency, probe.p99_ms, probe.passed,
        f"concurrency {probe.concurrency:g}: p99 {data.ms(probe.p99_ms)}, "
        f"{data.format_value(probe.throughput_rps, '/s')}, errors {probe.error_rate:.2%}, "
        + ("SLO met" if probe.passed else "SLO missed"), probe.throughput_rps)
        for probe in knee.probes]
    knee_label = None
    if knee.lower_bound and knee.throughput_rps is not None:
        knee_label = f"≥ {knee.throughput_rps:,.0f}/s: cap reached, lower bound"
    section.append(charts.knee_chart(
        points, slo=knee.slo_p99_ms, knee_x=knee.concurrency, knee_label=knee_label,
        capacity_rps=capacity.rate_rps if capacity else None,
        capacity_label=capacity.headline().rstrip(".") if capacity else ""))
    legend = add_element(section, "div", cls="legend")
    for colour, label in ((charts.PASS, "SLO met"), (charts.FAIL, "SLO missed"),
                          (charts.INK, "ringed: the knee" if not knee.lower_bound else
                           "ringed: the cap (a lower bound, not a knee)"),
                          (charts.PREFERRED, "squares: throughput; line: open-loop capacity")):
        item = add_element(legend, "span")
        add_element(item, "i", style=f"background:{colour};border-radius:50%")
        add_element(item, "span", label)
    if knee.probes:
        more = add_element(section, "details")
        add_element(more, "summary", f"{len(knee.probes)} probes")
        body = add_table(more, [("concurrency", "num"), ("throughput", "num"), ("p99", "num"),
                                ("errors", "num"), ("SLO", "")])
        for probe in knee.probes:
            row = add_element(body, "tr", cls="pass" if probe.passed else "fail")
            for text in (f"{probe.concurrency:g}", data.format_value(probe.throughput_rps, "/s"),
                         data.ms(probe.p99_ms), f"{probe.error_rate:.2%}"):
                add_element(row, "td", text, cls="num short")
            add_element(row, "td", "met" if probe.passed else "missed", cls="result")
    if capacity is not None and capacity.steps:
        steps = add_element(section, "details")
        add_element(steps, "summary", f"{len(capacity.steps)} open-loop rate steps")
        body = add_table(steps, [("rate", "num"), ("p99", "num"), ("samples", "num"),
                                 ("verdict", "")])
        for step in capacity.steps:
            row = add_element(body, "tr", cls="pass" if step.verdict == "pass" else "fail")
            for text in (data.format_value(step.rate_rps, "/s"), data.ms(step.p99_ms),
                         f"{step.samples:,.0f}"):
                add_element(row, "td", text, cls="num short")
            add_element(row, "td", f"{step.verdict}: {step.reason}", cls="result")


def _batches(parent: ET.Element, record: RunRecord) -> None:
    section = add_section(parent, "What batches formed")
    batches = data.batches(record)
    if batches is None:
        section.append(charts.batch_chart({}, []))
        return
    add_element(section, "p", batches.summary())
    section.append(charts.batch_chart(batches.executions, batches.preferred))
    legend = add_element(section, "div", cls="legend")
    keys = [(charts.BAR, "formed")]
    if batches.preferred:
        keys.append((charts.PREFERRED, "preferred size"))
    for colour, label in keys:
        item = add_element(legend, "span")
        add_element(item, "i", style=f"background:{colour}")
        add_element(item, "span", label)
    if batches.never_formed:
        item = add_element(legend, "span")
        add_element(item, "i", style=f"border:1px dashed {charts.PREFERRED}")
        add_element(item, "span", "preferred, never formed")


def _side_by_side(parent: ET.Element, record: RunRecord) -> None:
    view = side_by_side(record)
    if view is None:
        return
    section = add_section(parent, "Against the live release, side by side", cls="wide")
    section.set("id", "side-by-side-regression")
    summary = add_element(section, "p")
    badge = {"no regression": "pass", "regression": "fail"}.get(view.outcome, "warn")
    add_element(summary, "span", view.outcome, cls=f"badge {badge}").tail = (
        f" against live release {view.release_id}: both served on this machine, "
        f"{view.rounds} interleaved rounds, margin {view.margin:.0%} (candidate / live)."
        + (" Same model, config and served files as the live release." if view.same_bytes else ""))
    body = add_table(section, [(h, "num" if h not in ("metric", "verdict") else "")
                               for h in ("metric", "live", "candidate", "ratio", "interval",
                                         "limit", "verdict")], table_id="watched")
    for watched in view.rows:
        row = add_element(body, "tr")
        for value in (watched.metric, watched.live, watched.candidate, watched.ratio,
                      watched.interval, watched.limit, watched.outcome):
            add_element(row, "td", value)
    fold = add_element(section, "details")
    add_element(fold, "summary", "Every window, as measured")
    keys = ("round", "server", "p50_ms", "p95_ms", "p99_ms", "throughput_rps", "errors")
    windows = add_table(fold, [(key, "") for key in keys], table_id="regression-windows")
    for window in view.windows:
        row = add_element(windows, "tr")
        for key in keys:
            add_element(row, "td", str(window.get(key, "")))


def _comparison(parent: ET.Element, record: RunRecord,
                baseline: RunRecord | None, tolerance: float) -> None:
    section = add_section(parent, "Compared with the live release: against a recorded run "
                          "of another day", cls="wide")
    section.set("id", "comparison")
    if baseline is None:
        add_element(section, "p", "Not compared: no live release was given.", cls="muted")
        return
    add_element(section, "p", f"Live release {baseline.release_id or '—'} (run "
                f"{baseline.run_id or '—'}). Regressions are changes for the worse beyond "
        f"{tolerance:.0%}: latency, errors and memory up, throughput down.", cls="muted")
    note = comparability_note(record, baseline)
    if note:
        add_element(section, "p", note, cls="failure")
    deltas = compare(record, baseline, tolerance)
    regressed = [delta for delta in deltas if delta.regressed]
    if regressed:
        names = ", ".join(f"{d.stage}.{d.metric} {d.change_text}" for d in regressed)
        summary = add_element(section, "p")
        plural = "s" if len(regressed) > 1 else ""
        add_element(summary, "span", f"{len(regressed)} regression{plural}",
                    cls="badge fail").tail = f" {names}"
    else:
        summary = add_element(section, "p")
        add_element(summary, "span", "no regression", cls="badge pass").tail = \
            f" beyond {tolerance:.0%} in {len(deltas)} metrics."
    body = add_table(section, [("stage", ""), ("metric", ""), ("live", "num"),
                               ("this run", "num"), ("change", "num"), ("", "")],
                  table_id="deltas")
    for delta in deltas:
        cls = ("regressed" if delta.regressed else "improved" if delta.improved
               else "neutral" if delta.direction is Direction.NEUTRAL else "same")
        row = add_element(body, "tr", cls=cls)
        add_element(row, "td", delta.stage, cls="stage")
        add_element(row, "td", delta.metric, cls="mono")
        add_element(row, "td", data.format_value(delta.baseline), cls="num")
        add_element(row, "td", data.format_value(delta.current), cls="num")
        add_element(row, "td", delta.change_text, cls="num")
        verdict = "regression" if delta.regressed else "better" if delta.improved else ""
        add_element(row, "td", verdict, cls="verdict")


def _provenance(parent: ET.Element, record: RunRecord) -> None:
    section = add_section(parent, "Provenance", cls="wide")
    rows = data.provenance(record)
    if not rows:
        add_element(section, "p", "The record carries no identifying fields.", cls="muted")
        return
    listing = add_element(section, "dl", cls="kv")
    for key, value in rows:
        add_element(listing, "dt", key)
        add_element(listing, "dd", value)
    if record.server.exit and record.teardown_s is not None:
        add_element(section, "p", f"Server shutdown: {record.server.exit} after "
                    f"{record.teardown_s:.1f} s.", cls="muted")


def new_document(title: str) -> tuple[ET.Element, ET.Element]:
    """(html, main): a report page with the run report's inline CSS and no script."""
    html = ET.Element("html", {"lang": "en"})
    head = add_element(html, "head")
    add_element(head, "meta", charset="utf-8")
    add_element(head, "meta", name="viewport", content="width=device-width, initial-scale=1")
    add_element(head, "title", title)
    add_element(head, "style", _css())
    return html, add_element(add_element(html, "body"), "main")


def render_html(record: RunRecord, baseline: RunRecord | None = None, *,
                tolerance: float = DEFAULT_TOLERANCE,
                release: ReleaseDossier | str | None = None) -> str:
    """The whole report as one HTML document: inline CSS, inline SVG, no script."""
    html, main = new_document(
        f"serve-pipeline {record.status or ''} · run {record.run_id or '?'}")
    _banner(main, record)
    _stage_strip(main, record)
    if release is not None:
        release_section(main, release)
    _gates(main, record)
    measured = add_element(main, "div", cls="grid")
    _waits(measured, record)
    right = add_element(measured, "div", cls="column")
    _memory(right, record)
    _burst(right, record)
    _load_workers(right, record)
    charts_row = add_element(main, "div", cls="grid")
    _knee(charts_row, record)
    _batches(charts_row, record)
    _replay(main, record)
    _side_by_side(main, record)
    _comparison(main, record, baseline, tolerance)
    _provenance(main, record)
    return "<!DOCTYPE html>\n" + ET.tostring(html, encoding="unicode", method="html") + "\n"
