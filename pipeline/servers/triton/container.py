"""Triton from the serving image, as a container with its production config."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import psutil

from pipeline.errors import ServerError
from pipeline.servers.docker.engine import BuiltImage, Container, DockerEngine
from pipeline.servers.docker.images import TRITON_PORTS
from pipeline.servers.triton.server import TritonEndpoint, log_excerpt
from pipeline.spec.models import LoadedSpec


class ContainerTritonServer(TritonEndpoint):
    """The image's own entrypoint and flags; its named ports published on 127.0.0.1."""

    def __init__(self, engine: DockerEngine, image: BuiltImage, loaded: LoadedSpec,
                 ports: Mapping[str, int], run_dir: Path, name: str) -> None:
        super().__init__(loaded, f"http://127.0.0.1:{ports['http']}",
                         f"127.0.0.1:{ports['grpc']}")
        self.ports = dict(ports)
        self.engine = engine
        self.image = image
        self.run_dir = run_dir
        self.container_name = name
        self.container: Container | None = None

    def start(self) -> None:
        image_spec = self.spec.server.image
        assert image_spec is not None
        self.started_at = time.monotonic()
        self.container = self.engine.run(
            self.image.id, ports={TRITON_PORTS[name]: port for name, port in self.ports.items()},
            shm_size=image_spec.shm_size, memory_limit=image_spec.memory_limit,
            gpus=self.spec.server.device == "gpu", command=None,
            log_path=self.run_dir / "server.log", name=self.container_name)

    def stop(self) -> None:
        if self.container is not None:
            self.container.stop()

    def alive(self) -> bool:
        return self.container is not None and self.container.is_running()

    def process_tree(self) -> list[psutil.Process]:
        return self.container.tree() if self.container is not None else []

    def log_excerpt(self) -> str:
        return log_excerpt(self.container.log_tail(400)) if self.container else "no container"

    def describe_death(self) -> str:
        if self.container is None:
            raise ServerError("the container was never started")
        return f"container {self.container_name} {self.container.describe_exit()}; " \
            f"{self.log_excerpt()}"
