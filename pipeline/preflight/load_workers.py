"""Load from several workers needs Ray: say so before anything starts."""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.measure.distributed.ray_support import missing_ray, ray_installed
from pipeline.measure.distributed.reach import unreachable
from pipeline.measure.distributed.shard import resolve_workers
from pipeline.preflight.checks import Check
from pipeline.spec.models import LoadedSpec


def load_worker_checks(loaded: LoadedSpec, env: Mapping[str, str]) -> list[Check]:
    stages = loaded.spec.stages
    wanted = {f"stages.{name}.workers": resolve_workers(settings.workers)
              for name, settings in (("latency", stages.latency),
                                     ("saturation", stages.saturation))}
    sharded = {key: workers for key, workers in wanted.items() if workers > 1}
    if not sharded:
        return []          # one load process per stage, as always: nothing to check
    if not ray_installed():
        key, workers = next(iter(sharded.items()))
        return [Check.failed("load workers", missing_ray(key, workers))]
    address = env.get("RAY_ADDRESS")
    why = unreachable(address) if address else None
    if why is not None:
        return [Check.failed("load workers", f"RAY_ADDRESS: {why}")]
    where = f"on the Ray cluster at {address}" if address else "on a local Ray"
    return [Check.ok("load workers", ", ".join(f"{key}: {workers}"
                                               for key, workers in sharded.items())
                     + f" ({where})")]
