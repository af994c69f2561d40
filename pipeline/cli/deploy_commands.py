"""`materialize`, `export kserve`, `export argo` and `serve`: a release as a server, a
cluster or this host takes it, and the canary analysis that judges it there."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.cli.common import DEFAULT_SPEC, SpecFile, out

if TYPE_CHECKING:
    from pipeline.release.manifest_record import Manifest
    from pipeline.release.store.base import Store
    from pipeline.spec.models import LoadedSpec

Target = Annotated[str, typer.Argument(
    metavar="ENV|RELEASE", help="An environment (its live release) or a release id.")]
StoreUrl = Annotated[str | None, typer.Option(
    "--store", help="The store (default: the spec's, after the environment's overlay).")]


def _spec_and_store(file: Path, target: str,
                    store_url: str | None) -> tuple[LoadedSpec, Store]:
    """The spec (after `target`'s overlay, when it is an environment with one) and the
    store it names, or `--store`."""
    from pipeline.release.resolve import is_release_id
    from pipeline.release.store import open_store, store_for
    from pipeline.servers.specs import load_spec
    from pipeline.spec.loading import environment_names
    loaded = load_spec(file, None)
    if not is_release_id(target) and target in environment_names(loaded.workspace):
        loaded = load_spec(file, target)
    return loaded, open_store(store_url, Path.cwd(), create=False) if store_url else store_for(
        loaded, create=False)


def _release(file: Path, target: str, store_url: str | None) -> tuple[Store, Manifest]:
    """The release `target` names, its chain checked (pipeline.release.deployable)."""
    from pipeline.errors import PipelineError
    from pipeline.release.deployable import deployable_release
    from pipeline.servers.specs import load_spec
    from pipeline.spec.loading import environment_names
    loaded, store = _spec_and_store(file, target, store_url)
    known = environment_names(loaded.workspace)

    def overlay(environment: str) -> LoadedSpec | None:
        if environment not in known:
            return None
        try:
            return load_spec(file, environment)
        except PipelineError as exc:
            raise PipelineError(f"environments/{environment}.yaml, whose pointer took this "
                                f"release, cannot be read: {exc}") from None

    return store, deployable_release(store, loaded, target, overlay)


def materialize_command(target: Target,
                        to: Annotated[str, typer.Option(
                            "--to", metavar="DIR|s3://BUCKET/PREFIX",
                            help="Where to write it: a new or empty folder, or an S3 "
                            "prefix.")],
                        file: SpecFile = DEFAULT_SPEC, store_url: StoreUrl = None) -> None:
    """Write a release as its server loads it: a Triton model repository, or TorchServe's
    model-store/ and config/config.properties (KServe's layout), every byte checked
    against the release's digests."""
    from pipeline.release.materialize import materialize
    store, manifest = _release(file, target, store_url)
    done = materialize(store, manifest, to, Path.cwd())
    how = (f"{done.written} of {len(done.files)} files written" if done.written
           else f"already there ({len(done.files)} files)")
    out().print(f"release {done.release_id} ({done.server_kind}) → {done.destination}: {how}")


export_app = typer.Typer(help="Print a release as a deployment target takes it.",
                         no_args_is_help=True, rich_markup_mode=None)


def export_kserve_command(target: Target,
                          storage_uri: Annotated[str | None, typer.Option(
                              "--storage-uri", help="Where the release was materialized "
                              "(default, for an S3 store: <store>/serving/<name>/<release>).")
                          ] = None,
                          canary: Annotated[int | None, typer.Option(
                              "--canary", metavar="PERCENT", min=0, max=100,
                              help="Send this percentage of traffic to the release "
                              "(canaryTrafficPercent); the rest stays on the last ready "
                              "revision.")] = None,
                          file: SpecFile = DEFAULT_SPEC, store_url: StoreUrl = None) -> None:
    """Print a KServe ServingRuntime (the release's image, pinned by digest) and an
    InferenceService for a release, as YAML for `kubectl apply -f -`."""
    import yaml

    from pipeline.export.kserve import export_kserve
    store, manifest = _release(file, target, store_url)
    exported = export_kserve(store, manifest, storage_uri, canary)
    sys.stdout.write(yaml.safe_dump_all(exported.documents(), sort_keys=False))


def serve_command(environment: Annotated[str, typer.Argument(
                      metavar="ENV", help="The environment whose release is served.")],
                  port: Annotated[int | None, typer.Option(
                      "--port", min=0, max=65535, help="The one HTTP port clients use "
                      "(default: the release's production HTTP port, e.g. Triton's 8000).")
                  ] = None,
                  interval: Annotated[float, typer.Option(
                      "--interval", metavar="SECONDS", min=0.1,
                      help="Re-read the pointer this often (and on SIGHUP).")] = 30.0,
                  listen: Annotated[str, typer.Option(
                      "--listen", metavar="ADDRESS", help="The address the port is bound "
                      "on.")] = "0.0.0.0",
                  file: SpecFile = DEFAULT_SPEC, store_url: StoreUrl = None) -> None:
    """Serve the release an environment's pointer is on, here, behind one stable HTTP port;
    when the pointer moves, start the new release beside it and switch only once readiness
    and parity passed on it. SIGHUP re-reads the pointer; SIGTERM or Ctrl-C stops
    everything."""
    from pipeline.host.host import HostSettings, serve_environment
    from pipeline.record import STATE_DIR
    loaded, store = _spec_and_store(file, environment, store_url)

    def say(line: str) -> None:
        out().print(line, markup=False)

    serve_environment(HostSettings(
        store=store, environment=environment, here=loaded, listen=listen, port=port,
        interval_s=interval, folder=loaded.workspace / STATE_DIR / "serve" / environment,
        env=dict(os.environ), say=say))


def export_argo_command(target: Target,
                        judge_image: Annotated[str, typer.Option(
                            "--judge-image", metavar="IMAGE@sha256:DIGEST",
                            help="The image the Job runs `serve-pipeline judge` in, pinned by "
                            "digest: serve-pipeline installed, the spec and its "
                            "representative inputs (stages.parity.data) in it.")],
                        canary_url: Annotated[str | None, typer.Option(
                            "--canary-url", metavar="URL", help="The canary's HTTP endpoint "
                            "(default: none, the Rollout's analysis step passes the "
                            "canary-url argument).")] = None,
                        stable_url: Annotated[str | None, typer.Option(
                            "--stable-url", metavar="URL", help="The stable release's HTTP "
                            "endpoint (default: none, passed as stable-url).")] = None,
                        spec_in_image: Annotated[str, typer.Option(
                            "--spec-in-image", metavar="PATH", help="The spec's path in the "
                            "judge image, as `judge --file` takes it.")] = "serve.yaml",
                        file: SpecFile = DEFAULT_SPEC, store_url: StoreUrl = None) -> None:
    """Print an Argo Rollouts AnalysisTemplate that runs `serve-pipeline judge` as a Job
    (the job provider) against the canary and the stable endpoints, as YAML.

    The Job completes when the judge passes (exit 0: the analysis is Successful) and fails
    at once on a regression or a missed SLO (1), an inconclusive judgement (2) or a bad spec
    (4): Argo reads only whether a Job completed or failed, so an inconclusive canary is
    refused, as an inconclusive gate refuses a promotion. An endpoint that is not ready yet
    (3) or an evicted pod is tried again. With ENV, the judge reads that overlay (--env).
    """
    import yaml

    from pipeline.export.argo import JudgeJob, analysis_template
    from pipeline.release.resolve import is_release_id
    store, manifest = _release(file, target, store_url)
    environment = None if is_release_id(target) else target
    template = analysis_template(store, manifest, JudgeJob(judge_image, spec_in_image,
                                                           environment),
                                 canary_url, stable_url)
    sys.stdout.write(yaml.safe_dump(template, sort_keys=False))
