"""The live release started ahead of the regression stage, so that its start is not on
the side-by-side check's bill.

The runner calls `begin` once the candidate is ready (its cold start measured), when the
regression stage will run: the live release is looked up and started then, from the main
thread (a server's parent-death signal follows the thread that started it), and waited
for in a background thread while the candidate's parity and latency warm-up run. The
latency stage waits for it before its first measured window (`RunContext.quiet`), so no
measured window shares the machine with a booting server; only parity and the warm-up,
which measure nothing, do. On the example this takes the live release's 3-4 s start off
the check (TorchServe's 5-10 s in part).

`begin` never fails the run: a live release it cannot start is kept, as its reason, for
the regression stage to fail closed with; anything it cannot look up is left to the
stage, which looks again and says why. The stage uses the head start only for the
release that is still live when it runs.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from pipeline.context import RunContext
from pipeline.errors import PipelineError
from pipeline.regression.live_serving import LiveUnservable, ServedLive, launch_live
from pipeline.release.manifest import read_manifest
from pipeline.release.regression import live_release
from pipeline.release.store import store_for


@dataclass(frozen=True)
class HeadStart:
    """The live release `release_id`, started ahead: its readiness (`ready`), or why it
    could not be started (`problem`)."""

    release_id: str
    ready: Future[ServedLive] | None = None
    problem: LiveUnservable | None = None

    def served(self) -> ServedLive:
        """The live release, ready; LiveUnservable says why it is not."""
        if self.problem is not None:
            raise self.problem
        assert self.ready is not None
        return self.ready.result()


def not_needed(ctx: RunContext) -> str | None:
    """Why this run measures no live release side by side (None: it does, if one is live)."""
    settings = ctx.loaded.spec.stages.regression
    if not settings.gate:
        return "the regression check is off (stages.regression.gate)"
    if settings.against != "side_by_side":
        return "decided on the recorded run (stages.regression.against: recorded)"
    if (ctx.promote_to or ctx.loaded.environment) is None:
        return "no target environment"
    return None


def begin(ctx: RunContext) -> None:
    """Start the live release of the target environment, if the check will measure one."""
    environment = ctx.promote_to or ctx.loaded.environment
    if not_needed(ctx) is not None or environment is None:
        return
    try:
        store = store_for(ctx.loaded)
        live = live_release(store, ctx.loaded.spec.name, environment)
        if live.problem is not None or live.release_id is None:
            return
        manifest = read_manifest(store, ctx.loaded.spec.name, live.release_id)
    except (PipelineError, OSError):
        return
    try:
        launched = launch_live(ctx, store, manifest)
    except LiveUnservable as exc:
        ctx.keep_run_scoped(HeadStart(live.release_id, problem=exc))
        return
    except Exception as exc:  # a fault no path foresaw: the stage fails closed with it
        ctx.keep_run_scoped(HeadStart(live.release_id, problem=LiveUnservable(
            f"cannot be started: {type(exc).__name__}: {exc}")))
        return
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-release")
    ready = executor.submit(launched.ready, ctx.loaded.spec.stages.readiness.timeout.seconds)
    executor.shutdown(wait=False)
    ctx.keep_run_scoped(HeadStart(live.release_id, ready=ready))
    ctx.quiet_before_measuring(ready, "the live release's start")
