"""What the stages of one run share: the spec, the run folder, and what earlier stages made."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pipeline.errors import ServerError
from pipeline.model.reference import load_reference
from pipeline.model.runtime import LoadedModel
from pipeline.model.source import ResolvedSource
from pipeline.release.promotion import CheckedPromotion
from pipeline.results import StageResult
from pipeline.servers.base import BuiltArtifact, ModelServer
from pipeline.servers.docker.engine import BuiltImage, DockerEngine
from pipeline.spec.models import LoadedSpec


class Progress(Protocol):
    def __call__(self, stage: str, done: float, total: float, text: str) -> None: ...


def no_progress(stage: str, done: float, total: float, text: str) -> None:
    """A progress sink that ignores everything (tests, scripts)."""


@dataclass
class RunContext:
    loaded: LoadedSpec
    run_id: str
    run_dir: Path
    env: Mapping[str, str]
    resources: ExitStack
    progress: Progress = no_progress
    promote_to: str | None = None
    actor: str = "unknown"
    approved_by: str | None = None
    build: BuiltArtifact | None = None
    server: ModelServer | None = None
    results: list[StageResult] = field(default_factory=list)
    release_id: str | None = None
    model_source: ResolvedSource | None = None
    promotion: CheckedPromotion | None = None   # re-verifying an existing release
    image: BuiltImage | None = None
    docker: DockerEngine | None = None
    _reference: Future[LoadedModel] | None = None

    def preload_reference(self, model_file: Path) -> None:
        """Load the reference model (and torch) in the background while the server starts."""
        if self._reference is None:
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reference")
            self._reference = executor.submit(load_reference, self.loaded, model_file)
            executor.shutdown(wait=False)

    def reference_model(self) -> LoadedModel:
        if self._reference is None:
            self.preload_reference(self.require_build().model_file)
        assert self._reference is not None
        return self._reference.result()

    def require_build(self) -> BuiltArtifact:
        if self.build is None:
            raise ServerError("no build output: the build stage did not run")
        return self.build

    def require_server(self) -> ModelServer:
        """The running server; ServerError quoting its log if it is gone."""
        if self.server is None:
            raise ServerError("no server: the start stage did not run")
        if not self.server.alive():
            raise ServerError(self.server.describe_death())
        return self.server
