"""What the spec knows of Triton: its ports and what a Triton server can run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

from pipeline.spec.kind_specs import KindSpec
from pipeline.spec.models import Spec
from pipeline.spec.positions import PositionedDocument
from pipeline.spec.problems import Problem
from pipeline.spec.rules import delay_in_whole, docker_backend_serves_format


def local_backend_is_python(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    server = spec.server
    if server.runtime != "docker" and server.backend != "python":
        yield (("server", "backend"), f"'{server.backend}' exists only in NVIDIA's Triton "
               "images (runtime: docker); the local tritonserver has the python backend, "
               "which runs TorchScript, eager and ONNX models")


delay_in_microseconds = delay_in_whole(
    "us", "microseconds", " (Triton's max_queue_delay_microseconds)")


TRITON_SPEC = KindSpec(
    name="triton",
    production_ports=MappingProxyType({"http": 8000, "grpc": 8001, "metrics": 8002}),
    settings_rules=(docker_backend_serves_format, local_backend_is_python,
                    delay_in_microseconds))
