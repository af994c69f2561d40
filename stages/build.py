"""build: render the server's artifact and config from the spec, check them, digest them."""

from __future__ import annotations

from pipeline.context import RunContext
from pipeline.model_source import resolve_model_source
from pipeline.results import Artifact, StageResult, Status
from pipeline.servers import server_kind

NAME = "build"


def run(ctx: RunContext) -> StageResult:
    source = resolve_model_source(ctx.loaded, ctx.run_dir / "model-source")
    ctx.model_source = source
    ctx.preload_reference(source.file)
    artifact = server_kind(ctx.loaded.spec.server.kind).build(ctx.loaded, source.file,
                                                              ctx.run_dir)
    ctx.build = artifact
    size = artifact.archive.stat().st_size
    return StageResult(
        NAME, Status.PASSED,
        f"{artifact.kind} ({size / 1024:.0f} KiB, sha256 {artifact.digest[:12]}), "
        f"{artifact.config_name} checked; model from {source.description}",
        metrics={"artifact_bytes": float(size),
                 "model_bytes": float(artifact.model_file.stat().st_size)},
        artifacts={
            artifact.kind: Artifact(str(artifact.archive), artifact.digest, size),
            artifact.config_name: Artifact(artifact.config_name, artifact.config_digest,
                                           len(artifact.config_text.encode())),
        },
    )
