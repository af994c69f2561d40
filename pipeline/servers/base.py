"""What every model server kind offers the stages: build, launch, health, infer, statistics."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

from pipeline.measure.grpc_client import GrpcRequest
from pipeline.model.tensors import Array, Batch
from pipeline.servers import http
from pipeline.servers.process import ManagedProcess
from pipeline.spec.models import LoadedSpec, ProbeName

# Files copied into every artifact: the generated server glue and the model loader that
# the parity reference uses too.
ASSETS = Path(__file__).parent / "assets"
RUNTIME_MODULE = Path(__file__).parent.parent / "model" / "runtime.py"


@dataclass(frozen=True)
class HttpRequest:
    method: str
    url: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class BuiltArtifact:
    """The served artifact, digested before anything serves it."""

    kind: str            # "triton-model-repository" | "torchserve-mar"
    serve_root: Path     # the folder the server is pointed at (a copy of it, when served)
    archive: Path        # the file published as the artifact blob
    digest: str
    config_name: str     # "config.pbtxt" | "config.properties"
    config_text: str     # the production config, as rendered from the spec
    config_digest: str
    model_file: Path
    model_digest: str


class ServerStats(Protocol):
    """Cumulative server-side counters; `since` gives a window's delta."""

    @property
    def batch_executions(self) -> dict[int, int]: ...

    def since(self, before: ServerStats) -> ServerStats: ...

    def window_metrics(self) -> dict[str, float]: ...


class ModelServer(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def model_name(self) -> str: ...

    @property
    def process(self) -> ManagedProcess | None: ...

    @property
    def ports(self) -> Mapping[str, int]: ...

    def start(self) -> None: ...

    def alive(self) -> bool: ...

    def process_tree(self) -> list[psutil.Process]: ...

    def stop(self) -> None: ...

    def describe_death(self) -> str: ...

    def is_ready(self, timeout_s: float = 2.0) -> bool: ...

    def wait_ready(self, timeout_s: float) -> float: ...

    def stats(self) -> ServerStats: ...

    def infer_request(self, batch: Batch) -> HttpRequest: ...

    def decode_outputs(self, response: http.Response) -> dict[str, Array]: ...

    def probe_request(self, probe: ProbeName) -> HttpRequest: ...

    def grpc_request(self, batch: Batch) -> GrpcRequest | None: ...


class ServerKind(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def port_names(self) -> tuple[str, ...]: ...

    def build(self, loaded: LoadedSpec, model_file: Path,
              destination: Path) -> BuiltArtifact: ...

    def restore(self, loaded: LoadedSpec, archive: Path, digest: str, model_file: Path,
                destination: Path) -> BuiltArtifact: ...

    def launch(self, loaded: LoadedSpec, artifact: BuiltArtifact, ports: Mapping[str, int],
               run_dir: Path, env: Mapping[str, str]) -> ModelServer: ...


def send(request: HttpRequest, timeout_s: float) -> http.Response:
    return http.call(request.method, request.url, request.body, request.headers,
                     timeout_s=timeout_s)


class EndpointLifecycle:
    """Start, stop and liveness of a server endpoint: a local process when we started one,
    otherwise a server that must keep answering (and that is not ours to stop)."""

    process: ManagedProcess | None
    _answering: RemoteLiveness

    def start(self) -> None:
        """Nothing to start: the server is already running."""

    def stop(self) -> None:
        """Not ours to stop."""

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.is_running()
        return self._answering()

    def process_tree(self) -> list[psutil.Process]:
        return self.process.tree() if self.process is not None else []


class RemoteLiveness:
    """Whether a server we did not start still answers; asked at most once a second."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = headers or {}
        self.checked = 0.0
        self.answering = True

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.checked >= 1.0:
            self.checked = now
            try:
                http.call("GET", self.url, headers=self.headers, timeout_s=2.0)
                self.answering = True
            except http.Unreachable:
                self.answering = False
        return self.answering
