"""A lean HTTP/1.1 keep-alive client for load generation.

The load generator must not be the bottleneck: the request bytes are built once,
each connection is a bare asyncio protocol, and a response is parsed only as far
as its status and length. It speaks exactly what Triton's and TorchServe's HTTP
front ends answer: Content-Length bodies, or chunked ones.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from pipeline.request_types import HttpRequest

MAX_HEADER = 64 * 1024


class WireError(Exception):
    """The connection failed or the answer was not HTTP."""


def status_error(status: int) -> str | None:
    """How an HTTP status counts: None for 200, else the kind of error."""
    return None if status == 200 else f"http_{status}"


def encode_request(request: HttpRequest) -> tuple[str, int, bytes]:
    """(host, port, the bytes of a complete keep-alive request)."""
    parts = urlsplit(request.url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 80
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [f"{request.method} {path or '/'} HTTP/1.1", f"Host: {host}:{port}",
             f"Content-Length: {len(request.body)}"]
    lines += [f"{name}: {value}" for name, value in request.headers.items()
              if name.lower() not in ("host", "content-length", "connection")]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return host, port, head + request.body


def parse_response(buffer: bytes | bytearray) -> tuple[int, int, bool] | None:
    """(status, where the response ends, whether the server closes after it) once `buffer`
    holds a whole response, else None. WireError if it is not one we can read."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if len(buffer) > MAX_HEADER:
            raise WireError("response header too large")
        return None
    head = bytes(buffer[:end]).lower()
    if not head.startswith(b"http/1."):
        raise WireError("not an HTTP/1.x response")
    status = int(head[9:12])
    server_closes = b"\r\nconnection: close" in head
    body_start = end + 4
    marker = head.find(b"\r\ncontent-length:")
    if marker >= 0:
        value_end = head.find(b"\r\n", marker + 2)
        length = int(head[marker + 17: value_end if value_end >= 0 else len(head)])
        if len(buffer) < body_start + length:
            return None
        return status, body_start + length, server_closes
    if b"\r\ntransfer-encoding: chunked" in head:
        terminator = buffer.find(b"\r\n0\r\n\r\n", body_start - 2)
        if terminator < 0:
            return None
        return status, terminator + 7, server_closes
    # No length: the body runs to the end of the connection (never seen from our servers).
    raise WireError("response without Content-Length or chunked encoding")


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[int] | None = None
        self.closed = False
        # TorchServe answers every error with "connection: close" and then closes: a
        # connection reused after one fails the next request as a spurious connection error.
        self.server_closes = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(WireError("connection closed by the server"))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is None or self.waiter.done():
            return
        try:
            status = self._complete_response()
        except WireError as error:
            self.waiter.set_exception(error)
            return
        if status is not None:
            self.waiter.set_result(status)

    def _complete_response(self) -> int | None:
        """The status once a whole response is buffered (and consumed), else None."""
        parsed = parse_response(self.buffer)
        if parsed is None:
            return None
        status, end, self.server_closes = parsed
        del self.buffer[:end]
        return status

    @property
    def usable(self) -> bool:
        """Neither closed nor closing (a peer's FIN is seen before connection_lost runs)."""
        return not self.closed and self.transport is not None and \
            not self.transport.is_closing()

    def send(self, payload: bytes) -> asyncio.Future[int]:
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        if not self.usable:  # a write to a closed transport is dropped, never answered
            self.waiter.set_exception(WireError("connection closed by the server"))
            return self.waiter
        assert self.transport is not None
        self.transport.write(payload)
        return self.waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _expire(waiter: asyncio.Future[int]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class WirePool:
    """Idle keep-alive connections to one server, opened on demand."""

    def __init__(self, request: HttpRequest) -> None:
        self.host, self.port, self.payload = encode_request(request)
        self.idle: list[_Connection] = []
        self.all: list[_Connection] = []

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await loop.create_connection(_Connection, self.host, self.port)
        except OSError as error:
            raise WireError(f"cannot connect: {error.strerror or error}") from None
        self.all.append(protocol)
        return protocol

    async def send(self, timeout_s: float, payload: bytes | None = None) -> int:
        """One request (the pool's own, or `payload`: another request's bytes to the same
        server); the HTTP status. WireError if the connection fails, TimeoutError after
        `timeout_s` (the connection is then dropped: its answer may still come)."""
        connection = self._idle_open() or await self._connect()
        waiter = connection.send(self.payload if payload is None else payload)
        timer = asyncio.get_running_loop().call_later(timeout_s, _expire, waiter)
        try:
            status = await waiter
        except BaseException:
            connection.close()
            raise
        finally:
            timer.cancel()
        if connection.closed or connection.server_closes:
            connection.close()
        else:
            self.idle.append(connection)
        return status

    def _idle_open(self) -> _Connection | None:
        """An idle connection the server has not closed meanwhile (a keep-alive timeout, or
        TorchServe's close after an error): a request written to a closed one is lost."""
        while self.idle:
            connection = self.idle.pop()
            if connection.usable:
                return connection
        return None

    def close(self) -> None:
        for connection in self.all:
            connection.close()
        self.all.clear()
        self.idle.clear()
