"""Every contact `compare` has with APIs that other work is still changing, in one place:
building and serving a spec (pipeline/servers), parity and the failure probes (the
parity stage, run through the runner on a server that is already up), preflight, and
`tune` (`--tuned`). Adapt these functions, and compare follows."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.context import RunContext
from pipeline.model.source import ResolvedSource, resolve_model_source
from pipeline.preflight import Check, PreflightFailed, Scope, run_checks
from pipeline.runner import new_run_id, run_pipeline
from pipeline.servers import server_kind
from pipeline.servers.base import BuiltArtifact, ModelServer
from pipeline.servers.ports import loopback_ports
from pipeline.servers.stop_alongside import stop_alongside
from pipeline.spec.models import LoadedSpec
from pipeline.stage_result import StageResult
from pipeline.tune.search import run_tune, settings_for

COMPARE_SCOPE = Scope(environment=None, starts_server=True, reads_source=True,
                      publishes=False)


@dataclass
class Served:
    server: ModelServer
    artifact: BuiltArtifact
    source: ResolvedSource
    cold_start_s: float


def preflight(specs: list[LoadedSpec], env: Mapping[str, str]) -> None:
    """Every kind's checks before anything starts; all problems at once (e.g. a missing
    java for TorchServe names what to install)."""
    failed: list[Check] = []
    for loaded in specs:
        kind = loaded.spec.server.kind
        failed += [Check(f"{kind}: {c.name}", c.status, c.detail, c.exit_kind)
                   for c in run_checks(loaded, env, COMPARE_SCOPE) if c.status == "failed"]
    if failed:
        raise PreflightFailed(failed)


def serve(loaded: LoadedSpec, folder: Path, env: Mapping[str, str],
          resources: ExitStack) -> Served:
    """Build the kind's artifact, start it on free loopback ports and wait until ready.
    The server is stopped when `resources` closes (also on errors and Ctrl-C)."""
    source = resolve_model_source(loaded, folder / "model-source")
    kind = server_kind(loaded.spec.server.kind)
    artifact = kind.build(loaded, source.file, folder)
    server = kind.launch(loaded, artifact, loopback_ports(kind.port_names), folder, env)
    # As the start and readiness stages do: start, then the one readiness loop (timed:
    # the cold start). When `resources` close, its graceful stop runs alongside the other
    # kind's (each is mostly waiting), not after it.
    stop_alongside(resources, server)
    server.start()
    cold_start_s = server.wait_ready(loaded.spec.stages.readiness.timeout.seconds)
    return Served(server, artifact, source, cold_start_s)


def parity(loaded: LoadedSpec, served: Served, folder: Path,
           env: Mapping[str, str]) -> StageResult:
    """The parity stage (outputs against the in-process reference, then the failure
    probes) on the running server, through the runner; its record.json lands in
    `folder`. The server stays up: the runner closes only its own resources."""
    with ExitStack() as own:
        ctx = RunContext(loaded=loaded, run_id=new_run_id(), run_dir=folder, env=dict(env),
                         resources=own, server=served.server, model_source=served.source)
        ctx.preload_reference(served.source.file)
        record = run_pipeline(ctx, command="compare", selected=frozenset({"parity"}))
    return next(stage for stage in record.stages if stage.name == "parity")


def tuned(loaded: LoadedSpec, folder: Path, env: Mapping[str, str],
          announce: Callable[[str], None]) -> tuple[LoadedSpec, dict[str, Any]]:
    """`tune` for one kind (its search space, budget and SLO from the spec's `tune:` block
    and defaults), and the spec at the config it recommends; the spec as written, and why,
    when no config met the SLO. The tune record lands in `folder`."""
    folder.mkdir(parents=True)
    outcome = run_tune(loaded, folder, env, settings_for(loaded, None), report=announce)
    winner = outcome.winner
    info: dict[str, Any] = {"budget_exhausted": outcome.budget_exhausted,
                            "configs_measured": len(outcome.candidates),
                            "space_size": len(outcome.space),
                            "baseline": outcome.baseline.config.label
                            if outcome.baseline else None,
                            # What the pick's intervals were widened by (tune's drift.py).
                            "drift": outcome.drift.to_json() if outcome.drift else None}
    if winner is None:
        info.update(config=None, note="no config met the SLO: compared as written")
        return loaded, info
    info.update(config=winner.config.label, throughput_rps=winner.throughput)
    return winner.config.applied(loaded), info
