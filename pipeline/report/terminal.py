"""Render a run record (never live objects) for people: the terminal summary."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pipeline.report.capacity import capacity as capacity_view
from pipeline.report.views import gate_rows
from pipeline.report.views import knee as knee_view

STATUS_STYLE = {"passed": "green", "failed": "bold red", "aborted": "yellow",
                "skipped": "dim", "running": "cyan"}
STATUS_MARK = {"passed": "✓", "failed": "✗", "aborted": "–", "skipped": "·", "running": "…"}


def _format(value: Any, unit: str = "") -> str:
    if isinstance(value, float):
        text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        return f"{text}{unit}"
    if isinstance(value, int):
        return f"{value}{unit}"
    return str(value)


def gates_table(record: dict[str, Any]) -> Table:
    table = Table(title="Gates", title_justify="left", expand=False, caption_justify="left")
    for column in ("stage", "gate", "observed", "threshold", "interval, samples", ""):
        table.add_column(column)
    reasons = []
    raw_gates = [(stage["name"], dict(gate)) for stage in record.get("stages", [])
                 for gate in stage.get("gates", [])]
    for (stage, raw), gate in zip(raw_gates, gate_rows(record), strict=True):
        relation = raw.get("comparison", "")
        threshold = _format(raw["threshold"], raw.get("unit", ""))
        table.add_row(stage, gate.name, _format(raw["observed"], raw.get("unit", "")),
                      f"{relation} {threshold}".strip(), gate.evidence,
                      Text(gate.label, style=OUTCOME_STYLE[gate.outcome]))
        if gate.reason and not gate.passed:
            reasons.append(f"{gate.name} {gate.outcome}: {gate.reason}")
    if reasons:
        table.caption = "\n".join(reasons)
    return table


OUTCOME_STYLE = {"passed": "green", "failed": "bold red", "inconclusive": "bold yellow"}


def stages_table(record: dict[str, Any]) -> Table:
    table = Table(title="Stages", title_justify="left", expand=False)
    table.add_column("stage")
    table.add_column("status")
    table.add_column("time", justify="right")
    table.add_column("result", overflow="fold")
    for stage in record.get("stages", []):
        status = stage["status"]
        table.add_row(stage["name"],
                      Text(f"{STATUS_MARK[status]} {status}", style=STATUS_STYLE[status]),
                      f"{stage.get('duration_s', 0):.1f}s", stage.get("message", ""))
    return table


def _stage(record: dict[str, Any], name: str) -> dict[str, Any]:
    for stage in record.get("stages", []):
        if stage["name"] == name:
            return dict(stage)
    return {}


def measurements_table(record: dict[str, Any]) -> Table | None:
    latency = _stage(record, "latency").get("metrics", {})
    if not latency:
        return None
    stable = _stage(record, "latency").get("details", {}).get("stabilised")
    note = "" if stable is None else (" — stabilised" if stable else " — NOT stabilised")
    table = Table(title=f"Where requests waited (latency stage windows{note})",
                  title_justify="left")
    table.add_column("client p50 / p95 / p99 / max")
    table.add_column("server queue")
    table.add_column("server compute")
    table.add_column("formed batches")
    table.add_column("memory after traffic")
    compute = sum(latency.get(k, 0.0) for k in ("server_compute_input_us",
                                                 "server_compute_infer_us",
                                                 "server_compute_output_us"))
    details = _stage(record, "latency").get("details", {})
    batches = details.get("batch_executions", {})
    batch_text = ", ".join(f"{size}×{count}" for size, count in batches.items()) or "none"
    never = [size for size, hit in details.get("preferred_reached", {}).items() if not hit]
    if never:
        batch_text += f"; preferred {', '.join(never)} never formed"
    memory = f"RSS {latency.get('server_rss_mb', 0):.0f} MiB"
    if "server_pss_mb" in latency:
        memory += f", PSS {latency['server_pss_mb']:.0f} MiB"
    memory += (f"; GPU {latency['server_gpu_mb']:.0f} MiB" if "server_gpu_mb" in latency
               else "; GPU not measured")
    table.add_row(
        " / ".join(f"{latency.get(k, 0):.2f}" for k in ("p50_ms", "p95_ms", "p99_ms", "max_ms"))
        + " ms",
        f"{latency.get('server_queue_us', 0) / 1e3:.2f} ms avg" + (
            f" (mean budget {latency['queue_mean_budget_us'] / 1e3:.2f} ms)"
            if "queue_mean_budget_us" in latency else ""),
        f"{compute / 1e3:.2f} ms avg",
        f"avg {latency.get('server_avg_batch_size', 0):.1f} (size×executions: {batch_text})",
        memory,
    )
    return table


def knee_table(record: dict[str, Any]) -> Table | None:
    probes = _stage(record, "saturation").get("details", {}).get("probes", [])
    if not probes:
        return None
    table = Table(title="Saturation probes (closed loop)", title_justify="left")
    for column in ("concurrency", "throughput", "p99", "errors", "SLO"):
        table.add_column(column, justify="right")
    for probe in sorted(probes, key=lambda p: p["concurrency"]):
        table.add_row(str(probe["concurrency"]), f"{probe['throughput_rps']:.0f}/s",
                      f"{probe['p99_ms']:.2f} ms", f"{probe['error_rate'] * 100:.2f}%",
                      Text("met", style="green") if probe["passed"] else
                      Text("missed", style="red"))
    return table


def saturation_summary(record: dict[str, Any]) -> Text | None:
    knee, capacity = knee_view(record), capacity_view(record)
    lines = [knee.summary()] if knee is not None else []
    if capacity is not None:
        lines.append(("LOWER BOUND: " if capacity.lower_bound else "") + capacity.summary())
    return Text("\n".join(lines)) if lines else None


def capacity_table(record: dict[str, Any]) -> Table | None:
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


def render_terminal(record: dict[str, Any]) -> RenderableType:
    status = record.get("status", "?")
    header = Text.assemble(
        ("serve-pipeline ", "bold"), (f"run {record.get('run_id')} ", ""),
        (status.upper(), STATUS_STYLE.get(status, "")),
        f"  environment {record.get('environment') or '-'}",
        f"  release {record.get('release_id') or '-'}")
    parts: list[RenderableType] = [header, stages_table(record), gates_table(record)]
    for part in (measurements_table(record), knee_table(record), capacity_table(record),
                  saturation_summary(record)):
        if part is not None:
            parts.append(part)
    server = record.get("server", {})
    if server.get("exit") and record.get("teardown_s") is not None:
        parts.append(Text(f"server shutdown (SIGTERM): {server['exit']} after "
                          f"{record['teardown_s']:.1f}s", style="dim"))
    if record.get("promoted_to"):
        parts.append(Text(f"{record['promoted_to']} → {record['release_id']}", style="green"))
    return Group(*parts)
