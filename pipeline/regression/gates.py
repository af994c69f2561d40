"""The side-by-side verdict as gates: one per watched metric, and the live release's."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pipeline.digest import content_digest
from pipeline.regression.outcome import GATE_OUTCOME
from pipeline.regression.paired import ERROR_RATE, RATIO_METRICS, MetricVerdict, PairedVerdict
from pipeline.release.manifest_record import Manifest
from pipeline.servers.base import BuiltArtifact
from pipeline.stage_result import Gate, GateOutcome

LIVE_RELEASE_GATE = "regression.live_release"
SERVED = "served side by side"


def live_release_failed(reason: str) -> Gate:
    return Gate(LIVE_RELEASE_GATE, "not served", SERVED, False, reason=reason)


def live_release_absent() -> Gate:
    """Nothing is live in the target environment (a first promotion): nothing to compare."""
    return Gate(LIVE_RELEASE_GATE, "no live release", SERVED, True)


def live_release_served(release_id: str) -> Gate:
    return Gate(LIVE_RELEASE_GATE, release_id, SERVED, True)


def metric_gate(verdict: MetricVerdict, error_rate_allowance: float) -> Gate:
    outcome = GATE_OUTCOME[verdict.outcome]
    name = f"regression.{verdict.metric}"
    interval = (verdict.ratio_low, verdict.ratio_high)
    if verdict.metric == ERROR_RATE:
        threshold = (f"ratio <= {verdict.limit:g} or at most {error_rate_allowance:.3%} "
                     "above the live release")
        return Gate(name, verdict.candidate, threshold, outcome is GateOutcome.PASSED, "", "",
                    outcome,
                    interval, verdict.rounds, verdict.reason)
    comparison = "<=" if RATIO_METRICS[verdict.metric] == "lower" else ">="
    observed = round(verdict.ratio, 4) if verdict.ratio is not None else None
    return Gate(name, observed, round(verdict.limit, 4), outcome is GateOutcome.PASSED, comparison,
                "x", outcome, interval, verdict.rounds, verdict.reason)


def verdict_gates(verdict: PairedVerdict, error_rate_allowance: float) -> list[Gate]:
    return [metric_gate(metric, error_rate_allowance) for metric in verdict.metrics]


def same_bytes(build: BuiltArtifact, manifest: Manifest) -> dict[str, bool]:
    """Whether the candidate's model and config digests equal the live release's."""
    return {"model": manifest.model_sha256 == build.model_digest,
            "config": manifest.config_sha256 == build.config_digest}


def same_served(build: BuiltArtifact, live_archive: Path) -> bool:
    """Whether the candidate serves the same files as the live release's artifact: its
    model code (an eager model's entrypoint, the generated handler) as well as its weights
    and config. The weights alone are not the model: a changed entrypoint keeps them."""
    candidate = content_digest(build.archive)
    return candidate is not None and candidate == content_digest(live_archive)


def is_same_release(same: Mapping[str, bool]) -> bool:
    """The claim "same bytes as the live release": model, config and served files."""
    return bool(same.get("model") and same.get("config") and same.get("served"))
