"""What the spec knows of TorchServe: its ports, what it can run, how it is measured, and its
own block `server.torchserve` (config.properties keys and model-level settings the spec does
not model)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

from pipeline.servers.torchserve.passthrough import settings_problems
from pipeline.servers.torchserve.settings import KIND_NAME, TorchServeSettings
from pipeline.spec.kind_specs import KindSpec
from pipeline.spec.models import Spec
from pipeline.spec.positions import PositionedDocument
from pipeline.spec.problems import Problem
from pipeline.spec.rules import delay_in_whole, docker_backend_serves_format


def runs_as_a_process(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    if spec.server.runtime == "docker":
        yield (("server", "runtime"), "runtime docker is available for Triton in this "
               "version; TorchServe runs as a local process (its image can still be built "
               "and published with server.image)")


def no_backend(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    if spec.server.backend != "python":
        yield (("server", "backend"), "server.backend is Triton's; TorchServe runs the model "
               "in its Python workers (leave it out)")


delay_in_milliseconds = delay_in_whole(
    "ms", "milliseconds", ": TorchServe's maxBatchDelay counts milliseconds, and rounding "
    "would change the latency you measured")


def load_over_http(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    if spec.stages.latency.protocol == "grpc":
        yield (("stages", "latency", "protocol"), "gRPC load is measured for Triton only; use "
               "http with TorchServe")


def settings_pass_through(spec: Spec, document: PositionedDocument,
                          _: Path) -> Iterator[Problem]:
    """`server.torchserve` holds TorchServe's own keys, none that the spec sets."""
    yield from settings_problems(spec, document)


TORCHSERVE_SPEC = KindSpec(
    name=KIND_NAME,
    production_ports=MappingProxyType({"inference": 8080, "management": 8081, "metrics": 8082,
                                       "grpc_inference": 7070, "grpc_management": 7071}),
    settings_rules=(runs_as_a_process, docker_backend_serves_format, no_backend,
                    delay_in_milliseconds),
    load_rules=(load_over_http,),
    section=TorchServeSettings,
    section_rules=(settings_pass_through,),
    http_port="inference")
