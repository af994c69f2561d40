"""TorchServe as a server kind: everything the stages, tune and `measure` ask of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from pipeline.errors import ServerError, UsageError
from pipeline.servers.base import (
    BuiltArtifact,
    InstallCheck,
    ModelServer,
    OptionalPart,
    RunningEndpoints,
    TuningTraits,
)
from pipeline.servers.deployment import KServeRuntime, ReleaseFiles
from pipeline.servers.docker.engine import BuiltImage, DockerEngine
from pipeline.servers.docker.images import BuildContext, ImageDigests, torchserve_context
from pipeline.servers.torchserve import checks, deployment
from pipeline.servers.torchserve.artifact import build_archive, restore_archive
from pipeline.servers.torchserve.server import TorchServeEndpoint, TorchServeServer
from pipeline.servers.torchserve.spec import TORCHSERVE_SPEC
from pipeline.spec.models import LoadedSpec, Spec
from pipeline.spec.units import ByteSize

TORCHSERVE_DELAYS_US = (1000, 2000, 5000, 10000)


class TorchServeKind:
    """TorchServe: a .mar with a batching handler, and config.properties."""

    spec = TORCHSERVE_SPEC
    name = TORCHSERVE_SPEC.name
    port_names = TORCHSERVE_SPEC.port_names
    # maxBatchDelay counts whole milliseconds; its counters add each request's time in
    # its batch.
    tuning = TuningTraits(delay_step_us=1000, default_delays_us=TORCHSERVE_DELAYS_US,
                          has_preferred_batch_sizes=False, compute_per_request=True,
                          reconfigured_by="one TorchServe; configs registered through its "
                                          "model API (a device change restarts it)")
    # Its JVM frontend expands its heap during the first minutes of traffic: 34-64 MiB were
    # measured over the TorchServe example's 10 s windows.
    memory_growth_allowance = ByteSize(256 * 2**20, "256MiB")
    request_size_guard = "max_request_size in config.properties"
    # Measuring a running TorchServe reads its Prometheus metrics too.
    optional_part: OptionalPart | None = OptionalPart(
        "torchserve", "TorchServe (server.kind: torchserve)",
        ("ts", "model_archiver", "prometheus_client"))

    def installation_checks(self, loaded: LoadedSpec,
                            env: Mapping[str, str]) -> list[InstallCheck]:
        return checks.installation_checks(env)

    def served_model(self, loaded: LoadedSpec, model_file: Path,
                     docker: Callable[[], DockerEngine], destination: Path) -> Path:
        return model_file

    def image_context(self, loaded: LoadedSpec, artifact: BuiltArtifact,
                      digests: ImageDigests) -> BuildContext:
        return torchserve_context(loaded.spec, artifact.archive, artifact.config_text, digests,
                                  TORCHSERVE_SPEC.production_ports)

    def build(self, loaded: LoadedSpec, model_file: Path, destination: Path) -> BuiltArtifact:
        return build_archive(loaded, model_file, destination)

    def restore(self, loaded: LoadedSpec, archive: Path, digest: str, model_file: Path,
                destination: Path) -> BuiltArtifact:
        return restore_archive(loaded, archive, digest, model_file, destination)

    def launch(self, loaded: LoadedSpec, artifact: BuiltArtifact, ports: Mapping[str, int],
               run_dir: Path, env: Mapping[str, str]) -> TorchServeServer:
        return TorchServeServer(loaded, artifact, ports, run_dir, env)

    def launch_reconfigurable(self, loaded: LoadedSpec, artifact: BuiltArtifact,
                              ports: Mapping[str, int], run_dir: Path,
                              env: Mapping[str, str]) -> TorchServeServer:
        return TorchServeServer(loaded, artifact, ports, run_dir, env, model_api=True)

    def launch_container(self, loaded: LoadedSpec, engine: DockerEngine, image: BuiltImage,
                         ports: Mapping[str, int], run_dir: Path,
                         name: str) -> ModelServer:
        raise ServerError("runtime docker is available for Triton in this version; TorchServe "
                          "runs as a local process")

    def attach(self, loaded: LoadedSpec, endpoints: RunningEndpoints) -> ModelServer:
        if endpoints.management_url is None or endpoints.metrics_url is None:
            raise UsageError("measuring TorchServe needs --management-url and --metrics-url")
        return TorchServeEndpoint(loaded, endpoints.url, endpoints.management_url,
                                  endpoints.metrics_url, endpoints.key_file)

    def lay_out(self, files: ReleaseFiles, destination: Path) -> None:
        deployment.lay_out_model_store(files, destination)

    def kserve_runtime(self, spec: Spec, config: bytes) -> KServeRuntime:
        return deployment.kserve_runtime(spec, config)


TORCHSERVE = TorchServeKind()
