"""This run against the release live in the target environment: deltas and the gate.

Fail closed: a live release that exists but cannot be read, and a watched metric
that one side lacks, fail their gates with the reason; only "no live release at
all" (a first promotion) passes without a comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.errors import StoreError, UsageError
from pipeline.metric_names import (
    BASELINE_FALLBACKS,
    CAPACITY_RPS,
    KNEE_THROUGHPUT_RPS,
    SATURATION_STAGE,
    watched_name,
)
from pipeline.record import RunRecord
from pipeline.release.baseline_deltas import Delta, compare, metric_direction
from pipeline.release.manifest import VerificationUnreadable, read_manifest, read_verification
from pipeline.release.pointers import read_pointer
from pipeline.release.store.base import Store
from pipeline.spec.models import RegressionStage
from pipeline.stage_result import Gate

LIVE_RELEASE_GATE = "regression.live_release"


@dataclass(frozen=True)
class LiveRelease:
    """The release live in `environment`: its verification record, or why it is unreadable.

    `release_id` None and no `problem`: nothing is live there (a first promotion)."""

    environment: str
    release_id: str | None
    verification: RunRecord | None = None
    problem: str | None = None


def live_release(store: Store, name: str, environment: str) -> LiveRelease:
    try:
        pointer, _ = read_pointer(store, name, environment)
    except StoreError as exc:
        return LiveRelease(environment, None, problem=f"cannot read the {environment} "
                           f"pointer: {exc}")
    release_id = pointer.current
    if release_id is None:
        return LiveRelease(environment, None)

    def unreadable(what: str) -> LiveRelease:
        return LiveRelease(environment, release_id,
                           problem=f"live release {release_id} in {environment}: {what}")

    try:
        manifest = read_manifest(store, name, release_id)
    except (UsageError, StoreError) as exc:
        return unreadable(f"cannot read its manifest: {exc}")
    try:
        return LiveRelease(environment, release_id,
                           read_verification(store, manifest, release_id))
    except VerificationUnreadable as exc:
        return unreadable(str(exc))


def live_release_gate(live: LiveRelease) -> Gate:
    """Failed when a live release exists but could not be read (fail closed)."""
    if live.problem is not None:
        return Gate(LIVE_RELEASE_GATE, f"unreadable: {live.problem}",
                    "the live release readable", False)
    return Gate(LIVE_RELEASE_GATE, live.release_id or "no live release",
                "the live release readable", True)


def baseline_value(baseline: RunRecord, watched: str) -> tuple[float | None, str]:
    """The baseline's value of `watched`, else of its first fallback it has; (value, name)."""
    for name in (watched, *BASELINE_FALLBACKS.get(watched, ())):
        stage, _, metric = name.partition(".")
        value = baseline.metrics(stage).get(metric)
        if value is not None:
            return value, name
    return None, watched


def capacity_for_knee(watched: list[str], record: RunRecord,
                      baseline: RunRecord) -> list[str]:
    """Watch the sustainable rate instead of the closed-loop knee when both runs have it."""
    knee = watched_name(SATURATION_STAGE, KNEE_THROUGHPUT_RPS)
    capacity = watched_name(SATURATION_STAGE, CAPACITY_RPS)
    if knee not in watched or not all(CAPACITY_RPS in body.metrics(SATURATION_STAGE)
                                      for body in (record, baseline)):
        return list(watched)
    return list(dict.fromkeys(capacity if name == knee else name for name in watched))


def regression_gates(record: RunRecord, baseline: RunRecord,
                     settings: RegressionStage) -> tuple[list[Gate], list[Delta]]:
    """One gate per watched metric; a metric missing on either side fails with the reason."""
    deltas = compare(record, baseline, settings.tolerance.fraction)
    tolerance = settings.tolerance.fraction * 100
    watched_metrics = capacity_for_knee(settings.metrics, record, baseline)
    gates = []
    for watched in watched_metrics:
        stage, _, metric = watched.partition(".")
        name = f"regression.{watched}"
        current = record.metrics(stage).get(metric)
        before, _ = baseline_value(baseline, watched)
        threshold = f"<= {tolerance:g}% worse than the live release"
        if current is None:
            gates.append(Gate(name, "missing from this run", threshold, False))
            continue
        if before is None:
            gates.append(Gate(name, f"missing from the live release {baseline.release_id}",
                              threshold, False))
            continue
        delta = Delta(stage, metric, before, current, metric_direction(metric),
                      settings.tolerance.fraction)
        if delta.worse_by is None:
            gates.append(Gate(name, f"not comparable ({before:g} → {current:g})", threshold,
                              False))
            continue
        gates.append(Gate.at_most(name, round(delta.worse_by * 100, 2), tolerance, "%"))
    return gates, deltas


def fallbacks_used(baseline: RunRecord, settings: RegressionStage) -> dict[str, str]:
    """Watched metric -> the older metric of the live release it was compared with."""
    used = {}
    for watched in settings.metrics:
        value, name = baseline_value(baseline, watched)
        if value is not None and name != watched:
            used[watched] = name
    return used
