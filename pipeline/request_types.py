"""The requests a server kind renders and the load clients send: one HTTP or gRPC call,
already encoded. A leaf module, below both `pipeline.servers` and `pipeline.measure`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class HttpRequest:
    method: str
    url: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class GrpcRequest:
    target: str                 # host:port
    method: str                 # /package.Service/Method
    payload: bytes
    metadata: tuple[tuple[str, str], ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class RequestMix:
    """Several HTTP requests to one server, sent in turn: the n-th request sent is
    `requests[order[n % len(order)]]`, of the size bucket `sizes[order[...]]` (how the
    latency report groups its percentiles; None: in no bucket, only the overall figures)."""

    requests: tuple[HttpRequest, ...]
    sizes: tuple[str | None, ...]
    order: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.requests or len(self.sizes) != len(self.requests) or not self.order:
            raise ValueError("a mix needs requests, one size bucket each, and an order")
        if not all(0 <= index < len(self.requests) for index in self.order):
            raise ValueError("the order of a mix indexes its requests")
