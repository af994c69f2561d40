"""Rows of a comparison record (comparison.json) shared by its terminal, markdown and HTML
renderings: what each shows, formatted once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.statistics.capacity_figure import CapacityFigure


def number(value: Any, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return f"{value:,.{digits}f}{unit}"
    return str(value)


def kinds(record: Mapping[str, Any]) -> list[str]:
    return list(record.get("servers_compared") or record.get("servers", {}))


def summary_rows(record: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(label, one cell per server) for the side-by-side table."""
    servers = record["servers"]
    per = record.get("verdict", {}).get("per", "core")
    slo = record.get("slo", {}).get("p99_ms")

    def row(label: str, render: Any) -> tuple[str, list[str]]:
        return label, [render(servers[kind]) for kind in kinds(record)]

    def spread(s: Mapping[str, Any]) -> str:
        if "spread" not in s:
            return "–"
        return f"{s['spread']['low']:,.0f}–{s['spread']['high']:,.0f}/s"

    def status(s: Mapping[str, Any]) -> str:
        if s.get("status") == "failed":
            return f"FAILED at {s.get('failed_at')}: {str(s.get('message', ''))[:90]}"
        return "measured"

    def tuned(s: Mapping[str, Any]) -> str:
        tuning = s.get("tuned") or {}
        text = str(tuning.get("config") or tuning.get("note") or "–")
        drift = tuning.get("drift") or {}
        if drift.get("factor", 1.0) > 1.0:
            text += f" (tune's intervals widened by its drift, x{drift['factor']:.2f})"
        return text

    def capacity(s: Mapping[str, Any]) -> str:
        figure = CapacityFigure.from_json(s.get("capacity"))
        return figure.text() if figure else str(s.get("capacity_note") or "–")

    def knee(s: Mapping[str, Any]) -> str:
        text = number(s.get("throughput_at_slo"), "/s")
        return f"≥ {text} (lower bound: {s['knee_capped_by']})" \
            if s.get("knee_lower_bound") else text

    rows = [row("tuned config (--tuned)", tuned)] if any(
        "tuned" in servers[kind] for kind in kinds(record)) else []
    return [
        *rows,
        row("status", status),
        row(f"capacity at the SLO (open loop, p99 ≤ {number(slo, ' ms', 0)})", capacity),
        row("closed-loop knee (diagnostic; the verdict's rounds)", knee),
        row(f"  per {per}", lambda s: number(s.get("throughput_at_slo_per_unit"), "/s")),
        row("  spread over rounds", spread),
        row("  at concurrency", lambda s: number(s.get("knee_concurrency"), digits=0)),
        row("p50 / p95 / p99 there", lambda s: " / ".join(
            number(s.get(k), " ms", 2) for k in ("p50_ms", "p95_ms", "p99_ms"))),
        row("cold start to ready", lambda s: number(s.get("cold_start_s"), " s")),
        row("RSS / PSS after warm traffic", lambda s: f"{number(s.get('rss_mib'), ' MiB', 0)}"
            f" / {number(s.get('pss_mib'), ' MiB', 0)}"),
        row("GPU memory", lambda s: number(s.get("gpu_mib"), " MiB", 0)),
        row("server queue / compute per request", lambda s: (
            f"{number(s.get('server_queue_us'), ' µs', 0)} / "
            f"{number(s.get('server_compute_us'), ' µs', 0)}")),
        row("batch sizes formed (executions)", lambda s: batch_text(s.get("batch_sizes"))),
        row("preferred sizes formed", lambda s: ", ".join(
            f"{size}: {'yes' if hit else 'no'}" for size, hit in
            (s.get("preferred_formed") or {}).items()) or "–"),
        row("artifact", lambda s: artifact_text(s.get("artifact"))),
    ]


def batch_text(batches: Mapping[str, int] | None) -> str:
    if not batches:
        return "–"
    return " ".join(f"{size}×{count}" for size, count in batches.items())


def artifact_text(artifact: Mapping[str, Any] | None) -> str:
    if not artifact:
        return "–"
    return (f"{artifact['kind']} ({artifact['bytes'] / 1024:,.0f} KiB) + "
            f"{artifact['config_name']}")


def failure_rows(record: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    servers = record["servers"]
    probes: list[str] = []
    for kind in kinds(record):
        for probe in servers[kind].get("failure_path", {}):
            if probe not in probes:
                probes.append(probe)
    rows = []
    for probe in probes:
        cells = []
        for kind in kinds(record):
            seen = servers[kind].get("failure_path", {}).get(probe)
            cells.append(probe_text(seen))
        rows.append((probe, cells))
    return rows


def probe_text(seen: Mapping[str, Any] | None) -> str:
    if seen is None:
        return "–"
    if seen.get("note"):
        return str(seen["note"])
    status = seen.get("status")
    up = "stays up" if seen.get("stays_up") else "NOT ready after"
    return f"{status if status is not None else 'no answer'}, {up}"


def translation_rows(record: Mapping[str, Any]) -> list[tuple[str, str, list[str]]]:
    return [(t["key"], t["written"], [t["per_kind"].get(kind, "–") for kind in kinds(record)])
            for t in record.get("translation", [])]


def verdict_line(record: Mapping[str, Any]) -> str:
    return str(record.get("verdict", {}).get("line", "no verdict"))
