"""Unary gRPC calls over a lean HTTP/2 connection, for load generation.

grpc.aio costs 3-4x perf_analyzer's client CPU per call (see benchmarks/loadgen.py), most
of it in its completion-queue thread and per-call objects. A gRPC unary call is one
HEADERS and one DATA frame out, HEADERS, DATA and trailing HEADERS back, so this client
speaks HTTP/2 directly on an asyncio protocol, as the HTTP/1.1 client does: the request's
frames are built once (only the stream id changes), and an answer is read only as far as
its `grpc-status`. Flow control: our receive windows are opened wide and replenished;
the server's are respected (a request waits for window), and requests whose message does
not fit one frame of the size every server accepts fall back to grpc.aio.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

import grpc

from pipeline.measure.hpack import Decoder, HpackError, encode_literals

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = \
    0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8, 0x9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
DEFAULT_FRAME = 16384          # the largest frame every HTTP/2 peer accepts
BIG_WINDOW = 2**31 - 1
MAX_STREAM_ID = 2**31 - 1
HEADERS_HEAD = bytes([HEADERS, END_HEADERS])
FRAME_HEAD = struct.Struct(">BBI")     # type, flags, stream id (after the 3-byte length)
_STATUS_NAMES = {code.value[0]: code for code in grpc.StatusCode}


@dataclass(frozen=True)
class GrpcRequest:
    target: str                 # host:port
    method: str                 # /package.Service/Method
    payload: bytes
    metadata: tuple[tuple[str, str], ...] = field(default_factory=tuple)


def error_kind(code: int) -> str | None:
    """How a gRPC status counts: None for OK, else the kind of error."""
    status = _STATUS_NAMES.get(code, grpc.StatusCode.UNKNOWN)
    if status == grpc.StatusCode.OK:
        return None
    if status == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "timeout"
    if status == grpc.StatusCode.UNAVAILABLE:
        return "connection"
    return f"grpc_{status.name.lower()}"


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


class _Connection(asyncio.Protocol):
    """One HTTP/2 connection; every call is a stream on it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.decoder = Decoder(0)
        self.streams: dict[int, asyncio.Future[str | None]] = {}
        self.next_stream = 1
        self.send_window = 65535
        self.peer_stream_window = 65535
        self.window_opened = asyncio.Event()
        self.received = 0
        self.header_block: tuple[int, int, bytearray] | None = None
        self.closed = False
        self.outgoing: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # No dynamic table (every answer decodes on its own), no push, wide windows.
        settings = struct.pack(">HIHIHI", 0x1, 0, 0x2, 0, 0x4, BIG_WINDOW)
        transport.write(PREFACE + _frame(SETTINGS, 0, 0, settings) +
                        _frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", BIG_WINDOW - 65535)))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail_streams(0, "connection")
        self.window_opened.set()

    def _fail_streams(self, above: int, kind: str) -> None:
        for stream_id in [s for s in self.streams if s > above]:
            self._finish(stream_id, kind)

    def _finish(self, stream_id: int, outcome: str | None) -> None:
        waiter = self.streams.pop(stream_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(outcome)

    def data_received(self, data: bytes) -> None:
        if self.buffer:
            self.buffer += data
            data = bytes(self.buffer)
            self.buffer.clear()
        position, size = 0, len(data)
        while size - position >= 9:
            kind, flags, stream_id = FRAME_HEAD.unpack_from(data, position + 3)
            end = position + 9 + int.from_bytes(data[position: position + 3], "big")
            if size < end:
                break
            if kind == DATA:         # only its size matters: not copied
                self._data_received(end - position - 9, flags, stream_id & MAX_STREAM_ID)
            else:
                self._frame_received(kind, flags, stream_id & MAX_STREAM_ID,
                                     data[position + 9: end])
            position = end
        if position < size:
            self.buffer += data[position:]

    def _data_received(self, length: int, flags: int, stream_id: int) -> None:
        self.received += length
        if self.received > BIG_WINDOW // 2:
            self._write(_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.received)))
            self.received = 0
        if flags & END_STREAM:     # a well-formed answer ends with trailers, not data
            self._finish(stream_id, "grpc_internal")

    def _frame_received(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind in (HEADERS, CONTINUATION):
            self._header_fragment(kind, flags, stream_id, payload)
        elif kind == RST_STREAM:
            code = int.from_bytes(payload[:4], "big")
            self._finish(stream_id, "connection" if code == 0x7 else
                         "grpc_cancelled" if code == 0x8 else "grpc_internal")
        elif kind == SETTINGS and not flags & ACK:
            self._settings(payload)
        elif kind == PING and not flags & ACK:
            self._write(_frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            self.closed = True        # no new streams; those it will not answer fail now
            self._fail_streams(int.from_bytes(payload[:4], "big") & MAX_STREAM_ID,
                               "connection")
        elif kind == WINDOW_UPDATE and stream_id == 0:
            self.send_window += int.from_bytes(payload[:4], "big") & MAX_STREAM_ID
            self.window_opened.set()

    def _settings(self, payload: bytes) -> None:
        for offset in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == 0x4:
                self.peer_stream_window = value
        self._write(_frame(SETTINGS, ACK, 0))

    def _header_fragment(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == HEADERS:
            start = 1 if flags & PADDED else 0
            pad = payload[0] if flags & PADDED else 0
            if flags & PRIORITY:
                start += 5
            self.header_block = (stream_id, flags, bytearray(payload[start: len(payload) - pad]))
        elif self.header_block is not None:
            self.header_block[2].extend(payload)
        if not flags & END_HEADERS or self.header_block is None:
            return
        stream_id, first_flags, block = self.header_block
        self.header_block = None
        try:
            headers = self.decoder.decode(bytes(block))
        except HpackError:
            self._fail_streams(0, "connection")
            self.closed = True
            return
        if stream_id not in self.streams:
            return
        status = headers.get(":status")
        if status is not None and status != "200":
            self._finish(stream_id, f"http_{status}")
        elif "grpc-status" in headers:
            code = headers["grpc-status"]
            self._finish(stream_id, error_kind(int(code)) if code and code.isdigit()
                         else "grpc_unknown")
        elif first_flags & END_STREAM:
            self._finish(stream_id, "grpc_internal")    # ended without a status

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

    def cancel(self, stream_id: int) -> None:
        if self.streams.pop(stream_id, None) is not None:
            self._write(_frame(RST_STREAM, 0, stream_id, struct.pack(">I", 0x8)))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[str | None]) -> None:
    if not waiter.done():
        waiter.set_result("timeout")


class GrpcCaller:
    """Unary calls of one pre-serialised request, multiplexed on one HTTP/2 connection."""

    def __init__(self, request: GrpcRequest) -> None:
        self.request = request
        host, _, port = request.target.rpartition(":")
        self.host, self.port = host.strip("[]") or "127.0.0.1", int(port)
        self.message = b"\x00" + struct.pack(">I", len(request.payload)) + request.payload
        self.data_head = len(self.message).to_bytes(3, "big") + bytes([DATA, END_STREAM])
        self.connection: _Connection | None = None
        self.opened: list[_Connection] = []
        self.connecting: asyncio.Future[_Connection] | None = None
        self.fallback = _AioCaller(request) if len(self.message) > DEFAULT_FRAME else None
        self.header_blocks: dict[float, bytes] = {}

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

    async def _connect(self) -> _Connection:
        stale = self.connecting is not None and self.connecting.done() and (
            self.connecting.exception() is not None or self.connecting.result().closed)
        if self.connecting is None or stale:
            self.connecting = asyncio.ensure_future(self._open())
        return await asyncio.shield(self.connecting)

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(_Connection, self.host, self.port)
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
        size = len(self.message)
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
        headers = self._headers(timeout_s)
        stream = stream_id.to_bytes(4, "big")
        connection.send_call(b"".join((len(headers).to_bytes(3, "big"), HEADERS_HEAD, stream,
                                       headers, self.data_head, stream, self.message)))
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
