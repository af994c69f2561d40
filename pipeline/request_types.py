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
