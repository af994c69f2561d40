"""How a load generator sends one request: over HTTP (a pool of raw connections) or gRPC."""

from __future__ import annotations

from typing import Protocol

from pipeline.measure.wire.grpc_client import GrpcCaller
from pipeline.measure.wire.http_client import WireError, WirePool, status_error
from pipeline.request_types import GrpcRequest, HttpRequest

Target = HttpRequest | GrpcRequest


class Transport(Protocol):
    async def send(self, timeout_s: float) -> str | None: ...
    async def close(self) -> None: ...


class _HttpTransport:
    def __init__(self, request: HttpRequest) -> None:
        self.pool = WirePool(request)

    async def send(self, timeout_s: float) -> str | None:
        try:
            status = await self.pool.send(timeout_s)
        except TimeoutError:
            return "timeout"
        except WireError:
            return "connection"
        return status_error(status)

    async def close(self) -> None:
        self.pool.close()


def transport_for(target: Target) -> Transport:
    if isinstance(target, GrpcRequest):
        return GrpcCaller(target)
    return _HttpTransport(target)
