"""The HTTP/2 side of the lean gRPC client, without I/O: frames in, stream outcomes out.

The asyncio protocol (`grpc_client.py`) and the blocking caller (`blocking.py`) feed it
what they read and say how to write and how a finished stream is delivered. An answer is
read only as far as its `grpc-status`. Flow control: our receive windows are opened wide
and replenished; the server's are counted in `send_window` for the caller to respect.
"""

from __future__ import annotations

import struct
from typing import Generic, TypeVar

from pipeline.measure.wire.grpc_status import error_kind
from pipeline.measure.wire.hpack import Decoder, HpackError

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = \
    0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8, 0x9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
BIG_WINDOW = 2**31 - 1
MAX_STREAM_ID = 2**31 - 1
FRAME_HEAD = struct.Struct(">BBI")     # type, flags, stream id (after the 3-byte length)

Waiter = TypeVar("Waiter")


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def opening() -> bytes:
    """What a client sends first: no dynamic table (every answer decodes on its own), no
    push, wide windows."""
    settings = struct.pack(">HIHIHI", 0x1, 0, 0x2, 0, 0x4, BIG_WINDOW)
    return PREFACE + frame(SETTINGS, 0, 0, settings) + \
        frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", BIG_WINDOW - 65535))


class H2Session(Generic[Waiter]):
    """One HTTP/2 connection's state; `streams` maps an open stream to its waiter."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.decoder = Decoder(0)
        self.streams: dict[int, Waiter] = {}
        self.next_stream = 1
        self.send_window = 65535
        self.peer_stream_window = 65535
        self.received = 0
        self.header_block: tuple[int, int, bytearray] | None = None
        self.closed = False

    def _write(self, data: bytes) -> None:
        raise NotImplementedError

    def _finish(self, stream_id: int, outcome: str | None) -> None:
        """Deliver a stream's outcome (None: OK) to its waiter, if it still has one."""
        raise NotImplementedError

    def _window_opened(self) -> None:
        """The server's connection window grew."""

    def _fail_streams(self, above: int, kind: str) -> None:
        for stream_id in [s for s in self.streams if s > above]:
            self._finish(stream_id, kind)

    def cancel(self, stream_id: int) -> None:
        if self.streams.pop(stream_id, None) is not None:
            self._write(frame(RST_STREAM, 0, stream_id, struct.pack(">I", 0x8)))

    def feed(self, data: bytes) -> None:
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
            self._write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.received)))
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
            self._write(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            self.closed = True        # no new streams; those it will not answer fail now
            self._fail_streams(int.from_bytes(payload[:4], "big") & MAX_STREAM_ID,
                               "connection")
        elif kind == WINDOW_UPDATE and stream_id == 0:
            self.send_window += int.from_bytes(payload[:4], "big") & MAX_STREAM_ID
            self._window_opened()

    def _settings(self, payload: bytes) -> None:
        for offset in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == 0x4:
                self.peer_stream_window = value
        self._write(frame(SETTINGS, ACK, 0))

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
