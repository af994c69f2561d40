"""Unary gRPC calls with pre-serialized requests, for load generation.

The request message is serialized once; responses are left as bytes (the load
generator needs only the status), so the client's cost per call is gRPC's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc


@dataclass(frozen=True)
class GrpcRequest:
    target: str                 # host:port
    method: str                 # /package.Service/Method
    payload: bytes
    metadata: tuple[tuple[str, str], ...] = field(default_factory=tuple)


class GrpcCaller:
    """One channel (HTTP/2 multiplexes every in-flight call over it)."""

    def __init__(self, request: GrpcRequest) -> None:
        self.request = request
        self.channel = grpc.aio.insecure_channel(
            request.target, options=[("grpc.max_receive_message_length", 64 * 2**20),
                                     ("grpc.max_send_message_length", 64 * 2**20)])
        self.call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(
            request.method)

    async def send(self, timeout_s: float) -> str | None:
        """None on success, else the kind of error."""
        try:
            await self.call(self.request.payload, timeout=timeout_s,
                            metadata=self.request.metadata or None)
        except grpc.aio.AioRpcError as error:
            code = error.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return "timeout"
            if code == grpc.StatusCode.UNAVAILABLE:
                return "connection"
            return f"grpc_{code.name.lower()}"
        return None

    async def close(self) -> None:
        await self.channel.close()
