"""`runtime: docker` (or an image to build): the Docker daemon answers, the base image is
present or its registry would serve it (asked for its manifest, nothing pulled)."""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.errors import PipelineError
from pipeline.preflight.checks import Check
from pipeline.servers.docker.engine import DockerEngine
from pipeline.spec.models import LoadedSpec

# The registry must answer quickly; a pull itself is for the build stage.
REGISTRY_TIMEOUT_S = 8


def needs_docker(loaded: LoadedSpec) -> bool:
    server = loaded.spec.server
    return server.runtime == "docker" or server.backend == "tensorrt" or (
        server.image is not None and server.image.base is not None)


def docker_checks(loaded: LoadedSpec, env: Mapping[str, str]) -> list[Check]:
    if not needs_docker(loaded):
        return [Check.skipped("docker", "no serving image in the spec")]
    try:
        engine = DockerEngine(env)
    except PipelineError as error:
        return [Check.failed("docker", str(error))]
    checks = [Check.ok("docker", f"daemon at {engine.address} answers")]
    image = loaded.spec.server.image
    base = image.base if image is not None else None
    if base is None:
        return [*checks, Check.failed("docker.base", "server.image.base is not set: name the "
                                                     "serving image's base")]
    checks.append(_base_image(engine, base))
    if loaded.spec.server.device == "gpu" and not engine.has_gpus():
        checks.append(Check.failed("docker.gpus", f"the Docker host at {engine.address} has no "
                                                  "nvidia runtime: install the NVIDIA Container "
                                                  "Toolkit"))
    return checks


def _base_image(engine: DockerEngine, base: str) -> Check:
    import docker

    try:
        engine.client.images.get(base)
        return Check.ok("docker.base", f"{base} is on the Docker host")
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as error:
        return Check.failed("docker.base", f"cannot look up {base}: {_first_line(error)}")
    engine.client.api.timeout = REGISTRY_TIMEOUT_S
    try:
        engine.client.api.inspect_distribution(base)  # type: ignore[no-untyped-call]
    except Exception as error:  # the SDK raises several kinds for "not there"
        return Check.failed("docker.base", f"base image {base} is not on the Docker host at "
                                           f"{engine.address} and its registry does not serve "
                                           f"it: {_first_line(error)} (docker pull it, or fix "
                                           "server.image.base)")
    return Check.ok("docker.base", f"{base} is pullable")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
