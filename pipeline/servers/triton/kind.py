"""Triton as a server kind: everything the stages, tune and `measure` ask of it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

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
from pipeline.servers.docker.images import BuildContext, ImageDigests, triton_context
from pipeline.servers.triton import checks, deployment
from pipeline.servers.triton.artifact import build_repository, restore_repository
from pipeline.servers.triton.container import ContainerTritonServer
from pipeline.servers.triton.passthrough import server_flags
from pipeline.servers.triton.server import TritonEndpoint, TritonInstallation, TritonServer
from pipeline.servers.triton.spec import TRITON_SPEC
from pipeline.servers.triton.tensorrt import build_engine
from pipeline.spec.models import LoadedSpec, Spec
from pipeline.spec.units import ByteSize

TRITON_DELAYS_US = (0, 1000, 2000, 5000)


class TritonKind:
    """Triton: a model repository built through Triton's ModelConfig protobuf."""

    spec = TRITON_SPEC
    name = TRITON_SPEC.name
    port_names = TRITON_SPEC.port_names
    tuning = TuningTraits(delay_step_us=1, default_delays_us=TRITON_DELAYS_US,
                          has_preferred_batch_sizes=True, compute_per_request=False,
                          reconfigured_by="one tritonserver; configs loaded through its "
                                          "model-control API")
    # Under 1 MiB was measured over the example's 10 s windows.
    memory_growth_allowance = ByteSize(64 * 2**20, "64MiB")
    request_size_guard = "the proxy or ingress in front of Triton (it has no body limit)"
    optional_part: OptionalPart | None = None   # tritonclient and nvidia-pytriton are core

    def installation_checks(self, loaded: LoadedSpec,
                            env: Mapping[str, str]) -> list[InstallCheck]:
        return checks.installation_checks(loaded.spec.server.runtime)

    def served_model(self, loaded: LoadedSpec, model_file: Path,
                     docker: Callable[[], DockerEngine], destination: Path) -> Path:
        if loaded.spec.server.backend == "tensorrt":
            return build_engine(docker(), loaded.spec, model_file, destination)
        return model_file

    def image_context(self, loaded: LoadedSpec, artifact: BuiltArtifact,
                      digests: ImageDigests) -> BuildContext:
        return triton_context(loaded.spec, artifact.serve_root, digests,
                              TRITON_SPEC.production_ports, server_flags(loaded.spec))

    def build(self, loaded: LoadedSpec, model_file: Path, destination: Path) -> BuiltArtifact:
        return build_repository(loaded, model_file, destination)

    def restore(self, loaded: LoadedSpec, archive: Path, digest: str, model_file: Path,
                destination: Path) -> BuiltArtifact:
        return restore_repository(loaded, archive, digest, model_file, destination)

    def launch(self, loaded: LoadedSpec, artifact: BuiltArtifact, ports: Mapping[str, int],
               run_dir: Path, env: Mapping[str, str]) -> TritonServer:
        return TritonServer(TritonInstallation.find(), artifact.serve_root, loaded, ports,
                            run_dir, env, copy_to=run_dir / "serving-repository")

    def launch_reconfigurable(self, loaded: LoadedSpec, artifact: BuiltArtifact,
                              ports: Mapping[str, int], run_dir: Path,
                              env: Mapping[str, str]) -> TritonServer:
        return TritonServer(TritonInstallation.find(), artifact.serve_root, loaded, ports,
                            run_dir, env, copy_to=run_dir / "serving-repository",
                            model_control=True)

    def launch_container(self, loaded: LoadedSpec, engine: DockerEngine, image: BuiltImage,
                         ports: Mapping[str, int], run_dir: Path,
                         name: str) -> ContainerTritonServer:
        return ContainerTritonServer(engine, image, loaded, ports, run_dir, name)

    def attach(self, loaded: LoadedSpec, endpoints: RunningEndpoints) -> ModelServer:
        return TritonEndpoint(loaded, endpoints.url, endpoints.grpc_url)

    def lay_out(self, files: ReleaseFiles, destination: Path) -> None:
        deployment.lay_out_repository(files, destination)

    def kserve_runtime(self, spec: Spec, config: bytes) -> KServeRuntime:
        return deployment.kserve_runtime(spec)


TRITON = TritonKind()
