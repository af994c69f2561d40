"""build: render the server's artifact and config from the spec, check them, digest them.

When an existing release is re-verified for promotion, its published artifact
is fetched (digest checked) and unpacked instead: a promotion never rebuilds.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pipeline.context import RunContext
from pipeline.digest import sha256_file
from pipeline.errors import PipelineError
from pipeline.model.source import ResolvedSource, resolve_model_source
from pipeline.outcomes.build import BuildOutcome
from pipeline.release.store import store_for
from pipeline.servers import server_kind
from pipeline.servers.base import BuiltArtifact
from pipeline.servers.docker.engine import BuiltImage, DockerEngine
from pipeline.servers.docker.images import ImageDigests
from pipeline.stage_result import Artifact, StageResult, Status

NAME = "build"
USES_SERVER = False


def _restore(ctx: RunContext) -> BuiltArtifact:
    assert ctx.promotion is not None
    manifest = ctx.promotion.manifest
    spec = ctx.loaded.spec
    if manifest.server_kind != spec.server.kind:
        raise PipelineError(f"release {ctx.promotion.release_id} was built for "
                            f"{manifest.server_kind}, the spec says {spec.server.kind}")
    digest, model_digest = manifest.artifact_sha256, manifest.model_sha256
    if digest is None or model_digest is None:
        raise PipelineError(f"release {ctx.promotion.release_id}: its manifest names no "
                            "artifact or model digest")
    store = store_for(ctx.loaded)
    folder = ctx.run_dir / "release"
    folder.mkdir()
    archive = folder / "artifact"
    store.fetch_blob(digest, archive)
    model_file = folder / ("model" + Path(manifest.model_source).suffix)
    store.fetch_blob(model_digest, model_file)
    ctx.model_source = ResolvedSource(model_file, manifest.model_source,
                                      dict((manifest.model or {}).get("provenance") or {}))
    return server_kind(spec.server.kind).restore(ctx.loaded, archive, digest, model_file,
                                                 ctx.run_dir)


def _build_from_source(ctx: RunContext) -> tuple[BuiltArtifact, str]:
    spec = ctx.loaded.spec
    source = resolve_model_source(ctx.loaded, ctx.run_dir / "model-source")
    ctx.model_source = source
    kind = server_kind(spec.server.kind)
    served = kind.served_model(ctx.loaded, source.file, lambda: _docker(ctx),
                               ctx.run_dir / "tensorrt")
    artifact = kind.build(ctx.loaded, served, ctx.run_dir)
    if served != source.file:
        # The release's model is the source; the engine is part of the artifact.
        artifact = replace(artifact, model_file=source.file,
                           model_digest=sha256_file(source.file))
    return artifact, f"model from {source.description}"


def _docker(ctx: RunContext) -> DockerEngine:
    if ctx.docker is None:
        ctx.docker = DockerEngine(ctx.env)
    return ctx.docker


def wants_image(ctx: RunContext) -> bool:
    server = ctx.loaded.spec.server
    return server.runtime == "docker" or (server.image is not None and
                                          server.image.base is not None)


def _build_image(ctx: RunContext, artifact: BuiltArtifact) -> BuiltImage:
    spec = ctx.loaded.spec
    assert spec.server.image is not None and spec.server.image.base is not None
    digests = ImageDigests(artifact.model_digest, artifact.digest, artifact.config_digest,
                           ctx.loaded.digest)
    context = server_kind(spec.server.kind).image_context(ctx.loaded, artifact, digests)
    tag = f"serve-pipeline/{spec.name}:{artifact.digest[:12]}"
    return _docker(ctx).build(context, tag, spec.server.image.base)


def run(ctx: RunContext) -> StageResult:
    if ctx.promotion is not None:
        artifact = _restore(ctx)
        origin = f"release {ctx.promotion.release_id}"
    else:
        artifact, origin = _build_from_source(ctx)
    ctx.preload_reference(artifact.model_file)
    ctx.build = artifact
    size = artifact.archive.stat().st_size
    details: dict[str, Any] = {}
    message = (f"{artifact.kind} ({size / 1024:.0f} KiB, sha256 {artifact.digest[:12]}), "
               f"{artifact.config_name} checked; {origin}")
    if wants_image(ctx):
        ctx.image = _build_image(ctx, artifact)
        details["image"] = {"id": ctx.image.id, "tag": ctx.image.tag,
                            "labels": ctx.image.labels}
        message += f"; image {ctx.image.tag} ({ctx.image.id[7:19]})"
    return StageResult(
        NAME, Status.PASSED, message,
        metrics=BuildOutcome(artifact_bytes=float(size),
                             model_bytes=float(artifact.model_file.stat().st_size)).to_json(),
        artifacts={
            artifact.kind: Artifact(str(artifact.archive), artifact.digest, size),
            artifact.config_name: Artifact(artifact.config_name, artifact.config_digest,
                                           len(artifact.config_text.encode())),
        },
        details=details,
    )
