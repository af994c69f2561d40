"""Render a run record (never live objects) for people: the terminal summary."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pipeline import metric_names as m
from pipeline.record import RunRecord
from pipeline.report import views as data
from pipeline.report.capacity import capacity as capacity_view
from pipeline.report.replay_view import replay as replay_view
from pipeline.report.views import gate_rows
from pipeline.report.views import knee as knee_view

STATUS_STYLE = {"passed": "green", "failed": "bold red", "aborted": "yellow",
                "skipped": "dim", "running": "cyan", "abandoned": "bold yellow",
                "unknown": "dim"}
STATUS_MARK = {"passed": "✓", "failed": "✗", "aborted": "–", "skipped": "·", "running": "…",
               "unknown": "?"}


def _format(value: Any, unit: str = "") -> str:
    if isinstance(value, float):
        text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        return f"{text}{unit}"
    if isinstance(value, int):
        return f"{value}{unit}"
    return str(value)


def gates_table(record: RunRecord) -> Table:
    table = Table(title="Gates", title_justify="left", expand=False, caption_justify="left")
    for column in ("stage", "gate", "observed", "threshold", "interval, samples", ""):
        table.add_column(column)
    reasons = []
    for (stage, raw), gate in zip(record.gates(), gate_rows(record), strict=True):
        threshold = _format(raw.threshold, raw.unit)
        table.add_row(stage, gate.name, _format(raw.observed, raw.unit),
                      f"{raw.comparison} {threshold}".strip(), gate.evidence,
                      Text(gate.label, style=OUTCOME_STYLE[gate.outcome]))
        if gate.reason and not gate.passed:
            reasons.append(f"{gate.name} {gate.outcome}: {gate.reason}")
    if reasons:
        table.caption = "\n".join(reasons)
    return table


OUTCOME_STYLE = {"passed": "green", "failed": "bold red", "inconclusive": "bold yellow"}


def stages_table(record: RunRecord) -> Table:
    table = Table(title="Stages", title_justify="left", expand=False)
    table.add_column("stage")
    table.add_column("status")
    table.add_column("time", justify="right")
    table.add_column("result", overflow="fold")
    for stage in record.stages:
        status = stage.status.value
        table.add_row(stage.name,
                      Text(f"{STATUS_MARK[status]} {status}", style=STATUS_STYLE[status]),
                      f"{stage.duration_s:.1f}s", stage.message)
    return table


def measurements_table(record: RunRecord) -> Table | None:
    stage = record.stage(m.LATENCY_STAGE)
    latency = stage.metrics if stage is not None else {}
    if stage is None or not latency:
        return None
    details = stage.details
    stable = details.get("stabilised")
    note = "" if stable is None else (" — stabilised" if stable else " — NOT stabilised")
    table = Table(title=f"Where requests waited (latency stage windows{note})",
                  title_justify="left")
    table.add_column("client p50 / p95 / p99 / max")
    table.add_column("server queue")
    table.add_column("server compute")
    table.add_column("formed batches")
    table.add_column("memory after traffic")
    compute = sum(latency.get(k, 0.0) for k in m.COMPUTE_METRICS)
    batches = details.get("batch_executions", {})
    batch_text = ", ".join(f"{size}×{count}" for size, count in batches.items()) or "none"
    never = [size for size, hit in details.get("preferred_reached", {}).items() if not hit]
    if never:
        batch_text += f"; preferred {', '.join(never)} never formed"
    memory = f"RSS {latency.get(m.SERVER_RSS_MB, 0):.0f} MiB"
    if m.SERVER_PSS_MB in latency:
        memory += f", PSS {latency[m.SERVER_PSS_MB]:.0f} MiB"
    memory += (f"; GPU {latency[m.SERVER_GPU_MB]:.0f} MiB" if m.SERVER_GPU_MB in latency
               else "; GPU not measured")
    table.add_row(
        " / ".join(f"{latency.get(k, 0):.2f}" for k in (m.P50_MS, m.P95_MS, m.P99_MS, m.MAX_MS))
        + " ms",
        f"{latency.get(m.SERVER_QUEUE_US, 0) / 1e3:.2f} ms avg" + (
            f" (mean budget {latency[m.QUEUE_MEAN_BUDGET_US] / 1e3:.2f} ms)"
            if m.QUEUE_MEAN_BUDGET_US in latency else ""),
        f"{compute / 1e3:.2f} ms avg",
        f"avg {latency.get(m.SERVER_AVG_BATCH_SIZE, 0):.1f} (size×executions: {batch_text})",
        memory,
    )
    for row in data.sizes(record):
        table.add_row(f"size {row.size}: p50 {data.ms(row.p50_ms)} / p99 {data.ms(row.p99_ms)}"
                      f" ({data.format_value(row.requests)} requests)", "", "", "", "")
    return table


def knee_table(record: RunRecord) -> Table | None:
    probes = record.details(m.SATURATION_STAGE).get("probes", [])
    if not probes:
        return None
    table = Table(title="Saturation probes (closed loop)", title_justify="left")
    for column in ("concurrency", "throughput", "p99", "errors", "SLO"):
        table.add_column(column, justify="right")
    for probe in sorted(probes, key=lambda p: p[m.CONCURRENCY]):
        reused = " (latency stage)" if probe.get("measured_by") == "latency stage" else ""
        table.add_row(f"{probe[m.CONCURRENCY]}{reused}", f"{probe[m.THROUGHPUT_RPS]:.0f}/s",
                      f"{probe[m.P99_MS]:.2f} ms", f"{probe[m.ERROR_RATE] * 100:.2f}%",
                      Text("met", style="green") if probe["passed"] else
                      Text("missed", style="red"))
    return table


def saturation_summary(record: RunRecord) -> Text | None:
    knee, capacity = knee_view(record), capacity_view(record)
    lines = [knee.summary()] if knee is not None else []
    if capacity is not None:
        lines.append(("LOWER BOUND: " if capacity.lower_bound else "") + capacity.summary())
    return Text("\n".join(lines)) if lines else None


def capacity_table(record: RunRecord) -> Table | None:
    view = capacity_view(record)
    if view is None or not view.steps:
        return None
    table = Table(title="Capacity: open-loop rate steps", title_justify="left")
    for column in ("rate", "p99", "samples", "verdict"):
        table.add_column(column, justify="right" if column != "verdict" else "left")
    for step in view.steps:
        table.add_row(f"{step.rate_rps:,.0f}/s", f"{step.p99_ms:.2f} ms", f"{step.samples:,.0f}",
                      Text(f"{step.verdict}: {step.reason}",
                           style="green" if step.verdict == "pass" else "red"))
    return table


def replay_section(record: RunRecord) -> RenderableType | None:
    """The replay in a few lines: what was sent and how it went, how closely the client
    kept the schedule, its gates, and the rate offered against the p99 over time."""
    view = replay_view(record)
    if view is None:
        return None
    gates = Text("gates: ")
    for index, gate in enumerate(view.gates):
        gates.append(("; " if index else "") + f"{gate.name} ")
        gates.append(gate.label, style=OUTCOME_STYLE[gate.outcome])
        gates.append(f" {gate.observed} ({gate.threshold})")
    table = Table(expand=False)
    for column in ("time", "offered", "p99 (worst bucket)", "errors"):
        table.add_column(column, justify="right")
    for span in view.series():
        table.add_row(f"{span.start_s:g}–{span.end_s:g} s",
                      data.format_value(span.offered_rps, "/s"), data.ms(span.worst_p99_ms),
                      data.format_value(span.errors))
    return Group(Text("Replay of the request log", style="italic"), Text(view.summary()),
                 Text(view.schedule_note(), style="dim"),
                 *([gates] if view.gates else []), table)


def render_terminal(record: RunRecord) -> RenderableType:
    status = record.status or "?"
    header = Text.assemble(
        ("serve-pipeline ", "bold"), (f"run {record.run_id} ", ""),
        (status.upper(), STATUS_STYLE.get(status, "")),
        f"  environment {record.environment or '-'}",
        f"  release {record.release_id or '-'}")
    parts: list[RenderableType] = [header]
    if record.extra.get("abandoned"):
        parts.append(Text(f"abandoned: {record.extra['abandoned']}", style="yellow"))
    parts += [stages_table(record), gates_table(record)]
    for part in (measurements_table(record), knee_table(record), capacity_table(record),
                 saturation_summary(record), replay_section(record)):
        if part is not None:
            parts.append(part)
    if record.server.exit and record.teardown_s is not None:
        parts.append(Text(f"server shutdown (SIGTERM): {record.server.exit} after "
                          f"{record.teardown_s:.1f}s", style="dim"))
    if record.promoted_to:
        parts.append(Text(f"{record.promoted_to} → {record.release_id}", style="green"))
    return Group(*parts)
