"""regression: the candidate against the release live in the target environment, served
side by side on this machine and measured in interleaved rounds (pipeline/regression/).

Runs when `stages.regression.gate` is on, `against` is side_by_side and the target
environment has a live release; the recorded comparison in publish then is information
only. Where the latency stage ran, it started the live release and its windows were made
of the first rounds (pipeline/regression/beside.py): this stage measures only the rounds
the verdict still needs, after a short warm-up of both. Fail closed: a live release that
cannot be read, integrity-checked or started, or that died, fails
`regression.live_release` with the reason, and nothing is published.
"""

from __future__ import annotations

import time
from typing import Any

from pipeline import metric_names as m
from pipeline.context import RunContext
from pipeline.errors import ServerError
from pipeline.regression.beside import live_beside, paired_rounds, why_not_side_by_side
from pipeline.regression.gates import (
    live_release_absent,
    live_release_failed,
    live_release_served,
    verdict_gates,
)
from pipeline.regression.paired import PairedVerdict
from pipeline.regression.settings import paired_settings
from pipeline.regression.side_by_side import CANDIDATE_WARMUP_S, LIVE, ServerDied
from pipeline.stage_result import StageResult, Status
from stages._load import sender_for

NAME = "regression"
USES_SERVER = True
# Both servers idled or served other load since the latency stage's rounds: this much
# traffic each brings them back to the rounds' state before more rounds are added.
REWARM_S = 0.5


def _failed(reason: str, details: dict[str, Any]) -> StageResult:
    return StageResult.judged(NAME, [live_release_failed(reason)], "", details=details)


def run(ctx: RunContext) -> StageResult:
    why_not = why_not_side_by_side(ctx)
    if why_not is not None:
        return StageResult(NAME, Status.SKIPPED, why_not)
    beside = live_beside(ctx)
    details = beside.details
    if beside.problem is not None:
        return _failed(beside.problem, details)
    if beside.served is None:
        return StageResult(NAME, Status.PASSED, f"nothing is live in {details['environment']}"
                           ": nothing to compare", gates=[live_release_absent()],
                           details=details)
    started = time.monotonic()
    release_id = beside.served.release_id
    rounds = beside.rounds
    try:
        if rounds is None:
            rounds = paired_rounds(ctx, beside.served, sender_for(ctx, NAME),
                                   lambda text: ctx.progress(NAME, 0, 1, text))
            rounds.warm_up(rounds.load.warmup_s,
                           min(rounds.load.warmup_s, CANDIDATE_WARMUP_S))
        elif not rounds.done:
            rounds.warm_up(REWARM_S, REWARM_S)
        side = rounds.finish()
    except ServerDied as exc:
        if exc.who == LIVE:
            return _failed(f"live release {release_id} died: {exc}", details)
        raise ServerError(str(exc)) from None
    settings = paired_settings(ctx.loaded.spec.stages.regression, ctx.loaded.spec.slo.p99.ms)
    gates = [live_release_served(release_id),
             *verdict_gates(side.verdict, settings.error_rate_allowance)]
    details.update(side.to_json())
    metrics = {**_metrics(side.verdict), m.LIVE_COLD_START_S: beside.served.cold_start_s,
               m.SIDE_BY_SIDE_S: time.monotonic() - started}
    return StageResult.judged(NAME, gates, _message(side.verdict, release_id, details,
                                                    side.in_latency_stage),
                              metrics=metrics, details=details)


def _metrics(verdict: PairedVerdict) -> dict[str, float]:
    metrics = {m.REGRESSION_ROUNDS: float(verdict.rounds)}
    for metric in verdict.metrics:
        metrics[f"{metric.metric}_live"] = metric.live
        metrics[f"{metric.metric}_candidate"] = metric.candidate
        if metric.ratio is not None:
            metrics[f"{metric.metric}_ratio"] = metric.ratio
    return metrics


def _message(verdict: PairedVerdict, release_id: str, details: dict[str, Any],
             in_latency_stage: int) -> str:
    same = details.get("same") or {}
    text = (f"no regression against live release {release_id} (margin "
            f"{verdict.margin:.0%}, {verdict.rounds} rounds side by side")
    if in_latency_stage:
        text += f", {in_latency_stage} of them the latency stage's"
    text += ")"
    if same.get("model") and same.get("config"):
        text += "; same model and config digests as the live release"
    return text
