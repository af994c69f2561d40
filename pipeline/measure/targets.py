"""What a window sends: one request, rendered by the server for a batch of inputs, or a mix
of requests of the sizes `model.sizes` declares, in proportion to their weights."""

from __future__ import annotations

from typing import Literal

import numpy as np

from pipeline.errors import ServerError, UsageError
from pipeline.measure.loadgen import Target
from pipeline.model.tensors import Batch, generate_inputs, load_samples, take
from pipeline.request_types import RequestMix
from pipeline.servers.base import ModelServer
from pipeline.spec.models import LoadedSpec
from pipeline.spec.request_data import RequestDataError, read_request_data
from pipeline.spec.sizes import SizesSpec
from pipeline.spec.stage_settings import DataOrder, LoadStage

ORDER_LENGTH = 4096
"""Requests drawn before a mix's order repeats: the weights' proportions hold to about
1/64 of a percent over any run that sends the whole order."""


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


def spec_target(loaded: LoadedSpec, server: ModelServer,
                stage: LoadStage = "latency") -> Target:
    """What every window of `stage` sends: the requests of its data file; else, with
    variable dimensions, a mix of one request per declared size drawn by the sizes'
    weights; else the spec's representative inputs (parity's samples) at the latency
    stage's batch size, over its protocol."""
    spec = loaded.spec
    data, order = spec.stages.request_data(stage)
    if data is not None:
        return data_mix(loaded, server, data, order)
    if spec.model.sizes is not None:
        return size_mix(loaded, server, spec.model.sizes)
    samples = load_samples(spec.model, spec.stages.parity, loaded.workspace)
    batch = take(samples, spec.stages.latency.batch_size)
    return request_target(server, batch, spec.stages.latency.protocol)


def size_mix(loaded: LoadedSpec, server: ModelServer, sizes: SizesSpec) -> RequestMix:
    """One request per size (generated inputs at the latency stage's batch size), sent in an
    order drawn with the sizes' weights (seeded by parity.seed: the same every run)."""
    spec = loaded.spec
    parity, batch_size = spec.stages.parity, spec.stages.latency.batch_size
    requests = tuple(
        server.infer_request(take(generate_inputs(spec.model.inputs, batch_size,
                                                  parity.seed + index, size), batch_size))
        for index, size in enumerate(sizes.values))
    return RequestMix(requests, tuple(str(size) for size in sizes.values),
                      drawn_order(sizes.probabilities(), parity.seed))


def data_mix(loaded: LoadedSpec, server: ModelServer, data: str, order: DataOrder
             ) -> RequestMix:
    """The data file's requests, in file order or drawn from it (seeded by parity.seed).
    UsageError for a file that validate would refuse (changed since)."""
    spec = loaded.spec
    try:
        read = read_request_data(loaded.resolve(data), data, spec.model.inputs,
                                 spec.stages.latency.batch_size)
    except RequestDataError as error:
        raise UsageError(str(error)) from None
    count = len(read.requests)
    drawn = tuple(range(count)) if order == "in_order" else \
        drawn_order([1 / count] * count, spec.stages.parity.seed)
    return RequestMix(tuple(server.infer_request(batch) for batch in read.requests),
                      tuple(read.sizes), drawn)


def drawn_order(probabilities: list[float], seed: int, length: int = ORDER_LENGTH
                ) -> tuple[int, ...]:
    """`length` indices drawn with `probabilities`, reproducibly."""
    rng = np.random.default_rng(seed)
    return tuple(int(index) for index in rng.choice(len(probabilities), size=length,
                                                    p=probabilities))
