"""The replay stage's gates: the SLO's percentiles and error rate, decided as the latency
stage decides them (pipeline.gates.percentile_verdict on the replay's time buckets merged
into a few windows, the exact binomial bound), once, over the whole log."""

from __future__ import annotations

from dataclasses import replace

from pipeline.gates.error_rate import error_rate_gate
from pipeline.gates.evidence import window_blocks
from pipeline.gates.latency import at_threshold, percentile_thresholds
from pipeline.gates.percentile_verdict import Evidence, PercentileVerdict, judge_percentile
from pipeline.gates.samples import HistogramSample
from pipeline.measure.load_result import LoadResult, merge_windows
from pipeline.spec.models import Spec
from pipeline.stage_result import Gate

PREFIX = "replay"
JUDGED_WINDOWS = 8
"""The replay's time buckets are judged merged into this many windows of consecutive
buckets at most: the verdict's cost grows faster than the number of windows (40 windows
took over a minute on 2 cores), and the latency stage judges as many at most."""
LONGER_LOG = "a longer log, or a lower speed over the same one"


def judged_windows(buckets: list[LoadResult], most: int = JUDGED_WINDOWS) -> list[LoadResult]:
    """The buckets that hold requests, merged into at most `most` windows of consecutive
    buckets, as evenly as their count allows."""
    held = [bucket for bucket in buckets if bucket.requests]
    if len(held) <= most:
        return held
    size = -(-len(held) // most)
    return [merge_windows(held[start:start + size]) for start in range(0, len(held), size)]


def replay_verdicts(spec: Spec, buckets: list[LoadResult], pooled: LoadResult,
                    alpha: float) -> list[PercentileVerdict]:
    """Each percentile the SLO sets, over every request of the replay, its bound one-sided
    at level alpha; the buckets are the blocks its design effect is estimated from."""
    blocks = tuple(window_blocks(bucket) for bucket in buckets)
    sample = HistogramSample(pooled.histogram)
    return [judge_percentile(Evidence(sample, blocks,
                                      tuple(b.percentile_ms(percentile) for b in buckets)),
                             percentile, threshold, alpha)
            for percentile, threshold in percentile_thresholds(spec)]


def replay_gates(spec: Spec, verdicts: list[PercentileVerdict], pooled: LoadResult,
                 alpha: float) -> list[Gate]:
    """replay.p99 (and p95, p50 where the SLO sets them) and replay.error_rate."""
    thresholds = dict(percentile_thresholds(spec))
    gates = []
    for verdict in verdicts:
        threshold = thresholds[verdict.percentile]
        reason = verdict.reason
        if verdict.outcome == "inconclusive":
            reason += (at_threshold(verdict, threshold) if verdict.more_requests is None else
                       f"; about {verdict.more_requests} more requests would decide "
                       f"({LONGER_LOG})")
        gates.append(Gate.decided(f"{PREFIX}.p{verdict.percentile:g}", verdict.observed_ms,
                                  threshold, verdict.outcome, "<=", "ms",
                                  (verdict.low_ms, verdict.high_ms), verdict.samples, reason))
    errors = error_rate_gate(pooled.error_count, pooled.requests, spec.slo.error_rate.fraction,
                             alpha, LONGER_LOG)
    gates.append(replace(errors, name=f"{PREFIX}.error_rate"))
    return gates
