"""What a window sends: one request, rendered by the server for a batch of inputs."""

from __future__ import annotations

from typing import Literal

from pipeline.errors import ServerError
from pipeline.measure.loadgen import Target
from pipeline.model.tensors import Batch, load_samples, take
from pipeline.servers.base import ModelServer
from pipeline.spec.models import LoadedSpec


def request_target(server: ModelServer, batch: Batch,
                   protocol: Literal["http", "grpc"]) -> Target:
    """`batch` as `server` takes it over `protocol`; ServerError for a server that has no
    gRPC request."""
    if protocol == "grpc":
        request = server.grpc_request(batch)
        if request is None:
            raise ServerError(f"{server.kind} is not measured over gRPC")
        return request
    return server.infer_request(batch)


def spec_target(loaded: LoadedSpec, server: ModelServer) -> Target:
    """The spec's representative inputs (parity's samples) at the latency stage's batch size,
    over its protocol: what every window of a run sends."""
    spec = loaded.spec
    samples = load_samples(spec.model, spec.stages.parity, loaded.workspace)
    batch = take(samples, spec.stages.latency.batch_size)
    return request_target(server, batch, spec.stages.latency.protocol)
