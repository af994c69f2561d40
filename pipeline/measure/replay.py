"""A request log as an open-loop window: each logged request sent at its logged instant
(shifted to the replay's start, divided by the speed), with the log's payloads or a data
file's; counted in time buckets, which are the report's series over time and the
percentile verdict's blocks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.errors import UsageError
from pipeline.measure.open_loop import Phase
from pipeline.measure.targets import data_mix, spec_target
from pipeline.request_types import GrpcRequest, RequestMix
from pipeline.servers.base import ModelServer
from pipeline.spec.models import LoadedSpec
from pipeline.spec.replay_log import ReplayLog

MAX_BUCKETS = 120
MIN_BUCKETS = 10
"""A replay is counted in buckets of 1 s; in 10 for a replay under 10 s (the percentile
verdict's blocks), in 120 for one over 2 min."""


@dataclass(frozen=True)
class ReplaySchedule:
    """The buckets (one Phase each, named by its index) and every request's send offset
    (s from the replay's start) with its bucket's name."""

    phases: list[Phase]
    plan: list[tuple[float, str]]
    bucket_s: float

    def offered(self) -> list[int]:
        """Requests the log offers in each bucket."""
        counts = [0] * len(self.phases)
        for _, name in self.plan:
            counts[int(name)] += 1
        return counts


def replay_schedule(offsets: Sequence[float], speed: float) -> ReplaySchedule:
    """The log's offsets divided by `speed`, counted in buckets (see MIN_BUCKETS)."""
    sends = [offset / speed for offset in offsets]
    span = sends[-1] if sends else 0.0
    bucket_s = max(span / MAX_BUCKETS, min(1.0, span / MIN_BUCKETS)) if span > 0 else 1.0
    count = int(span / bucket_s) + 1
    indices = [min(int(send / bucket_s), count - 1) for send in sends]
    offered = [0] * count
    for index in indices:
        offered[index] += 1
    phases = [Phase(str(index), max(offered[index], 1) / bucket_s, bucket_s)
              for index in range(count)]
    return ReplaySchedule(phases, [(send, str(index)) for send, index in
                                   zip(sends, indices, strict=True)], bucket_s)


def replay_target(loaded: LoadedSpec, server: ModelServer, log: ReplayLog) -> RequestMix:
    """What each logged request sends, as a mix whose order has one entry per logged
    request: its own inputs; else the data file's requests in file order (stages.replay.data,
    else stages.latency.data); else what the latency stage sends."""
    requests = len(log.offsets)
    if log.requests is not None:
        return RequestMix(tuple(server.infer_request(batch) for batch in log.requests),
                          tuple(log.sizes), tuple(range(requests)))
    spec = loaded.spec
    replay = spec.stages.replay
    data = (replay.data if replay is not None else None) or spec.stages.latency.data
    if data is not None:
        mix = data_mix(loaded, server, data, "in_order")
    else:
        target = spec_target(loaded, server)
        if isinstance(target, GrpcRequest):
            raise UsageError("stages.replay is sent over http (stages.latency.protocol: http)")
        mix = target if isinstance(target, RequestMix) else RequestMix((target,), (None,), (0,))
    return RequestMix(mix.requests, mix.sizes,
                      tuple(mix.order[index % len(mix.order)] for index in range(requests)))


def warmup_target(mix: RequestMix) -> RequestMix:
    """The replay's payloads in the same order for the warm-up, on a cursor of its own (the
    replay's mix starts from its first request)."""
    return RequestMix(mix.requests, mix.sizes, mix.order)
