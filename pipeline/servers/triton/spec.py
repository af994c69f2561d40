"""What the spec knows of Triton: its ports, what a Triton server can run, and its own block
`server.triton` (config.pbtxt fields the spec does not model)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

from pipeline.servers.triton.config import spec_model_config
from pipeline.servers.triton.passthrough import config_problems
from pipeline.servers.triton.settings import KIND_NAME, TritonSettings, triton_settings
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


def variable_dims_servable(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    """Triton takes -1 in `dims` on every backend the tool renders, except the TensorRT
    engine it builds (`trtexec --shapes`: one fixed shape, no optimization profile)."""
    if spec.server.backend != "tensorrt":
        return
    for group, tensors in (("inputs", spec.model.inputs), ("outputs", spec.model.outputs)):
        for index, tensor in enumerate(tensors):
            if tensor.variable:
                yield (("model", group, index, "shape"),
                       f"backend tensorrt: the engine is built for one fixed shape, and "
                       f"'{tensor.name}' has a variable dimension (-1) {tensor.shape}")


delay_in_microseconds = delay_in_whole(
    "us", "microseconds", " (Triton's max_queue_delay_microseconds)")


def config_passes_through(spec: Spec, document: PositionedDocument,
                          _: Path) -> Iterator[Problem]:
    """`server.triton.config` is a Triton ModelConfig that sets nothing the spec sets."""
    if not triton_settings(spec).config:
        return
    try:
        rendered = spec_model_config(spec, "model", None)
    except ValueError:
        return   # a delay that is no whole number of microseconds: delay_in_microseconds
    yield from config_problems(spec, document, rendered)


TRITON_SPEC = KindSpec(
    name=KIND_NAME,
    production_ports=MappingProxyType({"http": 8000, "grpc": 8001, "metrics": 8002}),
    settings_rules=(docker_backend_serves_format, local_backend_is_python,
                    delay_in_microseconds, variable_dims_servable),
    section=TritonSettings,
    section_rules=(config_passes_through,))
