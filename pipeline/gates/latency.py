"""The latency stage's gates, each on a bound: percentiles (pipeline.gates.percentile_verdict), the
error rate (exact binomial), throughput (t over windows), and the server's queue mean."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pipeline import metric_names as m
from pipeline.gates.error_rate import error_rate_gate
from pipeline.gates.evidence import window_blocks
from pipeline.gates.percentile_verdict import (
    PRACTICAL_GROWTH,
    Evidence,
    PercentileVerdict,
    judge_percentile,
)
from pipeline.gates.samples import HistogramSample
from pipeline.gates.stall import stall_gate
from pipeline.gates.throughput import throughput_gate
from pipeline.measure import histogram_reads
from pipeline.measure.load_result import LoadResult
from pipeline.spec.models import Spec
from pipeline.spec.stage_settings import StabilitySpec
from pipeline.stage_result import Gate
from pipeline.statistics.sequential import WindowPlan

# A window whose client threads waited this share of the mean latency for a CPU measured
# the client, not the model.
CLIENT_WAIT_SHARE = 0.25
MORE_WINDOWS = ("raise stages.latency.stability.max_windows to {windows} and "
                "stages.latency.duration (and max_duration) to {duration:.0f}s")


def percentile_thresholds(spec: Spec) -> list[tuple[float, float]]:
    """(percentile, threshold ms) of every percentile gate the SLO sets."""
    slo = spec.slo
    pairs = [(99.0, slo.p99.ms)]
    pairs += [(p, limit.ms) for p, limit in ((95.0, slo.p95), (50.0, slo.p50))
              if limit is not None]
    return pairs


def plan_for(stability: StabilitySpec, confidence: float) -> WindowPlan:
    """Windows: the fewest, the cap, and a re-measure for every 3 windows of the cap."""
    cap = max(stability.max_windows, stability.windows)
    return WindowPlan(stability.windows, cap, max(1, cap // 3), confidence)


def window_seconds(spec: Spec, warmup_rps: float) -> float:
    """One window's length: duration / max_windows, or longer to hold window_requests at
    the warm-up's rate, at most max_duration / max_windows."""
    stage = spec.stages.latency
    windows = window_plan(spec).max_windows
    shortest = stage.duration.seconds / windows
    longest = max(stage.max_duration.seconds, stage.duration.seconds) / windows
    needed = stage.window_requests / warmup_rps if warmup_rps > 0 else longest
    return min(max(shortest, needed), longest)


def window_plan(spec: Spec) -> WindowPlan:
    latency = spec.stages.latency
    return plan_for(latency.stability, latency.verdict.confidence.fraction)


def client_limited(window: LoadResult) -> str | None:
    """Why the window measured the client rather than the model (None: it did not)."""
    if window.client_wait_s is None or not window.requests:
        return None
    waited_ms = window.client_wait_s * 1e3 / window.requests
    mean_ms = histogram_reads.mean(window.histogram) / 1e3
    if mean_ms > 0 and waited_ms > CLIENT_WAIT_SHARE * mean_ms:
        return (f"the client was short of CPU (its threads waited {waited_ms:.2f}ms per "
                f"request for one, against a mean latency of {mean_ms:.2f}ms)")
    return None


@dataclass(frozen=True)
class Judgement:
    """Every latency verdict over the windows kept so far; a Look for the window loop."""

    verdicts: list[PercentileVerdict]
    error_rate: Gate
    alpha: float

    @property
    def decided(self) -> bool:
        outcomes = {v.outcome for v in self.verdicts} | {self.error_rate.outcome}
        return "failed" in outcomes or "inconclusive" not in outcomes

    @property
    def outlier(self) -> int | None:
        found = self.verdicts[0].outlier if self.verdicts else None
        return None if found is None else found.window


def judge_windows(spec: Spec, windows: list[LoadResult], pooled: LoadResult,
                  window_s: float, alpha: float) -> Judgement:
    """Every stopping gate over `windows`, each bound one-sided at level alpha."""
    blocks = tuple(window_blocks(w) for w in windows)
    sample = HistogramSample(pooled.histogram)
    verdicts = []
    for percentile, threshold in percentile_thresholds(spec):
        evidence = Evidence(sample, blocks, tuple(w.percentile_ms(percentile) for w in windows))
        verdicts.append(judge_percentile(evidence, percentile, threshold, alpha))
    remedy = _remedy(spec, windows, window_s, None)
    gate = error_rate_gate(pooled.error_count, pooled.requests, spec.slo.error_rate.fraction,
                           alpha, remedy)
    return Judgement(verdicts, gate, alpha)


def _remedy(spec: Spec, windows: list[LoadResult], window_s: float,
            more_requests: int | None) -> str:
    plan = window_plan(spec)
    per_window = sum(w.requests for w in windows) / max(len(windows), 1)
    extra = plan.max_windows if more_requests is None or not per_window \
        else math.ceil(more_requests / per_window)
    windows_needed = max(len(windows), plan.max_windows) + max(extra, 1)
    return MORE_WINDOWS.format(windows=windows_needed, duration=windows_needed * window_s)


def at_threshold(verdict: PercentileVerdict, threshold_ms: float) -> str:
    """What is left to the user when no practical number of requests decides a verdict."""
    name = f"p{verdict.percentile:g}"
    return (f"; the {name} sits at the threshold: not even {PRACTICAL_GROWTH}x as many "
            f"requests would decide it; judge from the interval whether {threshold_ms:g}ms "
            "is met: stages.latency.verdict.accept_inconclusive: true passes the gate while "
            f"its measured {name} is within it, or set slo.{name} clear of the server's "
            f"{name}")


def percentile_gate(spec: Spec, verdict: PercentileVerdict, threshold_ms: float,
                    windows: list[LoadResult], window_s: float) -> Gate:
    reason = verdict.reason
    if verdict.outcome == "inconclusive":
        if verdict.more_requests is None:
            reason += at_threshold(verdict, threshold_ms)
        else:
            per_window = verdict.samples / max(len(windows), 1)
            reason += (f"; about {verdict.more_requests} more requests "
                       f"(~{math.ceil(verdict.more_requests / max(per_window, 1))} more "
                       f"windows) would decide: "
                       f"{_remedy(spec, windows, window_s, verdict.more_requests)}")
    return Gate.decided(f"latency.p{verdict.percentile:g}", verdict.observed_ms, threshold_ms,
                        verdict.outcome, "<=", "ms", (verdict.low_ms, verdict.high_ms),
                        verdict.samples, reason)


def latency_gates(spec: Spec, judgement: Judgement, windows: list[LoadResult],
                  window_s: float, server_view: dict[str, float]) -> list[Gate]:
    slo = spec.slo
    thresholds = dict(percentile_thresholds(spec))
    gates = [percentile_gate(spec, v, thresholds[v.percentile], windows, window_s)
             for v in judgement.verdicts]
    gates.append(judgement.error_rate)
    if slo.min_throughput is not None:
        gates.append(throughput_gate(windows,
                                     slo.min_throughput.per_second, judgement.alpha))
    stall = stall_gate(windows, slo)
    if stall is not None:
        gates.append(stall)
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
        metrics[f"{name}_design_effect"] = verdict.design_effect
    metrics["latency_samples"] = float(verdicts[0].samples if verdicts else 0)
    return metrics


def verdict_details(verdicts: list[PercentileVerdict], alpha: float) -> dict[str, Any]:
    return {"confidence_per_look": 1 - alpha,
            "verdicts": {f"latency.p{v.percentile:g}": {
                "outcome": v.outcome, "reason": v.reason, "window_ms": list(v.window_ms),
                "design_effect": v.design_effect, "effective_samples": v.effective_samples,
                "outlier_window": None if v.outlier is None else v.outlier.window + 1}
                for v in verdicts}}
