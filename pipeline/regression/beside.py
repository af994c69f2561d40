"""The live release beside the candidate: found, checked and started once per run.

When the regression check runs side by side and the run goes on to the regression stage,
the latency stage starts the live release while the candidate warms up (that start runs
in the background; the candidate's warm-up only sizes the windows), warms it up in turn,
and makes its windows of paired rounds (side_by_side.candidate_window): the candidate's
share of those rounds is the latency stage's measurement, so the check adds the live
release's warm-up and windows, what of its start the warm-up did not hide, and the
rounds its verdict still needs after the latency stage. Whichever stage asks first
prepares it (`live_beside`); the other finds it in the run context. A live release that
cannot be read, checked or started, or that dies on the way, is a `problem`: the latency
stage goes on alone and the regression stage fails closed with it.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from pipeline.context import RunContext
from pipeline.errors import PipelineError, ServerError, StoreError, UsageError
from pipeline.measure.load_result import LoadResult
from pipeline.measure.sender import LoadSender
from pipeline.measure.targets import spec_target
from pipeline.regression.gates import same_bytes
from pipeline.regression.live_serving import LiveUnservable, ServedLive, serve_live
from pipeline.regression.settings import paired_settings
from pipeline.regression.side_by_side import (
    CANDIDATE,
    CANDIDATE_WARMUP_S,
    LIVE,
    PairedRounds,
    ServerDied,
    SideBySideLoad,
    candidate_window,
)
from pipeline.release.manifest import read_manifest
from pipeline.release.regression import live_release
from pipeline.release.store import store_for

REGRESSION_STAGE = "regression"


@dataclass
class LiveBeside:
    """What the run knows of the live release: `release_id` None when nothing is live,
    `problem` when it cannot be served (or died), else `served`; `rounds` once measuring
    side by side has begun."""

    release_id: str | None
    details: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None
    served: ServedLive | None = None
    rounds: PairedRounds | None = None

    def latency_note(self) -> dict[str, Any]:
        """What the latency stage's record says of its windows' live share."""
        return {"live_release_id": self.release_id, "problem": self.problem,
                "rounds": 0 if self.rounds is None else self.rounds.in_latency_stage}

    def lost(self, reason: str) -> None:
        """The live release died: the check fails closed with `reason`."""
        self.problem, self.rounds = reason, None


def why_not_side_by_side(ctx: RunContext) -> str | None:
    """Why the regression check does not serve the live release in this run, if so."""
    settings = ctx.loaded.spec.stages.regression
    if not settings.gate:
        return "the regression check is off (stages.regression.gate)"
    if settings.against != "side_by_side":
        return "decided on the recorded run (stages.regression.against: recorded)"
    if (ctx.promote_to or ctx.loaded.environment) is None:
        return "no target environment"
    return None


def live_beside(ctx: RunContext) -> LiveBeside:
    """The run's live release beside the candidate, prepared (and started) on first ask."""
    known = ctx.run_scoped(LiveBeside)
    if known is not None:
        return known
    prepared = _prepare(ctx)
    ctx.keep_run_scoped(prepared)
    return prepared


def _prepare(ctx: RunContext) -> LiveBeside:
    environment = ctx.promote_to or ctx.loaded.environment
    assert environment is not None
    try:
        store = store_for(ctx.loaded)
        live = live_release(store, ctx.loaded.spec.name, environment)
    except PipelineError as exc:
        return LiveBeside(None, {"environment": environment, "live_release_id": None},
                          f"the {environment} release cannot be read: {exc}")
    details: dict[str, Any] = {"environment": environment, "live_release_id": live.release_id}
    beside = LiveBeside(live.release_id, details)
    if live.problem is not None or live.release_id is None:
        beside.problem = live.problem
        return beside
    try:
        manifest = read_manifest(store, ctx.loaded.spec.name, live.release_id)
    except (UsageError, StoreError) as exc:
        beside.problem = f"live release {live.release_id}: {exc}"
        return beside
    details["same"] = same_bytes(ctx.require_build(), manifest)
    try:
        beside.served = serve_live(ctx, store, manifest)
    except LiveUnservable as exc:
        beside.problem = f"live release {live.release_id} {exc}"
    return beside


def paired_rounds(ctx: RunContext, served: ServedLive, sender: LoadSender,
                  announce: Callable[[str], None]) -> PairedRounds:
    """Rounds of the candidate (the run's server) and `served`, at the latency stage's
    concurrency, in the regression stage's windows, judged by its paired verdict."""
    spec = ctx.loaded.spec
    stage, latency = spec.stages.regression, spec.stages.latency
    load = SideBySideLoad(sender, latency.concurrency, latency.warmup.seconds,
                          stage.window.seconds)
    servers = {CANDIDATE: ctx.require_server(), LIVE: served.server}
    targets = {who: spec_target(ctx.loaded, server) for who, server in servers.items()}
    return PairedRounds(load, servers, targets, paired_settings(stage, spec.slo.p99.ms),
                        announce)


def begin_in_latency_stage(ctx: RunContext) -> Future[LiveBeside] | None:
    """Where the regression stage will serve the live release side by side: its start,
    begun in the background, so that it overlaps the candidate's warm-up (whose figures
    only size the latency stage's windows). `ready_in_latency_stage` finishes it."""
    if REGRESSION_STAGE not in ctx.planned or why_not_side_by_side(ctx) is not None:
        return None
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-release")
    starting = executor.submit(live_beside, ctx)
    executor.shutdown(wait=False)
    return starting


def settle(starting: Future[LiveBeside] | None) -> None:
    """Wait for a start begun in the background, whatever became of it, so that a server
    it starts is among the run's resources before they are closed (Ctrl-C, a failure)."""
    if starting is not None:
        wait([starting])


def ready_in_latency_stage(ctx: RunContext, starting: Future[LiveBeside] | None,
                           sender: LoadSender, announce: Callable[[str], None],
                           ) -> LiveBeside | None:
    """The live release begun by `begin_in_latency_stage`, warmed up (the latency stage's
    warm-up) and the candidate again briefly after it, its rounds ready for the latency
    stage's windows; None when the check does not serve it in this run."""
    if starting is None:
        return None
    beside = starting.result()
    if beside.served is None:
        return beside
    rounds = paired_rounds(ctx, beside.served, sender, announce)
    try:
        rounds.warm_up(rounds.load.warmup_s, min(rounds.load.warmup_s, CANDIDATE_WARMUP_S))
    except ServerDied as exc:
        if exc.who == CANDIDATE:
            raise ServerError(str(exc).split(": ", 1)[-1]) from None
        beside.lost(f"live release {beside.release_id} died: {exc}")
        return beside
    beside.rounds = rounds
    return beside


def window_measurer(beside: LiveBeside | None, plain: Callable[[float, str], LoadResult],
                    ) -> Callable[[float, str], LoadResult]:
    """How the latency stage measures a window: made of paired rounds while `beside` has
    rounds whose verdict is open, else `plain`. A live release that dies there is lost
    (the regression stage fails closed) and the window is measured again, plain."""

    def measure(duration_s: float, label: str) -> LoadResult:
        rounds = None if beside is None else beside.rounds
        if beside is None or rounds is None or rounds.done:
            return plain(duration_s, label)
        try:
            return candidate_window(rounds, duration_s,
                                    lambda seconds: plain(seconds, label))
        except ServerDied as exc:
            beside.lost(f"live release {beside.release_id} died: {exc}")
            return plain(duration_s, label)

    return measure
