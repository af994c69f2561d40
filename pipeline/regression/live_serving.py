"""The release live in the target environment, served here next to the candidate.

It comes from the store as it was published: every blob integrity-checked, its
artifact unpacked (never rebuilt), its config rendered from its own spec (the spec
blob of the release) and checked against the config digest the release recorded, and
started as its release describes, on free loopback ports. Anything on that path that
fails is a reason (`LiveUnservable`), and the regression check fails closed with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from pipeline.context import RunContext
from pipeline.errors import PipelineError
from pipeline.release.manifest import Manifest, verify_release
from pipeline.release.store.base import Store
from pipeline.servers import server_kind
from pipeline.servers.base import BuiltArtifact, ModelServer
from pipeline.servers.ports import loopback_ports
from pipeline.servers.specs import validate_spec
from pipeline.servers.stop_alongside import stop_alongside
from pipeline.spec.models import EnvironmentPolicy, LoadedSpec


class LiveUnservable(Exception):
    """Why the live release cannot be served here, in one line."""


class IntegrityFailed(LiveUnservable):
    """A blob of the release is missing or does not match its digest."""


@dataclass(frozen=True)
class ServedLive:
    release_id: str
    loaded: LoadedSpec
    artifact: BuiltArtifact
    server: ModelServer
    cold_start_s: float


def _blob(manifest: Manifest, role: str) -> str:
    blob = manifest.blob(role)
    if blob is None:
        raise LiveUnservable(f"its manifest names no {role} blob")
    return blob.digest


def live_spec(store: Store, manifest: Manifest, candidate: LoadedSpec) -> LoadedSpec:
    """The spec the live release was verified with (its own batching, instances, config),
    resolved against this workspace."""
    try:
        body = json.loads(store.read_blob(_blob(manifest, "spec")))
        spec = validate_spec(body["spec"])
        policy = EnvironmentPolicy.model_validate(body.get("policy") or {})
    except (PipelineError, ValueError, KeyError, TypeError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise LiveUnservable(f"its spec blob cannot be read: {first}") from None
    return LoadedSpec(spec, policy, body.get("environment"), candidate.path,
                      candidate.workspace, ())


def restore_release(store: Store, manifest: Manifest, loaded: LoadedSpec,
                    folder: Path) -> BuiltArtifact:
    """The release's artifact unpacked into `folder`, every blob checked, its config rendered
    from `loaded` (its own spec) and held to the digest it recorded."""
    problems = verify_release(store, manifest)
    if problems:
        raise IntegrityFailed("integrity check failed: " + "; ".join(problems))
    digest, model_digest = manifest.artifact_sha256, manifest.model_sha256
    if digest is None or model_digest is None:
        raise LiveUnservable("its manifest names no artifact or model digest")
    archive = folder / "artifact"
    store.fetch_blob(digest, archive)
    model_file = folder / ("model" + Path(manifest.model_source).suffix)
    store.fetch_blob(model_digest, model_file)
    artifact = server_kind(loaded.spec.server.kind).restore(loaded, archive, digest,
                                                            model_file, folder)
    recorded = manifest.config_sha256
    if artifact.config_digest != recorded:
        raise LiveUnservable(f"its {artifact.config_name} renders to sha256 "
                             f"{artifact.config_digest[:12]}, the release recorded "
                             f"{str(recorded)[:12]}")
    return artifact


@dataclass(frozen=True)
class LaunchedLive:
    """The live release's server, started and not yet waited for."""

    release_id: str
    loaded: LoadedSpec
    artifact: BuiltArtifact
    server: ModelServer

    def ready(self, timeout_s: float) -> ServedLive:
        """Wait for it to be ready; LiveUnservable says why it never was."""
        try:
            cold_start_s = self.server.wait_ready(timeout_s)
        except (PipelineError, OSError) as exc:
            raise LiveUnservable(f"cannot be started: {_first_line(exc)}") from None
        return ServedLive(self.release_id, self.loaded, self.artifact, self.server,
                          cold_start_s)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def live_folder(ctx: RunContext) -> Path:
    """Where the live release's artifact is restored and served from in this run."""
    return ctx.run_dir / "live-release"


def live_archive(ctx: RunContext) -> Path:
    """The live release's artifact as fetched from the store (restore_release)."""
    return live_folder(ctx) / "artifact"


def launch_live(ctx: RunContext, store: Store, manifest: Manifest) -> LaunchedLive:
    """Start the live release beside the candidate, without waiting for it; stopped when
    the run's resources close, alongside the candidate. LiveUnservable says why it
    could not be. Call it from the main thread: a server's parent-death signal follows
    the thread that started it."""
    loaded = live_spec(store, manifest, ctx.loaded)
    server_spec = loaded.spec.server
    if server_spec.runtime != "process":
        raise LiveUnservable(f"it runs in a container image ({server_spec.runtime} runtime), "
                             "not served side by side here")
    if server_spec.device != ctx.loaded.spec.server.device:
        raise LiveUnservable(f"it runs on {server_spec.device}, this run on "
                             f"{ctx.loaded.spec.server.device}")
    folder = live_folder(ctx)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        artifact = restore_release(store, manifest, loaded, folder)
        kind = server_kind(server_spec.kind)
        server = kind.launch(loaded, artifact, loopback_ports(kind.port_names), folder,
                             ctx.env)
        stop_alongside(ctx.resources, server)
        server.start()
    except (PipelineError, OSError, KeyError, TypeError) as exc:
        raise LiveUnservable(f"cannot be started: {_first_line(exc)}") from None
    return LaunchedLive(manifest.release_id, loaded, artifact, server)


def serve_live(ctx: RunContext, store: Store, manifest: Manifest) -> ServedLive:
    """Start the live release beside the candidate and wait for it to be ready (see
    launch_live)."""
    launched = launch_live(ctx, store, manifest)
    return launched.ready(ctx.loaded.spec.stages.readiness.timeout.seconds)
