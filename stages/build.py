"""build: render the Triton model repository from the spec, check it, and digest it."""

from __future__ import annotations

from pipeline.context import BuildOutput, RunContext
from pipeline.digest import deterministic_tar, sha256_bytes, sha256_file
from pipeline.errors import PipelineError
from pipeline.results import Artifact, StageResult, Status
from pipeline.servers.triton import check_model_config, write_model_repository

NAME = "build"


def run(ctx: RunContext) -> StageResult:
    spec = ctx.loaded.spec
    if spec.model.source.path is None:
        raise PipelineError("model.source: DVC sources are not supported by this version")
    model_file = ctx.loaded.resolve(spec.model.source.path)
    if not model_file.is_file():
        raise PipelineError(f"model.source: model file not found: {model_file}")
    entrypoint = None
    if spec.model.entrypoint is not None:
        entrypoint = ctx.loaded.resolve(spec.model.entrypoint.rpartition(":")[0])
    repository = write_model_repository(spec, model_file, entrypoint,
                                        ctx.run_dir / "model-repository")
    config_text = repository.config_path.read_text()
    problems = check_model_config(config_text, spec)
    if problems:
        raise PipelineError("config.pbtxt check failed: " + "; ".join(problems))
    tar_path = ctx.run_dir / "model-repository.tar"
    repository_digest = deterministic_tar(repository.root, tar_path)
    model_digest = sha256_file(model_file)
    config_digest = sha256_bytes(config_text.encode())
    ctx.build = BuildOutput(repository, tar_path, repository_digest, config_text, config_digest,
                            model_file, model_digest)
    size = tar_path.stat().st_size
    return StageResult(
        NAME, Status.PASSED,
        f"model repository {spec.name}/ ({size / 1024:.0f} KiB, sha256 {repository_digest[:12]})",
        metrics={"artifact_bytes": float(size), "model_bytes": float(model_file.stat().st_size)},
        artifacts={
            "model_repository": Artifact(str(tar_path), repository_digest, size),
            "config.pbtxt": Artifact(str(repository.config_path), config_digest,
                                     len(config_text.encode())),
        },
    )
