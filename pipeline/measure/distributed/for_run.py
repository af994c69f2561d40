"""Which stages of a run send their load from several workers, and the run's Ray cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.measure.distributed.ray_support import require_ray
from pipeline.measure.distributed.reach import unreachable
from pipeline.measure.distributed.run import LoadCluster
from pipeline.measure.distributed.shard import resolve_workers

if TYPE_CHECKING:
    from pipeline.context import RunContext

DISTRIBUTED_STAGES = ("latency", "saturation")


def workers_for(ctx: RunContext, stage: str) -> int:
    """How many processes send `stage`'s load (1 for a stage without the setting)."""
    if stage not in DISTRIBUTED_STAGES:
        return 1
    return resolve_workers(getattr(ctx.loaded.spec.stages, stage).workers)


def cluster_for(ctx: RunContext, stage: str) -> LoadCluster | None:
    """The run's load cluster when `stage` has more than one worker; started on first use
    and ended with the run's resources. UsageError (exit 2) when Ray is not installed."""
    workers = workers_for(ctx, stage)
    if workers == 1:
        return None
    require_ray(f"stages.{stage}.workers", workers)
    cluster = ctx.run_scoped(LoadCluster)
    if cluster is None:
        from pipeline.measure.distributed.run import LoadWorkerLost

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
