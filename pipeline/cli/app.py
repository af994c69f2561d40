"""The command line: thin Typer commands over the core; errors and exit codes in one place."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.text import Text

from pipeline.cli.github import annotate, job_summary
from pipeline.cli.progress import LiveView
from pipeline.cli.tune import tune_command
from pipeline.context import RunContext
from pipeline.errors import (
    Interrupted,
    PipelineError,
    PipelineFailed,
    UsageError,
)
from pipeline.model.source import resolve_model_source
from pipeline.record import load_run_record, runs_dir
from pipeline.release.identity import acting_identity, acting_user, claimed_name, names_of
from pipeline.release.manifest import list_releases, read_manifest
from pipeline.release.pointers import read_pointer, rollback
from pipeline.release.promotion import (
    CheckedPromotion,
    approve,
    check_new_release_approval,
    check_promotion,
    counted_approvers,
    creator_names,
    promote_existing,
)
from pipeline.release.store import store_for
from pipeline.release.store.base import Store
from pipeline.release.verify import verify_store
from pipeline.report.formats import Format, baseline_for, render
from pipeline.report.terminal import render_terminal
from pipeline.runner import STAGES, new_run_id, run_pipeline, stages_to_run
from pipeline.servers.base import ModelServer
from pipeline.servers.torchserve.server import TorchServeEndpoint
from pipeline.servers.triton.server import TritonEndpoint
from pipeline.spec.loading import load_spec
from pipeline.spec.models import LoadedSpec, json_schema

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Take a trained model to production through measured gates.")
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 140)

SpecFile = Annotated[Path, typer.Option("--file", "-f", help="The spec (default ./serve.yaml).")]
Actor = Annotated[str | None, typer.Option("--by", help="The name to record (default: "
                                                        "$GITHUB_ACTOR in GitHub Actions, else "
                                                        "user@host). Events also record who "
                                                        "actually ran the command.")]
DEFAULT_SPEC = Path("serve.yaml")


def _actor(by: str | None) -> str:
    return claimed_name(by, os.environ)


def _identity(store: Store) -> dict[str, Any]:
    """Who runs this command (recorded in every audit event it writes)."""
    return acting_identity(dict(os.environ), store)


def _load(path: Path, environment: str | None) -> LoadedSpec:
    return load_spec(path, environment)


@app.command()
def validate(file: SpecFile = DEFAULT_SPEC,
             env: Annotated[str | None, typer.Option("--env", help="Merge this environment's "
                                                     "overlay first.")] = None) -> None:
    """Check a spec (and an environment overlay); exit 2 with file:line:col on errors."""
    loaded = _load(file, env)
    spec = loaded.spec
    queue = spec.slo.queue_budget()
    out.print(f"{' + '.join(loaded.files)}: valid ({spec.name}, {spec.server.kind}, "
              f"queue budget {queue} for max_queue_delay "
              f"{spec.server.batching.max_queue_delay})")


@app.command()
def schema() -> None:
    """Print the JSON schema of serve.yaml version 1."""
    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")


def _execute(file: Path, environment: str | None, promote_to: str | None, by: str | None,
             command: str, approved_by: str | None = None,
             promotion: CheckedPromotion | None = None,
             selected: frozenset[str] | None = None,
             attach: Callable[[LoadedSpec], ModelServer] | None = None) -> None:
    loaded = _load(file, environment)
    stages_to_run(selected, attached=attach is not None)   # refuse a bad selection early
    run_id = new_run_id()
    run_dir = runs_dir(loaded.workspace) / run_id
    run_dir.mkdir(parents=True)
    title = (f"{command} {environment or ''} · {loaded.spec.name} · run {run_id}").replace(
        "  ", " ")
    with ExitStack() as resources, LiveView(out, [s.NAME for s in STAGES], title) as view:
        ctx = RunContext(loaded=loaded, run_id=run_id, run_dir=run_dir, env=dict(os.environ),
                         resources=resources, progress=view, promote_to=promote_to,
                         actor=_actor(by), approved_by=approved_by, promotion=promotion)
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
    out.print(render_terminal(record))
    _write_reports(loaded, record, run_dir)
    out.print(f"record: {run_dir / 'record.json'}  report: {run_dir / 'report.html'}")
    if record["status"] != "passed":
        failed = [s for s in record["stages"] if s["status"] == "failed"]
        reason = f"{failed[0]['name']}: {failed[0]['message']}" if failed else "not all passed"
        raise PipelineFailed(f"run {run_id} failed at {reason}")
    if record["release_id"]:
        out.print(f"release {record['release_id']}")


@app.command()
def promote(environment: Annotated[str, typer.Argument(help="Target environment.")],
            file: SpecFile = DEFAULT_SPEC, by: Actor = None,
            release: Annotated[str | None, typer.Option(
                "--release", help="Promote this existing release (no rebuild).")] = None,
            approved_by: Annotated[str | None, typer.Option(
                "--approved-by", help="Record this approval and promote in one step.")] = None,
            note: Annotated[str, typer.Option("--note", help="Kept with the event.")] = "",
            ) -> None:
    """Point ENVIRONMENT at a verified release.

    Without --release, and when the environment requires no other one, this
    builds, verifies and publishes a new release first. An environment whose
    overlay has `requires: [staging]` takes the release current there (or
    --release), never a rebuild, after checking its blobs and its approval.
    """
    loaded = _load(file, environment)
    if loaded.policy.reverify and (release is not None or loaded.policy.requires):
        checked = check_promotion(store_for(loaded), loaded, environment, release, approved_by)
        _execute(file, environment, environment, by, "promote", promotion=checked)
        return
    if release is not None or loaded.policy.requires:
        store = store_for(loaded)
        event = promote_existing(store, loaded, environment, release, _actor(by),
                                 approved_by=approved_by, note=note, actor=_identity(store))
        approvers = ", ".join(event.get("approved_by") or []) or "not required"
        out.print(f"{environment}: {event['previous_release_id'] or 'nothing'} → "
                  f"{event['release_id']} (by {event['by']}; approved: {approvers})")
        out.print(f"release {event['release_id']}")
        return
    creators = names_of(_actor(by), {"user": acting_user(os.environ)})
    check_new_release_approval(loaded, environment, approved_by, creators)
    _execute(file, environment, environment, by, "promote", approved_by)


@app.command(name="approve")
def approve_command(release_id: str, file: SpecFile = DEFAULT_SPEC,
                    env: Annotated[str, typer.Option(
                        "--env", help="The environment the approval is for.")] = "production",
                    by: Actor = None,
                    note: Annotated[str, typer.Option("--note")] = "",
                    yes: Annotated[bool, typer.Option(
                        "--yes", help="Do not ask (scripts, CI).")] = False) -> None:
    """Show RELEASE_ID's verification report and record an approval for an environment."""
    loaded = _load(file, env)
    store = store_for(loaded)
    approver = _actor(by)
    manifest = read_manifest(store, loaded.spec.name, release_id)
    counted_approvers(loaded, env, f"release {release_id}", creator_names(manifest), [approver])
    out.print(render_terminal(_find_record(loaded, release_id)))
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("approve asks for confirmation; pass --yes when not at a terminal")
        if not typer.confirm(f"Approve release {release_id} for {env}?"):
            raise UsageError("not approved")
    entry = approve(store, loaded.spec.name, release_id, env, approver, note,
                    actor=_identity(store))
    out.print(f"approved {release_id} for {env} by {entry['by']} at {entry['at']}")


Stages = Annotated[str | None, typer.Option(
    "--stages", help="Comma-separated subset: readiness, parity, latency, saturation.")]


def _selection(stages: str | None) -> frozenset[str] | None:
    if stages is None:
        return None
    return frozenset(name.strip() for name in stages.split(",") if name.strip())


@app.command(name="run")
def run_command(file: SpecFile = DEFAULT_SPEC,
                env: Annotated[str | None, typer.Option("--env", help="Environment overlay to "
                                                        "verify against.")] = None,
                by: Actor = None, stages: Stages = None) -> None:
    """Run every stage and publish the release, without moving any environment pointer.

    With --stages, run only those (plus build, start and readiness): a re-measurement
    that publishes nothing.
    """
    _execute(file, env, None, by, "run", selected=_selection(stages))


@app.command()
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
            ) -> None:
    """Measure a server that is already running (nothing is built, started or published).

    The spec gives the model's name, tensors and the gates; the server kind is the spec's.
    """

    def attach(loaded: LoadedSpec) -> ModelServer:
        if loaded.spec.server.kind == "triton":
            return TritonEndpoint(loaded, url, grpc_url)
        if management_url is None or metrics_url is None:
            raise UsageError("measuring TorchServe needs --management-url and --metrics-url")
        return TorchServeEndpoint(loaded, url, management_url, metrics_url, key_file)

    _execute(file, env, None, None, "measure", selected=_selection(stages), attach=attach)


@app.command(name="rollback")
def rollback_command(environment: str, file: SpecFile = DEFAULT_SPEC,
                     to: Annotated[str | None, typer.Option("--to", help="Release id (default: "
                                                            "the one before).")] = None,
                     by: Actor = None) -> None:
    """Point ENVIRONMENT back at an earlier release after checking its blobs."""
    loaded = _load(file, environment)
    store = store_for(loaded)
    event = rollback(store, loaded.spec.name, environment, to, _actor(by),
                     actor=_identity(store))
    out.print(f"{environment}: {event['previous_release_id']} → {event['release_id']} "
              f"(rollback by {event['by']})")


@app.command()
def history(environment: str, file: SpecFile = DEFAULT_SPEC,
            output: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
            ) -> None:
    """What happened to ENVIRONMENT: every promote and rollback, newest last."""
    loaded = _load(file, environment)
    store = store_for(loaded)
    pointer, _ = read_pointer(store, loaded.spec.name, environment)
    if output == "json":
        body = {"environment": environment, "current": pointer.current,
                "events": pointer.events}
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"{loaded.spec.name} / {environment}: current {pointer.current or '-'}",
                  title_justify="left")
    for column in ("at", "action", "release", "previous", "by", "run by", "approved by"):
        table.add_column(column)
    for event in pointer.events:
        table.add_row(event["at"], event["action"], event["release_id"],
                      event.get("previous_release_id") or "-", event["by"],
                      str((event.get("actor") or {}).get("user") or "-"),
                      ", ".join(event.get("approved_by") or []) or "-")
    out.print(table)


@app.command()
def report(identifier: Annotated[str, typer.Argument(metavar="RUN_ID|RELEASE_ID")],
           file: SpecFile = DEFAULT_SPEC,
           output: Annotated[Format, typer.Option(
               "--format", help="terminal, json, html (one offline file), svg, markdown "
               "(also appended to $GITHUB_STEP_SUMMARY when set)")] = "terminal",
           ) -> None:
    """Show a run's record, or the record a release was verified with."""
    loaded = _load(file, None)
    record = _find_record(loaded, identifier)
    if output == "terminal":
        out.print(render_terminal(record))
        return
    baseline = baseline_for(store_for(loaded), loaded.spec.name, record) \
        if output in ("html", "markdown") else None
    text = render(record, output, baseline)
    sys.stdout.write(text)
    if output == "markdown":
        job_summary(text)


app.command(name="tune")(tune_command)

store_app = typer.Typer(help="Inspect the release store.", no_args_is_help=True)
app.add_typer(store_app, name="store")


@store_app.command(name="verify")
def store_verify(file: SpecFile = DEFAULT_SPEC,
                 env: Annotated[str | None, typer.Option("--env")] = None,
                 output: Annotated[Literal["table", "json"], typer.Option("--format")] = "table",
                 ) -> None:
    """Check every manifest's blobs (digests) and every pointer; read-only."""
    loaded = _load(file, env)
    store = store_for(loaded)
    check = verify_store(store)
    if output == "json":
        sys.stdout.write(json.dumps(check.to_json(), indent=2) + "\n")
    else:
        for problem in check.problems:
            out.print(Text.assemble(("✗ ", "red"), problem))
        out.print(f"{store.url}: {check.manifests} manifests, {check.blobs} blobs, "
                  f"{check.pointers} pointers checked; {len(check.problems)} problems")
    if check.problems:
        raise typer.Exit(1)


@app.command(name="releases")
def releases_command(file: SpecFile = DEFAULT_SPEC,
                     output: Annotated[Literal["table", "json"], typer.Option("--format")] =
                     "table") -> None:
    """The spec's releases in the store, oldest first, with where each is current."""
    loaded = _load(file, None)
    store = store_for(loaded)
    name = loaded.spec.name
    current: dict[str, list[str]] = {}
    for key in store.list(f"environments/{name}/"):
        environment = key.rsplit("/", 1)[-1].removesuffix(".json")
        pointer, _ = read_pointer(store, name, environment)
        if pointer.current:
            current.setdefault(pointer.current, []).append(environment)
    rows = []
    for release_id in list_releases(store, name):
        manifest = read_manifest(store, name, release_id)
        gates = manifest.get("gates", [])
        rows.append({"release_id": release_id, "created_at": manifest.get("created_at"),
                     "created_by": manifest.get("created_by"),
                     "verified_in": manifest.get("verified_in"),
                     "model_sha256": manifest.get("model", {}).get("sha256"),
                     "gates_passed": sum(1 for g in gates if g.get("passed")),
                     "gates": len(gates), "current_in": sorted(current.get(release_id, []))})
    if output == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    from rich.table import Table

    table = Table(title=f"{name} releases in {store.url}", title_justify="left")
    for column in ("release", "created", "by", "verified in", "gates", "current in"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["release_id"], str(row["created_at"]), str(row["created_by"]),
                      str(row["verified_in"] or "-"), f"{row['gates_passed']}/{row['gates']}",
                      ", ".join(row["current_in"]) or "-")
    out.print(table)


def _write_reports(loaded: LoadedSpec, record: dict[str, Any], run_dir: Path) -> None:
    """report.html beside the record (after the run: never inside a measurement window),
    and the job summary when running in GitHub Actions."""
    try:
        baseline = baseline_for(store_for(loaded), loaded.spec.name, record)
    except PipelineError:
        baseline = None
    (run_dir / "report.html").write_text(render(record, "html", baseline), encoding="utf-8")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        job_summary(render(record, "markdown", baseline))


def _find_record(loaded: LoadedSpec, identifier: str) -> dict[str, Any]:
    if (runs_dir(loaded.workspace) / identifier / "record.json").is_file():
        return load_run_record(loaded.workspace, identifier)
    store = store_for(loaded)
    try:
        manifest = read_manifest(store, loaded.spec.name, identifier)
    except UsageError:
        raise UsageError(f"{identifier}: neither a run under {runs_dir(loaded.workspace)} nor "
                         f"a release of '{loaded.spec.name}' in {store.url}") from None
    run_id = manifest.get("run_id", "")
    if (runs_dir(loaded.workspace) / run_id / "record.json").is_file():
        return load_run_record(loaded.workspace, run_id)
    blob = next((b for b in manifest["blobs"] if b["role"] == "verification"), None)
    if blob is None:
        raise UsageError(f"release {identifier} carries no verification record")
    verification: dict[str, Any] = json.loads(store.read_blob(blob["digest"]))
    return {"run_id": run_id, "status": "passed", "environment": manifest.get("verified_in"),
            "spec_digest": manifest.get("spec_digest"), "release_id": identifier,
            "stages": verification["stages"]}


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """Entry point: one place turns errors into messages and exit codes."""
    signal.signal(signal.SIGTERM, _terminate)
    err = Console(stderr=True, highlight=False)
    try:
        app(args=argv, prog_name="serve-pipeline")
    except PipelineError as exc:
        for line in exc.lines():
            err.print(Text.assemble(("error: ", "bold red"), line), soft_wrap=True)
        if os.environ.get("GITHUB_ACTIONS") == "true":
            annotate(exc)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
