"""Triton from the serving image, as a container with its production config."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import psutil

from pipeline.servers.docker.engine import BuiltImage, DockerEngine
from pipeline.servers.triton.server import TritonEndpoint, log_excerpt
from pipeline.servers.triton.spec import TRITON_SPEC
from pipeline.spec.models import LoadedSpec


class ContainerTritonServer(TritonEndpoint):
    """The image's own entrypoint and flags; its named ports published on 127.0.0.1."""

    def __init__(self, engine: DockerEngine, image: BuiltImage, loaded: LoadedSpec,
                 ports: Mapping[str, int], run_dir: Path, name: str) -> None:
        super().__init__(loaded, f"http://127.0.0.1:{ports['http']}",
                         f"127.0.0.1:{ports['grpc']}")
        self.ports = dict(ports)
        self.image = image
        self.container_name = name
        image_spec = self.spec.server.image
        assert image_spec is not None
        inside = TRITON_SPEC.production_ports
        self.container = engine.container(
            image.id, ports={inside[name]: port for name, port in self.ports.items()},
            shm_size=image_spec.shm_size, memory_limit=image_spec.memory_limit,
            gpus=self.spec.server.device == "gpu", command=None,
            log_path=run_dir / "server.log", name=name)

    def start(self) -> None:
        self.container.start()
        self.started_at = self.container.started_at

    def stop(self) -> None:
        self.container.stop()

    def alive(self) -> bool:
        return self.container.is_running()

    def process_tree(self) -> list[psutil.Process]:
        return self.container.tree()

    def log_excerpt(self) -> str:
        return log_excerpt(self.container.log_tail(400))

    def describe_death(self) -> str:
        return f"container {self.container_name} {self.container.describe_exit()}; " \
            f"{self.log_excerpt()}"
