"""How a load generator sends its requests: one over HTTP (a pool of raw connections) or
gRPC, or a mix of HTTP requests in turn, each send naming its size bucket."""

from __future__ import annotations

from typing import NamedTuple, Protocol

from pipeline.measure.wire.grpc_client import GrpcCaller
from pipeline.measure.wire.http_client import WireError, WirePool, encode_request, status_error
from pipeline.request_types import GrpcRequest, HttpRequest, RequestMix

Target = HttpRequest | GrpcRequest | RequestMix


class Transport(Protocol):
    async def send(self, timeout_s: float) -> str | None: ...
    async def close(self) -> None: ...


class Sent(NamedTuple):
    error: str | None       # None: answered 200
    size: str | None        # the size bucket of a mix's request; None for a single request


class SizedTransport(Protocol):
    async def send(self, timeout_s: float) -> Sent: ...
    async def close(self) -> None: ...


async def _http_send(pool: WirePool, timeout_s: float, payload: bytes | None = None
                     ) -> str | None:
    try:
        status = await pool.send(timeout_s, payload)
    except TimeoutError:
        return "timeout"
    except WireError:
        return "connection"
    return status_error(status)


class _HttpTransport:
    def __init__(self, request: HttpRequest) -> None:
        self.pool = WirePool(request)

    async def send(self, timeout_s: float) -> str | None:
        return await _http_send(self.pool, timeout_s)

    async def close(self) -> None:
        self.pool.close()


class _Single:
    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    async def send(self, timeout_s: float) -> Sent:
        return Sent(await self.transport.send(timeout_s), None)

    async def close(self) -> None:
        await self.transport.close()


class MixTransport:
    """A mix's requests in its order over one pool of connections (one server)."""

    def __init__(self, mix: RequestMix) -> None:
        self.mix = mix
        self.pool = WirePool(mix.requests[0])
        self.payloads = [encode_request(request)[2] for request in mix.requests]

    async def send(self, timeout_s: float) -> Sent:
        index = self.mix.next_index()
        return Sent(await _http_send(self.pool, timeout_s, self.payloads[index]),
                    self.mix.sizes[index])

    async def close(self) -> None:
        self.pool.close()


def transport_for(target: HttpRequest | GrpcRequest) -> Transport:
    if isinstance(target, GrpcRequest):
        return GrpcCaller(target)
    return _HttpTransport(target)


def sized_transport(target: Target) -> SizedTransport:
    """How the load loops send `target`."""
    if isinstance(target, RequestMix):
        return MixTransport(target)
    return _Single(transport_for(target))
