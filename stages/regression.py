"""regression: the candidate against the release live in the target environment, served
side by side on this machine and measured in interleaved rounds (pipeline/regression/).

Runs when `stages.regression.gate` is on, `against` is side_by_side and the target
environment has a live release; the recorded comparison in publish then is information
only. Fail closed: a live release that cannot be read, integrity-checked or started
fails `regression.live_release` with the reason, and nothing is published.
"""

from __future__ import annotations

import time
from typing import Any

from pipeline import metric_names as m
from pipeline.context import RunContext
from pipeline.errors import ServerError, StoreError, UsageError
from pipeline.measure.targets import spec_target
from pipeline.regression.gates import (
    is_same_release,
    live_release_absent,
    live_release_failed,
    live_release_served,
    same_bytes,
    same_served,
    verdict_gates,
)
from pipeline.regression.head_start import HeadStart, begin, not_needed
from pipeline.regression.live_serving import (
    IntegrityFailed,
    LiveUnservable,
    live_archive,
    serve_live,
)
from pipeline.regression.paired import PairedVerdict
from pipeline.regression.settings import paired_settings
from pipeline.regression.side_by_side import (
    CANDIDATE,
    LIVE,
    ServerDied,
    SideBySideLoad,
    measure_side_by_side,
)
from pipeline.release.manifest import read_manifest
from pipeline.release.regression import live_release
from pipeline.release.store import store_for
from pipeline.servers.base import ModelServer
from pipeline.stage_result import StageResult, Status
from stages._load import sender_for

NAME = "regression"
USES_SERVER = True
# The live release starts while the candidate's parity and latency warm-up run
# (pipeline/regression/head_start.py); the runner calls this once the candidate is ready.
head_start = begin


def _failed(reason: str, details: dict[str, Any], store_fault: bool = False) -> StageResult:
    """Failed closed; `store_fault`: the store could not give the live release's bytes
    intact, which exits as every store error does (3)."""
    result = StageResult.judged(NAME, [live_release_failed(reason)], "", details=details)
    if store_fault:
        result.exit_code = StoreError.exit_code
    return result


def run(ctx: RunContext) -> StageResult:
    why_not = not_needed(ctx)
    if why_not is not None:
        return StageResult(NAME, Status.SKIPPED, why_not)
    environment = ctx.promote_to or ctx.loaded.environment
    assert environment is not None
    store = store_for(ctx.loaded)
    live = live_release(store, ctx.loaded.spec.name, environment)
    details: dict[str, Any] = {"environment": environment, "live_release_id": live.release_id}
    if live.problem is not None:
        return _failed(live.problem, details, store_fault=True)
    if live.release_id is None:
        return StageResult(NAME, Status.PASSED, f"nothing is live in {environment}: "
                           "nothing to compare", gates=[live_release_absent()],
                           details=details)
    try:
        manifest = read_manifest(store, ctx.loaded.spec.name, live.release_id)
    except (UsageError, StoreError) as exc:
        return _failed(f"live release {live.release_id}: {exc}", details, store_fault=True)
    details["same"] = same_bytes(ctx.require_build(), manifest)
    ahead = ctx.run_scoped(HeadStart)
    details["started_ahead"] = ahead is not None and ahead.release_id == live.release_id
    try:
        served = ahead.served() if ahead is not None and details["started_ahead"] else \
            serve_live(ctx, store, manifest)
    except LiveUnservable as exc:
        return _failed(f"live release {live.release_id} {exc}", details,
                       store_fault=isinstance(exc, IntegrityFailed))
    details["same"]["served"] = same_served(ctx.require_build(), live_archive(ctx))
    return _measured(ctx, served.release_id, served.server, served.cold_start_s, details)


def _measured(ctx: RunContext, release_id: str, live_server: ModelServer, cold_start_s: float,
              details: dict[str, Any]) -> StageResult:
    stage = ctx.loaded.spec.stages.regression
    settings = paired_settings(stage, ctx.loaded.spec.slo.p99.ms)
    started = time.monotonic()
    latency = ctx.loaded.spec.stages.latency
    load = SideBySideLoad(sender_for(ctx, NAME), latency.concurrency, latency.warmup.seconds,
                          stage.window.seconds)
    servers = {CANDIDATE: ctx.require_server(), LIVE: live_server}
    targets = {who: spec_target(ctx.loaded, server) for who, server in servers.items()}
    try:
        side = measure_side_by_side(load, servers, targets, settings,
                                    lambda text: ctx.progress(NAME, 0, 1, text))
    except ServerDied as exc:
        if exc.who == LIVE:
            return _failed(f"live release {release_id} stopped serving: {exc}", details)
        raise ServerError(str(exc)) from None
    gates = [live_release_served(release_id),
             *verdict_gates(side.verdict, settings.error_rate_allowance)]
    details.update(side.to_json())
    metrics = {**_metrics(side.verdict), m.LIVE_COLD_START_S: cold_start_s,
               m.SIDE_BY_SIDE_S: time.monotonic() - started}
    result = StageResult.judged(NAME, gates, _message(side.verdict, release_id, details),
                                metrics=metrics, details=details)
    if result.status is Status.FAILED and is_same_release(details.get("same") or {}):
        result.message += ("; the candidate has the same model, config and served files as "
                           "the live release, so this is the machine's noise between two starts "
                           "of the same bytes (stages.regression.margin sets what counts)")
    return result


def _metrics(verdict: PairedVerdict) -> dict[str, float]:
    metrics = {m.REGRESSION_ROUNDS: float(verdict.rounds)}
    for metric in verdict.metrics:
        metrics[f"{metric.metric}_live"] = metric.live
        metrics[f"{metric.metric}_candidate"] = metric.candidate
        if metric.ratio is not None:
            metrics[f"{metric.metric}_ratio"] = metric.ratio
    return metrics


def _message(verdict: PairedVerdict, release_id: str, details: dict[str, Any]) -> str:
    text = (f"no regression against live release {release_id} (margin "
            f"{verdict.margin:.0%}, {verdict.rounds} rounds side by side)")
    if is_same_release(details.get("same") or {}):
        text += "; same model, config and served files as the live release"
    return text
