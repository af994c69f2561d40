"""The target environment's gates, judged on the gate results a release recorded.

A release carries the gates it was verified with (the manifest's `gates`). Moving it into
an environment whose thresholds (after the overlay) are the same needs those results to
have passed; a stricter threshold needs the recorded evidence to meet it: a percentile's
upper confidence bound, a point value otherwise. A gate the target sets but the release
never measured, an evidence value that cannot be read, or a failed gate is a refusal
(fail closed). An inconclusive result counts only where the target's own spec accepts
inconclusive results for that stage, and is then named in a note, unless its observed
value misses the target's threshold (as a run judges it: it leans towards a miss).
Re-measuring under the target's gates (`reverify: true` in its overlay) replaces all of
this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.release.configured import configured_in
from pipeline.release.manifest_record import Manifest
from pipeline.spec.models import LoadedSpec, Spec
from pipeline.stage_result import finite

# The saturation stage searched for load that met slo.p99: under a stricter p99 its
# result still holds when the p99 at the point it reports meets the stricter one too.
SLO_POINT_P99 = {"saturation.knee_concurrency": "knee_p99_ms",
                 "saturation.knee_throughput": "knee_p99_ms",
                 "saturation.throughput_lower_bound": "knee_p99_ms",
                 "saturation.capacity_rps": "capacity_p99_ms"}
ACCEPT_INCONCLUSIVE = {"latency": "stages.latency.verdict.accept_inconclusive",
                       "saturation": "stages.saturation.capacity.accept_inconclusive"}


@dataclass(frozen=True)
class Threshold:
    gate: str
    key: str            # the spec key that sets it
    value: float
    comparison: str     # "<=" or ">="
    unit: str
    required: bool      # a release that never measured it is refused

    def met_by(self, value: float) -> bool:
        return value <= self.value if self.comparison == "<=" else value >= self.value

    def stricter_than(self, recorded: float) -> bool:
        return self.value < recorded if self.comparison == "<=" else self.value > recorded


def thresholds(spec: Spec) -> dict[str, Threshold]:
    """Every gate threshold the spec's SLO sets, by the name of the gate it becomes."""
    slo = spec.slo
    found = [Threshold("latency.p99", "slo.p99", slo.p99.ms, "<=", "ms", True)]
    found += [Threshold(f"latency.{key}", f"slo.{key}", limit.ms, "<=", "ms", True)
              for key, limit in (("p95", slo.p95), ("p50", slo.p50)) if limit is not None]
    found.append(Threshold("latency.error_rate", "slo.error_rate",
                           slo.error_rate.fraction * 100, "<=", "%", True))
    # Set by slo.p99 (pipeline.gates.stall); releases published before the gate lack it.
    found.append(Threshold("latency.longest_stall", "slo.p99", slo.max_stall_s(), "<=", "s",
                           False))
    if slo.min_throughput is not None:
        minimum = slo.min_throughput.per_second
        found.append(Threshold("latency.throughput", "slo.min_throughput", minimum, ">=", "/s",
                               True))
        found += [Threshold(gate, "slo.min_throughput", minimum, ">=", "/s", False)
                  for gate in ("saturation.knee_throughput",
                               "saturation.throughput_lower_bound", "saturation.capacity_rps")]
    if slo.queue_mean is not None:
        found.append(Threshold("latency.server_queue_mean", "slo.queue_mean",
                               slo.queue_mean.ms, "<=", "ms", True))
    return {threshold.gate: threshold for threshold in found}


def accepts_inconclusive(spec: Spec, stage: str) -> bool:
    if stage == "latency":
        return spec.stages.latency.verdict.accept_inconclusive
    if stage == "saturation":
        return spec.stages.saturation.capacity.accept_inconclusive
    return False


@dataclass(frozen=True)
class GateReview:
    refusals: list[str]
    notes: list[str]


def evidence(gate: Mapping[str, Any], comparison: str) -> float | None:
    """The value a stricter threshold is judged on: a percentile's upper bound (its lower
    one for an at-least gate), else the observed value."""
    interval = gate.get("interval")
    if isinstance(interval, list) and len(interval) == 2:
        return finite(interval[1] if comparison == "<=" else interval[0])
    return finite(gate.get("observed"))


class _Reviewer:
    def __init__(self, manifest: Manifest, target: LoadedSpec, environment: str):
        self.manifest = manifest
        self.target = target
        self.environment = environment
        self.thresholds = thresholds(target.spec)
        self.refusals: list[str] = []
        self.notes: list[str] = []

    def where(self, key: str) -> str:
        return configured_in(self.target, self.environment, key)

    def stricter_p99(self, recorded: list[Mapping[str, Any]]) -> bool:
        p99 = next((g for g in recorded if g.get("name") == "latency.p99"), None)
        measured_at = finite(p99.get("threshold")) if p99 is not None else None
        return measured_at is None or self.thresholds["latency.p99"].stricter_than(measured_at)

    def outcome(self, gate: Mapping[str, Any], stage: str) -> bool:
        """Whether the recorded outcome may stand (notes an accepted inconclusive one)."""
        name, outcome = gate.get("name"), gate.get("outcome") or (
            "passed" if gate.get("passed") else "failed")
        if outcome == "passed":
            return True
        leaning = self.leans_to_a_miss(gate)
        if outcome == "inconclusive" and accepts_inconclusive(self.target.spec, stage) and \
                leaning:
            self.refusals.append(f"{name} was measured inconclusive and its observed value "
                                 f"misses {leaning}: an accepted inconclusive result that "
                                 "leans towards a miss still fails")
            return False
        if outcome == "inconclusive" and accepts_inconclusive(self.target.spec, stage):
            self.notes.append(f"{name} was measured inconclusive and is accepted "
                              f"({self.where(ACCEPT_INCONCLUSIVE[stage])})")
            return True
        if outcome == "inconclusive":
            key = ACCEPT_INCONCLUSIVE.get(stage)
            setting = f"; {self.environment} does not accept inconclusive results " \
                      f"({self.where(key)} is false)" if key else ""
            self.refusals.append(f"{name} was measured inconclusive{setting}")
        else:
            self.refusals.append(f"{name} was recorded as {outcome}")
        return False

    def leans_to_a_miss(self, gate: Mapping[str, Any]) -> str | None:
        """The target's threshold (the recorded one where the target sets none) when the
        observed value misses it, as a run judges an accepted inconclusive gate."""
        observed = finite(gate.get("observed"))
        target = self.thresholds.get(str(gate.get("name")))
        limit = target.value if target else finite(gate.get("threshold"))
        comparison = target.comparison if target else gate.get("comparison")
        if observed is None or limit is None or comparison not in ("<=", ">="):
            return None
        missed = observed > limit if comparison == "<=" else observed < limit
        return f"{comparison} {limit:g}{gate.get('unit') or ''}" if missed else None

    def threshold(self, gate: Mapping[str, Any], threshold: Threshold) -> None:
        recorded = finite(gate.get("threshold"))
        if recorded is not None and not threshold.stricter_than(recorded):
            return
        value = evidence(gate, threshold.comparison)
        wanted = (f"{self.environment} requires {threshold.comparison} "
                  f"{threshold.value:g}{threshold.unit} ({self.where(threshold.key)})")
        if value is None:
            self.refusals.append(f"{gate.get('name')} has no recorded value to judge on; "
                                 f"{wanted}")
        elif not threshold.met_by(value):
            bound = "bound " if isinstance(gate.get("interval"), list) else ""
            self.refusals.append(f"{gate.get('name')} was measured at {bound}"
                                 f"{value:.4g}{threshold.unit} (against "
                                 f"{gate.get('threshold')}{threshold.unit}); {wanted}")

    def slo_point(self, gate: Mapping[str, Any], metric: str) -> None:
        p99 = finite(self.manifest.stage_metrics("saturation").get(metric))
        limit = self.thresholds["latency.p99"]
        if p99 is None or not limit.met_by(p99):
            shown = "unknown" if p99 is None else f"{p99:.4g}ms"
            self.refusals.append(f"{gate.get('name')} was searched under a looser p99 (p99 "
                                 f"there {shown}); {self.environment} requires <= "
                                 f"{limit.value:g}ms ({self.where(limit.key)})")

    def review(self) -> GateReview:
        recorded = list(self.manifest.gates)
        stricter_p99 = self.stricter_p99(recorded)
        for gate in recorded:
            name = str(gate.get("name"))
            stage = str(gate.get("stage") or name.partition(".")[0])
            if not self.outcome(gate, stage):
                continue
            if name in self.thresholds:
                self.threshold(gate, self.thresholds[name])
            if stricter_p99 and name in SLO_POINT_P99:
                self.slo_point(gate, SLO_POINT_P99[name])
        measured = {str(g.get("name")) for g in recorded}
        for threshold in self.thresholds.values():
            if threshold.required and threshold.gate not in measured:
                self.refusals.append(f"{threshold.gate} was never measured; {self.environment}"
                                     f" sets it ({self.where(threshold.key)})")
        return GateReview(self.refusals, self.notes)


def review_gates(manifest: Manifest, target: LoadedSpec,
                 environment: str) -> GateReview:
    """What the target's gates say about a release's recorded results."""
    return _Reviewer(manifest, target, environment).review()
