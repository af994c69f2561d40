"""`promote`, `run` and `measure`: the commands that run the stages."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.cli.common import (
    DEFAULT_SPEC,
    Actor,
    SpecFile,
    acting,
    actor_name,
    out,
    print_move,
)
from pipeline.errors import Interrupted, PipelineFailed, UsageError

if TYPE_CHECKING:
    from pipeline.release.policy import Decision
    from pipeline.servers.base import ModelServer
    from pipeline.spec.models import LoadedSpec


def _execute(file: Path, environment: str | None, promote_to: str | None, by: str | None,
             command: str, approved_by: str | None = None,
             promotion: Decision | None = None,
             selected: frozenset[str] | None = None,
             attach: Callable[[LoadedSpec], ModelServer] | None = None,
             ray_address: str | None = None) -> None:
    from pipeline.cli.progress import ProgressView
    from pipeline.cli.records import write_reports
    from pipeline.context import RunContext
    from pipeline.model.source import resolve_model_source
    from pipeline.record import runs_dir
    from pipeline.report.terminal import render_terminal
    from pipeline.runner import STAGES, new_run_id, run_pipeline, stages_to_run
    from pipeline.servers.specs import load_spec
    loaded = load_spec(file, environment)
    stages_to_run(selected, attached=attach is not None)   # refuse a bad selection early
    run_id = new_run_id()
    run_dir = runs_dir(loaded.workspace) / run_id
    run_dir.mkdir(parents=True)
    title = (f"{command} {environment or ''} · {loaded.spec.name} · run {run_id}").replace(
        "  ", " ")
    with ExitStack() as resources, ProgressView(out(), [s.NAME for s in STAGES], title) as view:
        ctx = RunContext(loaded=loaded, run_id=run_id, run_dir=run_dir, env=dict(os.environ),
                         resources=resources, progress=view, promote_to=promote_to,
                         actor=actor_name(by), approved_by=approved_by, promotion=promotion,
                         ray_address=ray_address)
        if attach is not None:
            ctx.server = attach(loaded)
            if selected is None or "parity" in selected:
                source = resolve_model_source(loaded, run_dir / "model-source")
                ctx.model_source = source
                ctx.preload_reference(source.file)
        try:
            record = run_pipeline(ctx, view, command=command, selected=selected)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted: the server was stopped and nothing was promoted "
                              f"(record: {run_dir / 'record.json'})") from None
    out().print(render_terminal(record))
    write_reports(loaded, record, run_dir)
    out().print(f"record: {run_dir / 'record.json'}  report: {run_dir / 'report.html'}")
    if record.status != "passed":
        failed = record.first_failed_stage()
        reason = f"{failed.name}: {failed.message}" if failed else "not all passed"
        kind = (failed.exit_code or 1) if failed else 1
        raise PipelineFailed(f"run {run_id} failed at {reason}", kind)
    if record.release_id:
        out().print(f"release {record.release_id}")


def promote(environment: Annotated[str, typer.Argument(help="Target environment.")],
            file: SpecFile = DEFAULT_SPEC, by: Actor = None,
            release: Annotated[str | None, typer.Option(
                "--release", help="Promote this existing release (no rebuild).")] = None,
            approved_by: Annotated[str | None, typer.Option(
                "--approved-by", hidden=True, help="Refused: a typed name is not an "
                "approval (`serve-pipeline approve RELEASE --key KEY` signs one).")] = None,
            note: Annotated[str, typer.Option("--note", help="Kept with the event.")] = "",
            ray_address: RayAddress = None,
            ) -> None:
    """Point ENVIRONMENT at a verified release.

    Without --release, and when the environment requires no other one, this
    builds, verifies and publishes a new release first. An environment whose
    overlay has `requires: [staging]` takes the release current there (or
    --release), never a rebuild, after every check of the promotion policy: its
    blobs and signed attestation, the environments it requires, this
    environment's gates on its recorded results, and signed approvals.
    """
    from pipeline.release.policy import commit, decide_new_release, decide_promotion
    from pipeline.release.store import store_for
    from pipeline.servers.specs import load_spec
    loaded = load_spec(file, environment)
    if release is not None or loaded.policy.requires:
        store = store_for(loaded)
        decision = decide_promotion(store, loaded, environment, release, approved_by)
        for line in decision.notes:
            out().print(f"note: {line}")
        if loaded.policy.reverify:
            _execute(file, environment, environment, by, "promote", promotion=decision,
                     ray_address=ray_address)
            return
        source = ", ".join(loaded.policy.requires) or decision.manifest.verified_in or "a run"
        moved = commit(store, loaded.spec.name, decision, actor_name(by),
                       note or f"from {source}", actor=acting(store))
        print_move(environment, moved)
        return
    decide_new_release(loaded, environment, approved_by, os.environ)
    _execute(file, environment, environment, by, "promote", approved_by,
             ray_address=ray_address)


RayAddress = Annotated[str | None, typer.Option(
    "--ray-address", help="The Ray cluster that runs the load workers (stages.*.workers > 1); "
    "default: RAY_ADDRESS, else a local Ray started for the run.")]
Stages = Annotated[str | None, typer.Option(
    "--stages", help="Comma-separated subset: readiness, parity, latency, replay, saturation.")]


def _selection(stages: str | None) -> frozenset[str] | None:
    if stages is None:
        return None
    chosen = frozenset(name.strip() for name in stages.split(",") if name.strip())
    if not chosen:
        # An empty selection would start a server, measure nothing and pass.
        raise UsageError("--stages: name at least one of readiness, parity, latency, replay, "
                         "saturation")
    return chosen


def run_command(file: SpecFile = DEFAULT_SPEC,
                env: Annotated[str | None, typer.Option("--env", help="Environment overlay to "
                                                        "verify against.")] = None,
                by: Actor = None, stages: Stages = None,
                ray_address: RayAddress = None) -> None:
    """Run every stage and publish the release, without moving any environment pointer.

    With --stages, run only those (plus build, start and readiness): a re-measurement
    that publishes nothing.
    """
    _execute(file, env, None, by, "run", selected=_selection(stages), ray_address=ray_address)


def measure(url: Annotated[str, typer.Option("--url", help="The running server: Triton's "
                                              "HTTP URL or TorchServe's inference URL.")],
            file: SpecFile = DEFAULT_SPEC,
            env: Annotated[str | None, typer.Option("--env")] = None,
            stages: Stages = "latency,saturation",
            grpc_url: Annotated[str | None, typer.Option(
                "--grpc-url", help="Triton's gRPC host:port (for protocol: grpc).")] = None,
            management_url: Annotated[str | None, typer.Option(
                "--management-url", help="TorchServe's management API (readiness).")] = None,
            metrics_url: Annotated[str | None, typer.Option(
                "--metrics-url", help="TorchServe's metrics API (server-side numbers).")] = None,
            key_file: Annotated[Path | None, typer.Option(
                "--key-file", help="TorchServe's key_file.json (token authorization).")] = None,
            ray_address: RayAddress = None,
            ) -> None:
    """Measure a server that is already running (nothing is built, started or published).

    The spec gives the model's name, tensors and the gates; the server kind is the spec's.
    """
    from pipeline.servers import server_kind
    from pipeline.servers.base import RunningEndpoints

    def attach(loaded: LoadedSpec) -> ModelServer:
        return server_kind(loaded.spec.server.kind).attach(
            loaded, RunningEndpoints(url, grpc_url, management_url, metrics_url, key_file))

    _execute(file, env, None, None, "measure", selected=_selection(stages), attach=attach,
             ray_address=ray_address)
