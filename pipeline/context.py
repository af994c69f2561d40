"""What the stages of one run share: the spec, the run folder, and what earlier stages made."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pipeline.errors import ServerError
from pipeline.model.reference import load_reference
from pipeline.model.runtime import LoadedModel
from pipeline.model.source import ResolvedSource
from pipeline.release.policy import Decision
from pipeline.servers.base import BuiltArtifact, ModelServer
from pipeline.servers.docker.engine import BuiltImage, DockerEngine
from pipeline.servers.ports import shared_port
from pipeline.spec.models import LoadedSpec
from pipeline.stage_result import StageResult

_Scoped = TypeVar("_Scoped")


class Progress(Protocol):
    def __call__(self, stage: str, done: float, total: float, text: str) -> None: ...


def no_progress(stage: str, done: float, total: float, text: str) -> None:
    """A progress sink that ignores everything (tests, scripts)."""


@dataclass
class RunContext:
    """One run's shared state. The CLI fills the first block; stages fill the rest, each
    field set by the stage named beside it and read by the ones after it."""

    loaded: LoadedSpec                        # the spec with its overlay, as validated
    run_id: str                               # YYYYMMDD-HHMMSS-xxxxxx
    run_dir: Path                             # .serve-pipeline/runs/<run_id>/
    env: Mapping[str, str]                    # the environment servers are started with
    resources: ExitStack                      # closed at teardown: servers, containers
    progress: Progress = no_progress          # the progress view (or nothing)
    promote_to: str | None = None             # the environment publish moves, if any
    actor: str = "unknown"                    # who runs it (audit)
    approved_by: str | None = None            # an approval given with the command

    build: BuiltArtifact | None = None        # build: the served artifact, digested
    server: ModelServer | None = None         # start (or attached by `measure --url`)
    results: list[StageResult] = field(default_factory=list)   # runner: so far
    release_id: str | None = None             # publish: the release written
    model_source: ResolvedSource | None = None  # build: where the model came from
    promotion: Decision | None = None   # re-verifying an existing release
    image: BuiltImage | None = None           # build (runtime: docker): the image
    docker: DockerEngine | None = None        # build (runtime: docker): the daemon
    ray_address: str | None = None            # --ray-address (else RAY_ADDRESS): load workers
    # One object per class that lives as long as the run (the Ray load cluster), made by the
    # floor that needs it: the context does not know those classes.
    _run_scoped: dict[type, object] = field(default_factory=dict)
    _reference: Future[LoadedModel] | None = None   # the reference model, loading
    # Background work that competes for the machine (a server still starting): waited for
    # before a measured window (`quiet`), each with what it is.
    _pending: list[tuple[Future[Any], str]] = field(default_factory=list)

    def run_scoped(self, kind: type[_Scoped]) -> _Scoped | None:
        """The run's one `kind` object, if one was made."""
        found = self._run_scoped.get(kind)
        return found if isinstance(found, kind) else None

    def keep_run_scoped(self, made: object) -> None:
        """Keep `made` as the run's one object of its class."""
        self._run_scoped[type(made)] = made

    def quiet_before_measuring(self, work: Future[Any], what: str) -> None:
        """Have `work`, running in the background, done before the next measured window."""
        self._pending.append((work, what))

    def quiet(self, stage: str) -> None:
        """Wait for the background work that would share the machine with `stage`'s
        measurement; its outcome is for its owner to read."""
        for work, what in self._pending:
            if not work.done():
                self.progress(stage, 0, 1, f"waiting for {what}")
                wait([work])
        self._pending.clear()

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
        """The running server; ServerError quoting its log if it is gone, or when another
        process listens on one of its ports (what answers there may not be this server)."""
        if self.server is None:
            raise ServerError("no server: the start stage did not run")
        if not self.server.alive():
            raise ServerError(self.server.describe_death())
        if self.server.process is not None:      # ours, on this machine
            clash = shared_port(self.server.ports,
                                {p.pid for p in self.server.process_tree()})
            if clash is not None:
                raise ServerError(clash)
        return self.server
