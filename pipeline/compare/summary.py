"""The comparison record (comparison.json): per-server figures taken from the measured
windows, the plan as it ran, the translation, and the verdict."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pipeline import metric_names as m
from pipeline.compare.measure import Measured, WindowResult, meets_slo
from pipeline.compare.plan import is_interleaved
from pipeline.compare.throughput_winner import Spread, decide
from pipeline.spec.models import Spec
from pipeline.statistics.capacity import CapacitySearch
from pipeline.statistics.capacity_figure import CapacityFigure

# What each failure probe is called in the comparison (the names where it has one).
PROBES = {"oversized_body": "oversized_body", "declared_huge_shape": "huge_declared_shape",
          "wrong_dtype": "wrong_dtype", "wrong_shape": "wrong_shape",
          "missing_input": "missing_input", "batch_over_max": "batch_over_max",
          "unknown_model": "unknown_model"}
MODEL_EXCEPTION_NOTE = "not probed (--no-exception-probe)"


def compute_units(spec: Spec) -> tuple[str, int]:
    """What throughput is divided by: the cores this process may use (both servers ran
    on the same ones, one at a time), or the GPU on a GPU spec."""
    if spec.server.device == "gpu":
        return "GPU", 1
    return "core", len(os.sched_getaffinity(0))


def rounds_at(windows: list[WindowResult], kind: str, rounds: int,
              concurrency: int | None) -> list[float]:
    """Each round's throughput at one load point (0 when there is none): the windows whose
    merge is that point, so the merged figure lies between the lowest and the highest."""
    per_round = [0.0] * rounds
    if concurrency is None:
        return per_round
    for window in windows:
        if window.kind == kind and window.concurrency == concurrency:
            per_round[window.round] = window.throughput_rps
    return per_round


def failure_path(parity_details: Mapping[str, Any]) -> dict[str, Any]:
    path: dict[str, Any] = {}
    for probe in parity_details.get("probes", []):
        name = PROBES.get(str(probe.get("probe")), str(probe.get("probe")))
        path[name] = {"status": probe.get("status"), "stays_up": probe.get("ready_after"),
                      "error": probe.get("error"), "sent": probe.get("sent")}
        if probe.get("finding"):
            path[name]["finding"] = probe["finding"]
    path["model_exception"] = {"status": None, "stays_up": None, "note": MODEL_EXCEPTION_NOTE}
    return path


def server_figures(spec: Spec, kind: str, measured: Measured, rounds: int,
                   per_unit: int) -> dict[str, Any]:
    """Everything measured for one server, from its own windows only."""
    merged = measured.merged.get(kind, {})
    slo = spec.slo
    curve = [{"concurrency": c, m.THROUGHPUT_RPS: r.throughput, m.P50_MS: r.percentile_ms(50),
              m.P95_MS: r.percentile_ms(95), m.P99_MS: r.percentile_ms(99),
              m.ERROR_RATE: r.error_rate,
              "met_slo": meets_slo(r, slo.p99.ms, slo.error_rate.fraction)}
             for c, r in sorted(merged.items())]
    passing = [point for point in curve if point["met_slo"]]
    knee = max(passing, key=lambda p: (p[m.THROUGHPUT_RPS], -p[m.P99_MS])) if passing else None
    # The figure is the merged curve's best point that met the SLO, a point that was run;
    # its rounds are the windows at that load point, the spread the verdict weighs.
    at_slo = float(knee[m.THROUGHPUT_RPS]) if knee else 0.0
    knees = rounds_at(measured.windows, kind, rounds,
                      int(knee["concurrency"]) if knee else None)
    spread = Spread.of(knees)
    view = measured.server_view.get(kind, {})
    memory = measured.memory.get(kind, {})
    batches = measured.batches.get(kind, {})
    preferred = spec.server.batching.preferred_batch_sizes
    compute = sum(view.get(name, 0.0) for name in m.COMPUTE_METRICS) or \
        view.get(m.SERVER_COMPUTE_INFER_US)
    return {
        "throughput_at_slo": at_slo,
        "throughput_at_slo_per_unit": at_slo / per_unit,
        "throughput_at_slo_rounds": knees,
        "spread": {"low": spread.low, "high": spread.high},
        "knee_concurrency": knee["concurrency"] if knee else None,
        # The closed-loop knee is a diagnostic; at the highest load point it is a lower bound.
        **knee_bound(knee, curve),
        "p99_ms": knee[m.P99_MS] if knee else None,
        "p50_ms": knee[m.P50_MS] if knee else None,
        "p95_ms": knee[m.P95_MS] if knee else None,
        "curve": curve,
        "rss_mib": memory.get(m.SERVER_RSS_MB),
        "pss_mib": memory.get(m.SERVER_PSS_MB),
        "gpu_mib": memory.get(m.SERVER_GPU_MB, "not measured (no GPU or NVML here)"),
        "batch_sizes": {str(size): count for size, count in sorted(batches.items())},
        "preferred_formed": {str(size): batches.get(size, 0) > 0 for size in preferred},
        "server_queue_us": view.get(m.SERVER_QUEUE_US),
        "server_compute_us": compute,
        "server_avg_batch_size": view.get(m.SERVER_AVG_BATCH_SIZE),
        "windows": sum(1 for w in measured.windows if w.kind == kind),
    }


def capacity_figures(search: CapacitySearch | None, note: str) -> dict[str, Any]:
    """The open-loop capacity at the SLO, named and shaped as promote and `tune` write it
    (`capacity`), and how its search went; `note` says why there is none."""
    figure = CapacityFigure.of(search) if search is not None else None
    body: dict[str, Any] = {"capacity": figure.to_json() if figure else None}
    if search is None:
        body["capacity_note"] = note
        return body
    body["capacity_search"] = {
        "bound": search.bound, "knee_rps": search.knee_rps, "start_rps": search.start_rps,
        "stop_reason": search.stop_reason, "spent_s": search.spent_s,
        "steps": [{"rate_rps": step.rate_rps, "hold": step.hold, "verdict": step.verdict,
                   "p99_ms": step.p99_ms, "reason": step.reason} for step in search.steps]}
    if figure is None:
        body["capacity_note"] = (f"no rate confirmed ({search.stop_reason})"
                                 if search.bound == "unknown" else
                                 f"no open-loop rate met the SLO ({search.stop_reason})")
    return body


def knee_bound(knee: Mapping[str, Any] | None, curve: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the closed-loop knee is a lower bound: the best load that met the SLO was the
    highest load point, the concurrency cap (--max-concurrency)."""
    if knee is None or not curve:
        return {"knee_lower_bound": None, "knee_capped_by": None}
    cap = max(point["concurrency"] for point in curve)
    capped = knee["concurrency"] == cap
    return {"knee_lower_bound": capped,
            "knee_capped_by": f"the concurrency cap ({cap}, --max-concurrency)" if capped
            else None}


def verdict_and_plan(spec: Spec, figures: Mapping[str, Mapping[str, Any]],
                     measured: Measured, disqualified: Mapping[str, str]) -> dict[str, Any]:
    """The winner from each measured server's figures (`server_figures`): its rounds at
    its knee for the spread, its headline for the margin."""
    unit, count = compute_units(spec)
    qualified = [kind for kind in figures if kind not in disqualified]
    per_round = {kind: [value / count for value in figures[kind]["throughput_at_slo_rounds"]]
                 for kind in qualified}
    headline = {kind: float(figures[kind]["throughput_at_slo"]) / count for kind in qualified}
    verdict = decide(per_round, unit, disqualified, headline)
    order = [w.kind for w in measured.windows]
    return {"winner": verdict.winner, "margin": verdict.margin,
            "verdict": verdict.to_json() | {"per": unit, "units": count},
            "interleaved": is_interleaved(order) if len(set(order)) > 1 else False,
            "window_order": order}
