"""The latency stage's gates: percentiles on confidence bounds, the rest on point values."""

from __future__ import annotations

from typing import Any

from pipeline import metric_names as m
from pipeline.gates.verdict import PercentileVerdict, judge_percentile, per_look_confidence
from pipeline.measure.loadgen import LoadResult
from pipeline.results import Gate
from pipeline.spec.models import Spec


def percentile_thresholds(spec: Spec) -> list[tuple[float, float]]:
    """(percentile, threshold ms) of every percentile gate the SLO sets."""
    slo = spec.slo
    pairs = [(99.0, slo.p99.ms)]
    pairs += [(p, limit.ms) for p, limit in ((95.0, slo.p95), (50.0, slo.p50))
              if limit is not None]
    return pairs


def look_confidence(spec: Spec) -> float:
    """Each look's confidence, so that the spec's holds over every look the run can take."""
    stability = spec.stages.latency.stability
    looks = max(stability.max_windows, stability.windows) - stability.windows + 1
    return per_look_confidence(spec.stages.latency.verdict.confidence.fraction, looks)


def percentile_verdicts(spec: Spec, windows: list[LoadResult],
                        merged: LoadResult) -> list[PercentileVerdict]:
    confidence = look_confidence(spec)
    return [judge_percentile(merged.histogram, [w.histogram for w in windows], percentile,
                             threshold, confidence)
            for percentile, threshold in percentile_thresholds(spec)]


def settled_verdicts(verdicts: list[PercentileVerdict]) -> bool:
    """Stop measuring: a gate has clearly failed, or none is still undecided."""
    outcomes = {v.outcome for v in verdicts}
    return "failed" in outcomes or "inconclusive" not in outcomes


def percentile_gate(verdict: PercentileVerdict, threshold_ms: float) -> Gate:
    return Gate.decided(f"latency.p{verdict.percentile:g}", verdict.observed_ms, threshold_ms,
                        verdict.outcome, "<=", "ms", (verdict.low_ms, verdict.high_ms),
                        verdict.samples, verdict.reason)


def latency_gates(spec: Spec, verdicts: list[PercentileVerdict], measured: LoadResult,
                  windows: int, server_view: dict[str, float]) -> list[Gate]:
    slo = spec.slo
    thresholds = dict(percentile_thresholds(spec))
    gates = [percentile_gate(v, thresholds[v.percentile]) for v in verdicts]
    summary = measured.summary()
    requests = int(summary["requests"])
    gates.append(Gate("latency.error_rate", summary["error_rate"] * 100,
                      slo.error_rate.fraction * 100,
                      summary["error_rate"] <= slo.error_rate.fraction, "<=", "%",
                      samples=requests))
    if slo.min_throughput is not None:
        gates.append(Gate("latency.throughput", summary["throughput_rps"],
                          slo.min_throughput.per_second,
                          summary["throughput_rps"] >= slo.min_throughput.per_second,
                          ">=", "/s", samples=windows))
    if slo.queue_mean is not None:
        # A mean against a budget stated as a mean: the counters of both servers give
        # only sums, and Triton's summary quantiles cover a sliding time span, not our
        # windows.
        queue_ms = server_view[m.SERVER_QUEUE_US] / 1e3
        gates.append(Gate("latency.server_queue_mean", queue_ms, slo.queue_mean.ms,
                          queue_ms <= slo.queue_mean.ms, "<=", "ms",
                          samples=int(server_view.get("server_requests", 0))))
    return gates


def interval_metrics(verdicts: list[PercentileVerdict]) -> dict[str, float]:
    """The bounds and sample count, as record metrics (a missing bound is left out)."""
    metrics: dict[str, float] = {}
    for verdict in verdicts:
        name = f"p{verdict.percentile:g}"
        if verdict.low_ms is not None:
            metrics[f"{name}_low_ms"] = verdict.low_ms
        if verdict.high_ms is not None:
            metrics[f"{name}_high_ms"] = verdict.high_ms
    metrics["latency_samples"] = float(verdicts[0].samples if verdicts else 0)
    return metrics


def verdict_details(verdicts: list[PercentileVerdict], confidence: float) -> dict[str, Any]:
    return {"confidence_per_look": confidence,
            "verdicts": {f"latency.p{v.percentile:g}": {"outcome": v.outcome,
                                                         "reason": v.reason,
                                                         "window_ms": list(v.window_ms)}
                         for v in verdicts}}
