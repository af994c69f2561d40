"""build: render the server's artifact and config from the spec, check them, digest them.

When an existing release is re-verified for promotion, its published artifact
is fetched (digest checked) and unpacked instead: a promotion never rebuilds.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.context import RunContext
from pipeline.errors import PipelineError
from pipeline.model_source import ResolvedSource, resolve_model_source
from pipeline.results import Artifact, StageResult, Status
from pipeline.servers import server_kind
from pipeline.servers.base import BuiltArtifact
from pipeline.store import store_for

NAME = "build"


def _restore(ctx: RunContext) -> BuiltArtifact:
    assert ctx.promotion is not None
    manifest = ctx.promotion.manifest
    spec = ctx.loaded.spec
    if manifest.get("server", {}).get("kind") != spec.server.kind:
        raise PipelineError(f"release {ctx.promotion.release_id} was built for "
                            f"{manifest.get('server', {}).get('kind')}, the spec says "
                            f"{spec.server.kind}")
    store = store_for(ctx.loaded)
    folder = ctx.run_dir / "release"
    folder.mkdir()
    archive = folder / "artifact"
    store.fetch_blob(manifest["artifact"]["sha256"], archive)
    model = manifest["model"]
    model_file = folder / ("model" + Path(str(model.get("source", ""))).suffix)
    store.fetch_blob(model["sha256"], model_file)
    ctx.model_source = ResolvedSource(model_file, str(model.get("source")),
                                      dict(model.get("provenance") or {}))
    return server_kind(spec.server.kind).restore(ctx.loaded, archive,
                                                 manifest["artifact"]["sha256"], model_file,
                                                 ctx.run_dir)


def run(ctx: RunContext) -> StageResult:
    if ctx.promotion is not None:
        artifact = _restore(ctx)
        origin = f"release {ctx.promotion.release_id}"
    else:
        source = resolve_model_source(ctx.loaded, ctx.run_dir / "model-source")
        ctx.model_source = source
        artifact = server_kind(ctx.loaded.spec.server.kind).build(ctx.loaded, source.file,
                                                                  ctx.run_dir)
        origin = f"model from {source.description}"
    ctx.preload_reference(artifact.model_file)
    ctx.build = artifact
    size = artifact.archive.stat().st_size
    return StageResult(
        NAME, Status.PASSED,
        f"{artifact.kind} ({size / 1024:.0f} KiB, sha256 {artifact.digest[:12]}), "
        f"{artifact.config_name} checked; {origin}",
        metrics={"artifact_bytes": float(size),
                 "model_bytes": float(artifact.model_file.stat().st_size)},
        artifacts={
            artifact.kind: Artifact(str(artifact.archive), artifact.digest, size),
            artifact.config_name: Artifact(artifact.config_name, artifact.config_digest,
                                           len(artifact.config_text.encode())),
        },
    )
