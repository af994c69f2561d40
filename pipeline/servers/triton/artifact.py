"""Triton's artifact: a model repository built through Triton's ModelConfig protobuf, or
a published one unpacked as it was built."""

from __future__ import annotations

import tarfile
from pathlib import Path

from pipeline.digest import deterministic_tar, sha256_bytes, sha256_file
from pipeline.errors import PipelineError
from pipeline.servers.base import BuiltArtifact
from pipeline.servers.triton.config import check_model_config, write_model_repository
from pipeline.spec.models import LoadedSpec


def build_repository(loaded: LoadedSpec, model_file: Path, destination: Path) -> BuiltArtifact:
    spec = loaded.spec
    entrypoint = None
    if spec.model.entrypoint is not None:
        entrypoint = loaded.resolve(spec.model.entrypoint.rpartition(":")[0])
    repository = write_model_repository(spec, model_file, entrypoint,
                                        destination / "model-repository")
    config = repository.config_path.read_text()
    problems = check_model_config(config, spec)
    if problems:
        raise PipelineError("config.pbtxt check failed: " + "; ".join(problems))
    archive = destination / "model-repository.tar"
    digest = deterministic_tar(repository.root, archive)
    return BuiltArtifact("triton-model-repository", repository.root, archive, digest,
                         "config.pbtxt", config, sha256_bytes(config.encode()),
                         model_file, sha256_file(model_file))


def restore_repository(loaded: LoadedSpec, archive: Path, digest: str, model_file: Path,
                       destination: Path) -> BuiltArtifact:
    """A published model repository, unpacked as it was built (never re-rendered)."""
    root = destination / "model-repository"
    root.mkdir(parents=True)
    with tarfile.open(archive) as bundle:
        bundle.extractall(root, filter="data")
    config_path = root / loaded.spec.name / "config.pbtxt"
    if not config_path.is_file():
        raise PipelineError(f"the release's model repository has no "
                            f"{loaded.spec.name}/config.pbtxt")
    config = config_path.read_text()
    problems = check_model_config(config, loaded.spec)
    if problems:
        raise PipelineError(
            "the release's config.pbtxt does not match this environment's spec ("
            + "; ".join(problems) + "): a promotion never rebuilds; change serve.yaml "
            "and promote through the required environments")
    return BuiltArtifact("triton-model-repository", root, archive, digest, "config.pbtxt",
                         config, sha256_bytes(config.encode()), model_file,
                         sha256_file(model_file))
