"""What every model server kind offers the stages: build, launch, health, infer, statistics."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

import psutil

from pipeline.errors import ServerError
from pipeline.model.tensors import Array, Batch
from pipeline.request_types import GrpcRequest, HttpRequest
from pipeline.servers import http
from pipeline.servers.deployment import KServeRuntime, ReleaseFiles
from pipeline.servers.process import ManagedProcess
from pipeline.spec.kind_specs import KindSpec
from pipeline.spec.models import LoadedSpec, ProbeName, Spec
from pipeline.spec.units import ByteSize

if TYPE_CHECKING:  # docker is imported only where a run uses it
    from pipeline.servers.docker.engine import BuiltImage, DockerEngine
    from pipeline.servers.docker.images import BuildContext, ImageDigests

# Files copied into every artifact: the generated server glue and the model loader that
# the parity reference uses too.
ASSETS = Path(__file__).parent / "assets"
RUNTIME_MODULE = Path(__file__).parent.parent / "model" / "runtime.py"


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
    """One lifecycle for every server: the constructor creates nothing; `start()` creates
    the server's files and starts it; `wait_ready()` waits (`wait_until_ready`, the one
    readiness loop); `stop()` stops it (idempotent). As a context manager, `__enter__`
    starts and waits (the spec's readiness timeout) and `__exit__` stops."""

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

    def probe_request(self, probe: ProbeName, size: int | None = None) -> HttpRequest: ...

    def grpc_request(self, batch: Batch) -> GrpcRequest | None: ...

    def __enter__(self) -> ModelServer: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


class ReconfigurableServer(ModelServer, Protocol):
    """A server that can serve another config of its model without a restart (tune)."""

    def can_reconfigure(self, from_device: str, to_device: str) -> bool: ...

    def reconfigure(self, loaded: LoadedSpec, model_file: Path, scratch: Path,
                    label: str) -> None:
        """Serve `loaded`'s server settings; ServerError when refused. Returns once the new
        config is ready and the old one's processes are gone."""
        ...


@dataclass(frozen=True)
class RunningEndpoints:
    """Where a server we did not start answers (`measure --url ...`); each kind says which
    of these it needs."""

    url: str
    grpc_url: str | None = None
    management_url: str | None = None
    metrics_url: str | None = None
    key_file: Path | None = None


@dataclass(frozen=True)
class InstallCheck:
    """One part of a kind's installation, checked before a run starts a server."""

    name: str
    passed: bool | None          # None: not needed here (skipped)
    detail: str


@dataclass(frozen=True)
class OptionalPart:
    """The pip extra a kind's code needs beyond the core install (preflight names it when
    one of `modules` cannot be imported)."""

    extra: str
    feature: str
    modules: tuple[str, ...]


@dataclass(frozen=True)
class TuningTraits:
    """What the config search must know of a kind."""

    delay_step_us: int                      # the server counts queue delay in these steps
    default_delays_us: tuple[int, ...]
    has_preferred_batch_sizes: bool
    compute_per_request: bool               # counters add each request's time in a batch
    reconfigured_by: str                    # one line for tune's record


class ServerKind(Protocol):
    """A server kind: its artifact, its process or container, and what the stages, tune
    and `measure` ask of it. Registered in `KINDS` (pipeline/servers/kinds.py)."""

    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> KindSpec:
        """What the spec knows of the kind: its ports and its cross-key rules."""
        ...

    @property
    def port_names(self) -> tuple[str, ...]: ...

    @property
    def tuning(self) -> TuningTraits: ...

    @property
    def optional_part(self) -> OptionalPart | None:
        """The extra its code needs, or None when the core install serves it."""
        ...

    @property
    def memory_growth_allowance(self) -> ByteSize:
        """Growth a healthy server shows over the latency windows (the default limit)."""
        ...

    @property
    def request_size_guard(self) -> str:
        """Where a deployment sets the request-size limit (parity's oversized-body finding)."""
        ...

    def installation_checks(self, loaded: LoadedSpec,
                            env: Mapping[str, str]) -> list[InstallCheck]: ...

    def served_model(self, loaded: LoadedSpec, model_file: Path,
                     docker: Callable[[], DockerEngine], destination: Path) -> Path:
        """The model file the artifact serves: `model_file`, or one compiled from it."""
        ...

    def image_context(self, loaded: LoadedSpec, artifact: BuiltArtifact,
                      digests: ImageDigests) -> BuildContext: ...

    def build(self, loaded: LoadedSpec, model_file: Path,
              destination: Path) -> BuiltArtifact: ...

    def restore(self, loaded: LoadedSpec, archive: Path, digest: str, model_file: Path,
                destination: Path) -> BuiltArtifact: ...

    def launch(self, loaded: LoadedSpec, artifact: BuiltArtifact, ports: Mapping[str, int],
               run_dir: Path, env: Mapping[str, str]) -> ModelServer:
        """The server for `artifact` on `ports`, not started: it creates nothing yet."""
        ...

    def launch_reconfigurable(self, loaded: LoadedSpec, artifact: BuiltArtifact,
                              ports: Mapping[str, int], run_dir: Path,
                              env: Mapping[str, str]) -> ReconfigurableServer:
        """As `launch`, with the API that reconfigures it in place turned on (loopback)."""
        ...

    def launch_container(self, loaded: LoadedSpec, engine: DockerEngine, image: BuiltImage,
                         ports: Mapping[str, int], run_dir: Path,
                         name: str) -> ModelServer:
        """The serving image as a container (runtime: docker), not started."""
        ...

    def attach(self, loaded: LoadedSpec, endpoints: RunningEndpoints) -> ModelServer:
        """A server already running there; UsageError when an endpoint it needs is missing."""
        ...

    def lay_out(self, files: ReleaseFiles, destination: Path) -> None:
        """Write a release into the empty folder `destination` as the server loads it (and
        as KServe's storage initializer hands it to the server); StoreError when the
        release's files do not fit together."""
        ...

    def kserve_runtime(self, spec: Spec, config: bytes) -> KServeRuntime:
        """How KServe runs the kind for a release of `spec` with the rendered `config`."""
        ...


@runtime_checkable
class Contained(Protocol):
    """A server that runs as a container."""

    @property
    def container_name(self) -> str: ...


def send(request: HttpRequest, timeout_s: float) -> http.Response:
    return http.call(request.method, request.url, request.body, request.headers,
                     timeout_s=timeout_s)


class Startable(Protocol):
    """What the readiness loop watches."""

    @property
    def model_name(self) -> str: ...

    @property
    def started_at(self) -> float | None: ...

    def alive(self) -> bool: ...

    def is_ready(self, timeout_s: float = 2.0) -> bool: ...

    def startup_failure(self) -> str | None: ...

    def describe_death(self) -> str: ...

    def log_excerpt(self) -> str: ...


@dataclass(frozen=True)
class ReadinessWords:
    """How a kind's readiness errors name the server and what it did not reach."""

    program: str         # "tritonserver died before it was ready: ..."
    not_ready: str       # "tritonserver not ready within 120s ..."
    poll_s: float


def wait_until_ready(server: Startable, timeout_s: float, words: ReadinessWords) -> float:
    """Seconds from the server's start (or from now, for a server we did not start) to
    ready. ServerError saying why when it dies, keeps failing to start, or misses the
    deadline."""
    started = server.started_at if server.started_at is not None else time.monotonic()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not server.alive():
            raise ServerError(f"{words.program} died before it was ready: "
                              f"{server.describe_death()}")
        failure = server.startup_failure()
        if failure is not None:
            raise ServerError(failure)
        if server.is_ready(timeout_s=min(2.0, max(0.1, deadline - time.monotonic()))):
            return time.monotonic() - started
        time.sleep(words.poll_s)
    raise ServerError(f"{words.program} {words.not_ready} within {timeout_s:g}s "
                      f"(model '{server.model_name}'); {server.log_excerpt()}")


_Lifecycle = TypeVar("_Lifecycle", bound="EndpointLifecycle")


class EndpointLifecycle:
    """Start, readiness, stop and liveness of a server endpoint: a local process when we
    started one, otherwise a server that must keep answering (and that is not ours to
    stop). Subclasses that start something override `start`, `stop` and `alive`."""

    WORDS: ReadinessWords
    model_name: str
    process: ManagedProcess | None
    started_at: float | None = None
    _answering: RemoteLiveness
    # What `__enter__` waits for readiness: the spec's `stages.readiness.timeout`.
    ready_timeout_s: float

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

    def is_ready(self, timeout_s: float = 2.0) -> bool:
        raise NotImplementedError

    def describe_death(self) -> str:
        raise NotImplementedError

    def log_excerpt(self) -> str:
        raise NotImplementedError

    def startup_failure(self) -> str | None:
        """A reason to stop waiting although the server still runs (None: keep waiting)."""
        return None

    def wait_ready(self, timeout_s: float) -> float:
        return wait_until_ready(self, timeout_s, self.WORDS)

    def __enter__(self: _Lifecycle) -> _Lifecycle:
        self.start()
        try:
            self.wait_ready(self.ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class RemoteLiveness:
    """Whether a server we did not start still answers; asked at most once a second."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = headers or {}
        self.checked = 0.0
        self.answering = True
        self.ever_answered = False

    def stopped(self, what: str) -> str:
        """Why the server at `what` is dead: it stopped answering, or never did (nothing
        listens there: a wrong URL, or a server not running)."""
        if self.ever_answered:
            return f"{what} stopped answering"
        return f"{what} never answered: no server is running there, or this is not its URL"

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.checked >= 1.0:
            self.checked = now
            try:
                http.call("GET", self.url, headers=self.headers, timeout_s=2.0)
                self.answering = self.ever_answered = True
            except http.Unreachable:
                self.answering = False
        return self.answering
