"""Unary gRPC calls over a lean HTTP/2 connection, for load generation.

grpc.aio costs 3-4x perf_analyzer's client CPU per call (see benchmarks/loadgen.py), most
of it in its completion-queue thread and per-call objects. A gRPC unary call is one
HEADERS and one DATA frame out, HEADERS, DATA and trailing HEADERS back, so this client
speaks HTTP/2 directly on an asyncio protocol, as the HTTP/1.1 client does: the request's
frames are built once (only the stream id changes), and an answer is read only as far as
its `grpc-status` (`h2_session.py`). The server's flow-control windows are respected (a
request waits for window), and requests whose message does not fit one frame of the size
every server accepts fall back to grpc.aio.
"""

from __future__ import annotations

import asyncio
import struct

import grpc

from pipeline.measure.wire.grpc_status import error_kind
from pipeline.measure.wire.h2_session import (
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    MAX_STREAM_ID,
    H2Session,
    opening,
)
from pipeline.measure.wire.hpack import encode_literals
from pipeline.request_types import GrpcRequest

__all__ = ["CallFrames", "GrpcCaller", "error_kind"]

DEFAULT_FRAME = 16384          # the largest frame every HTTP/2 peer accepts
HEADERS_HEAD = bytes([HEADERS, END_HEADERS])


class CallFrames:
    """A unary call's frames, built once: only the stream id changes from call to call."""

    def __init__(self, request: GrpcRequest) -> None:
        self.request = request
        host, _, port = request.target.rpartition(":")
        self.host, self.port = host.strip("[]") or "127.0.0.1", int(port)
        self.message = b"\x00" + struct.pack(">I", len(request.payload)) + request.payload
        self.data_head = len(self.message).to_bytes(3, "big") + bytes([DATA, END_STREAM])
        self.header_blocks: dict[float, bytes] = {}

    @property
    def fits_one_frame(self) -> bool:
        return len(self.message) <= DEFAULT_FRAME

    def _headers(self, timeout_s: float) -> bytes:
        block = self.header_blocks.get(timeout_s)
        if block is None:
            block = encode_literals([
                (":method", "POST"), (":scheme", "http"), (":path", self.request.method),
                (":authority", self.request.target), ("content-type", "application/grpc"),
                ("te", "trailers"), ("grpc-timeout", f"{max(1, int(timeout_s * 1000))}m"),
                *self.request.metadata])
            self.header_blocks[timeout_s] = block
        return block

    def frames(self, stream_id: int, timeout_s: float) -> bytes:
        headers = self._headers(timeout_s)
        stream = stream_id.to_bytes(4, "big")
        return b"".join((len(headers).to_bytes(3, "big"), HEADERS_HEAD, stream, headers,
                         self.data_head, stream, self.message))


class _Connection(H2Session["asyncio.Future[str | None]"], asyncio.Protocol):
    """One HTTP/2 connection; every call is a stream on it."""

    def __init__(self) -> None:
        super().__init__()
        self.transport: asyncio.Transport | None = None
        self.window_opened = asyncio.Event()
        self.outgoing: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(opening())

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail_streams(0, "connection")
        self.window_opened.set()

    def data_received(self, data: bytes) -> None:
        self.feed(data)

    def _window_opened(self) -> None:
        self.window_opened.set()

    def _finish(self, stream_id: int, outcome: str | None) -> None:
        waiter = self.streams.pop(stream_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(outcome)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def send_call(self, frames: bytes) -> None:
        """A call's frames; with others in flight, those sent in the same turn of the event
        loop go out in one write (on loopback, a send costs as much as the rest of a call)."""
        if len(self.streams) <= 1:
            self._write(frames)
            return
        if not self.outgoing:
            asyncio.get_running_loop().call_soon(self._flush)
        self.outgoing.append(frames)

    def _flush(self) -> None:
        self._write(b"".join(self.outgoing))
        self.outgoing.clear()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[str | None]) -> None:
    if not waiter.done():
        waiter.set_result("timeout")


class GrpcCaller:
    """Unary calls of one pre-serialised request, multiplexed on one HTTP/2 connection."""

    def __init__(self, request: GrpcRequest) -> None:
        self.call = CallFrames(request)
        self.connection: _Connection | None = None
        self.opened: list[_Connection] = []
        self.connecting: asyncio.Future[_Connection] | None = None
        self.fallback = None if self.call.fits_one_frame else _AioCaller(request)

    async def _connect(self) -> _Connection:
        stale = self.connecting is not None and self.connecting.done() and (
            self.connecting.exception() is not None or self.connecting.result().closed)
        if self.connecting is None or stale:
            self.connecting = asyncio.ensure_future(self._open())
        return await asyncio.shield(self.connecting)

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(_Connection, self.call.host,
                                                    self.call.port)
        self.connection = protocol
        self.opened.append(protocol)
        return protocol

    async def send(self, timeout_s: float) -> str | None:
        """None on success, else the kind of error."""
        if self.fallback is not None:
            return await self.fallback.send(timeout_s)
        connection = self.connection
        if connection is None or connection.closed or connection.next_stream > MAX_STREAM_ID:
            try:
                connection = await self._connect()
            except OSError:
                return "connection"
        size = len(self.call.message)
        while connection.send_window < size and not connection.closed:
            connection.window_opened.clear()
            await connection.window_opened.wait()
        if connection.closed:
            return "connection"
        connection.send_window -= size
        stream_id = connection.next_stream
        connection.next_stream += 2
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[str | None] = loop.create_future()
        connection.streams[stream_id] = waiter
        connection.send_call(self.call.frames(stream_id, timeout_s))
        timer = loop.call_later(timeout_s, _expire, waiter)
        try:
            outcome = await waiter
        finally:
            timer.cancel()
            connection.cancel(stream_id)      # only if still open: a timeout, a cancel
        return outcome

    async def close(self) -> None:
        for connection in self.opened:      # a GOAWAY leaves one behind its successor
            connection.close()
        if self.fallback is not None:
            await self.fallback.close()


class _AioCaller:
    """grpc.aio, for requests larger than one default frame."""

    def __init__(self, request: GrpcRequest) -> None:
        self.request = request
        self.channel = grpc.aio.insecure_channel(
            request.target, options=[("grpc.max_receive_message_length", 64 * 2**20),
                                     ("grpc.max_send_message_length", 64 * 2**20)])
        self.call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(
            request.method)

    async def send(self, timeout_s: float) -> str | None:
        try:
            await self.call(self.request.payload, timeout=timeout_s,
                            metadata=self.request.metadata or None)
        except grpc.aio.AioRpcError as error:
            return error_kind(error.code().value[0])
        return None

    async def close(self) -> None:
        await self.channel.close()
