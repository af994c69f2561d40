"""What the stages that send load read from their run: each request's timeout, the
progress view, and the run's Ray load cluster for a stage sent from several workers.
A helper of the stages, not a stage (the runner's STAGES lists those)."""

from __future__ import annotations

from typing import Any

from pipeline.context import RunContext
from pipeline.measure.distributed.ray_support import require_ray
from pipeline.measure.distributed.reach import unreachable
from pipeline.measure.distributed.run import LoadCluster, LoadWorkerLost
from pipeline.measure.distributed.shard import resolve_workers
from pipeline.measure.sender import LoadSender, Shards

DISTRIBUTED_STAGES = ("latency", "replay", "saturation")


def sender_for(ctx: RunContext, stage: str) -> LoadSender:
    """How `stage` sends its windows: the latency stage's request timeout, progress shown
    under `stage`, from the run's load workers when the stage has more than one."""

    def progress(done_s: float, total_s: float, label: str) -> None:
        ctx.progress(stage, done_s, total_s, label)

    workers = workers_for(ctx, stage)
    shards = None if workers == 1 else Shards(_cluster(ctx, stage, workers), workers, stage)
    return LoadSender(ctx.loaded.spec.stages.latency.request_timeout.seconds, progress, shards)


def workers_for(ctx: RunContext, stage: str) -> int:
    """How many processes send `stage`'s load (1 for a stage without the setting)."""
    settings = getattr(ctx.loaded.spec.stages, stage) if stage in DISTRIBUTED_STAGES else None
    return 1 if settings is None else resolve_workers(settings.workers)


def _cluster(ctx: RunContext, stage: str, workers: int) -> LoadCluster:
    """The run's load cluster, started on first use and ended with the run's resources.
    UsageError (exit 2) when Ray is not installed."""
    require_ray(f"stages.{stage}.workers", workers)
    cluster = ctx.run_scoped(LoadCluster)
    if cluster is None:
        most = max(workers_for(ctx, name) for name in DISTRIBUTED_STAGES)
        address = ctx.ray_address or ctx.env.get("RAY_ADDRESS") or None
        why = unreachable(address) if address else None
        if why is not None:
            raise LoadWorkerLost(f"stages.{stage}.workers: the Ray cluster: {why}")
        try:
            cluster = LoadCluster(most, address)
        except Exception as exc:  # Ray's own errors: fail the stage, with Ray's reason
            where = f"join the Ray cluster at {address}" if address else "start a local Ray"
            raise LoadWorkerLost(f"stages.{stage}.workers: could not {where} "
                                 f"({type(exc).__name__}: {exc})".splitlines()[0]) from None
        ctx.keep_run_scoped(cluster)
        ctx.resources.callback(cluster.close)
    return cluster


def load_workers_record(ctx: RunContext, stage: str) -> list[dict[str, Any]] | None:
    """Per worker over the stage's windows: requests, CPU, worst lag p99, client-bound."""
    cluster = ctx.run_scoped(LoadCluster)
    if cluster is None or workers_for(ctx, stage) == 1:
        return None
    return cluster.rows_for(stage)
