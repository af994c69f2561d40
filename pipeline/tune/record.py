"""The tune run's record (`.serve-pipeline/runs/<run_id>/record.json`, command "tune").

It has the top-level keys of every run record (stages empty: a tune run publishes and
promotes nothing) plus `tune`, whose numbers are measured unless they sit under a
`predicted` key (those carry `"predicted": true`).
"""

from __future__ import annotations

import platform
from typing import Any

from pipeline import __version__
from pipeline.release.manifest import iso, utc_now
from pipeline.servers import server_kind
from pipeline.spec.models import LoadedSpec
from pipeline.tune.candidate import Candidate
from pipeline.tune.search import TuneOutcome, TuneSettings
from pipeline.tune.space import Config


def tune_record(loaded: LoadedSpec, run_id: str, outcome: TuneOutcome, settings: TuneSettings,
                started_at: str, duration_s: float) -> dict[str, Any]:
    winner = outcome.winner
    return {
        "schema": 1, "run_id": run_id, "status": "passed" if winner else "failed",
        "command": "tune", "name": loaded.spec.name, "environment": loaded.environment,
        "spec_file": str(loaded.path), "spec_files": list(loaded.files),
        "spec_digest": loaded.digest, "started_at": started_at, "finished_at": iso(utc_now()),
        "duration_s": duration_s, "tool_version": __version__,
        "host": {"machine": platform.machine(), "python": platform.python_version(),
                 "node": platform.node()},
        "server": {"kind": loaded.spec.server.kind},
        "stages": [], "release_id": None, "promoted_to": None, "interrupted": False,
        "tune": tune_section(loaded, outcome, settings),
    }


def tune_section(loaded: LoadedSpec, outcome: TuneOutcome,
                 settings: TuneSettings) -> dict[str, Any]:
    slo = loaded.spec.slo
    decision = outcome.decision
    winner, closest = decision.pick, outcome.closest
    predictions = {p.config: p for p in outcome.predictions}
    baseline = outcome.baseline
    return {
        "budget_s": settings.budget_s, "budget_exhausted": outcome.budget_exhausted,
        "wall_s": outcome.explore_s + outcome.verify_s,
        "explore_s": outcome.explore_s, "verify_s": outcome.verify_s,
        "space_size": len(outcome.space),
        "configs_explored": len({(o.device, o.instances) for o in outcome.observations}),
        "configs_measured": len(outcome.candidates),
        "server_starts": outcome.starts, "server_reloads": outcome.reloads,
        "restarts": server_kind(outcome.kind).tuning.reconfigured_by,
        "server_changes": outcome.server_changes,
        "slo": {"p99_ms": slo.p99.ms, "p95_ms": slo.p95.ms if slo.p95 else None,
                "p50_ms": slo.p50.ms if slo.p50 else None,
                "error_rate": slo.error_rate.fraction,
                "min_throughput_rps": slo.min_throughput.per_second
                if slo.min_throughput else None,
                "queue_budget_ms": slo.queue_budget().ms},
        "gpu_memory": "measured (NVML)" if outcome.gpu_measured else
        "not measured (no GPU or NVML here)",
        "model_calibration": outcome.calibration,
        "model_margin": outcome.model_margin,
        "observations": [_observation(o.__dict__) for o in outcome.observations],
        "model": [f.to_json() for f in outcome.fits],
        "exploration_failures": outcome.exploration_failures,
        "candidates": [candidate_json(c) for c in outcome.candidates],
        "pruned": [{"config": c.to_json(), "label": c.label, "reason": reason,
                    "predicted": predictions[c].to_json() if c in predictions else None}
                   for c, reason in sorted(outcome.pruned.items())],
        "baseline": candidate_json(baseline) if baseline else None,
        "baseline_in_space": baseline is not None and baseline.config in outcome.space,
        # The baseline verified again at the end, and the drift between its two capacities
        # that every interval was widened by (`drift.py`); null where not looked at.
        "baseline_again": candidate_json(outcome.baseline_again)
        if outcome.baseline_again else None,
        "drift": outcome.drift.to_json() if outcome.drift else None,
        "winner": candidate_json(winner) if winner else None,
        "best_measured": candidate_json(decision.best) if decision.best else None,
        "tie": [c.config.label for c in decision.tied] if decision.is_tie else [],
        "decision": decision.line(),
        "why": why(outcome),
        "closest": candidate_json(closest) if closest and not winner else None,
        "recommended": recommended_block(winner.config) if winner else None,
    }


def candidate_json(candidate: Candidate) -> dict[str, Any]:
    measured = candidate.measured
    return {
        "config": candidate.config.to_json(), "label": candidate.config.label,
        "predicted": candidate.prediction.to_json() if candidate.prediction else None,
        "measured": None if measured is None else {
            "passed": measured.passed, "throughput_rps": measured.throughput_rps,
            "throughput_source": measured.throughput_source,
            "p99_ms": measured.latency_p99_ms,
            "latency_throughput_rps": measured.latency_throughput_rps,
            "rss_mb": measured.rss_mb, "gpu_mb": measured.gpu_mb,
            "capacity": measured.capacity.to_json() if measured.capacity else None},
        "meets_slo": candidate.meets, "missed": candidate.missed(),
        "record": str(candidate.record_dir / "record.json"),
        "duration_s": candidate.duration_s,
    }


def recommended_block(config: Config) -> dict[str, Any]:
    body = config.to_json()
    return {"server": {"device": body["device"], "instances": body["instances"],
                       "batching": {"max_batch_size": body["max_batch_size"],
                                    "max_queue_delay": body["max_queue_delay"],
                                    "preferred_batch_sizes": body["preferred_batch_sizes"]}}}


def why(outcome: TuneOutcome) -> str:
    decision = outcome.decision
    winner = decision.pick
    if winner is None:
        closest = outcome.closest
        if closest is None:
            return "no config could be measured"
        return (f"no verified config met every SLO gate; closest: {closest.config.label}, "
                f"which missed: {'; '.join(closest.missed())}")
    assert winner.measured is not None
    figure = winner.capacity.text() if winner.capacity else \
        f"{winner.throughput:,.0f}/s, {winner.measured.throughput_source}"
    what = "the cheapest of those tied with the highest measured capacity" \
        if decision.is_tie else "the highest measured capacity at the SLO"
    text = (f"{winner.config.label}: {what} ({figure}) of "
            f"{sum(c.meets for c in outcome.measured)} verified configs that met every gate")
    if decision.line():
        text += f"; {decision.line()}"
    if outcome.drift is not None and outcome.drift.basis != "not_needed":
        text += f"; {outcome.drift.text()}"
    failed = [c for c in outcome.measured if not c.meets]
    if failed:
        text += f"; {len(failed)} verified config(s) missed the SLO"
    text += f"; {len(outcome.pruned)} configs pruned by the model"
    if outcome.budget_exhausted:
        text += " (budget exhausted: the best config verified so far)"
    return text


def _observation(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "batch_executions": {str(k): v for k, v in
                                         sorted(body["batch_executions"].items())}}
