"""Blocking callers for the closed loop at low concurrency: one socket per thread.

With one request in flight, every answer wakes an idle process; through asyncio that
wake-up runs the event loop, a protocol callback, a future and a task step, and costs
more client CPU per request than perf_analyzer's C++ (benchmarks/loadgen.py). Here a
call is a `sendall` of the pre-built request and a blocking `recv`, parsed by the same
functions as the asyncio clients (`parse_response`, `H2Session`) into the same error
kinds. The kernel's socket timeouts bound each wait; `interrupt` (from another thread)
ends a blocked call at once. Over HTTP a few such threads still cost less than the event
loop; over gRPC only one does (`blocking_callers`).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from typing import Protocol

from pipeline.measure.wire.grpc_client import CallFrames
from pipeline.measure.wire.h2_session import MAX_STREAM_ID, H2Session, opening
from pipeline.measure.wire.http_client import (
    WireError,
    encode_request,
    parse_response,
    status_error,
)
from pipeline.request_types import GrpcRequest, HttpRequest, RequestMix

RECV_SIZE = 65536
# Measured on 2 cores (benchmarks/loadgen.py): threads cost less than asyncio up to here.
HTTP_THREADS_UP_TO = 4


class BlockingCaller(Protocol):
    stopping: bool
    size: str | None        # the size bucket of the request sent last (a mix's)

    def send(self, timeout_s: float) -> str | None: ...
    def interrupt(self) -> None: ...
    def close(self) -> None: ...


def _kernel_timeout(sock: socket.socket, option: int, seconds: float) -> None:
    whole = int(seconds)
    sock.setsockopt(socket.SOL_SOCKET, option,
                    struct.pack("ll", whole, max(1, int((seconds - whole) * 1e6))))


class _Socket:
    """One connection at a time, reconnected on demand; reads against a call's deadline."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.sock: socket.socket | None = None
        self.stopping = False
        self.timeout_s = 0.0

    def connect(self, timeout_s: float) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)    # as asyncio does
        # A blocking socket with the kernel's timeouts: with Python's own, every send and
        # recv is preceded by a poll (3-6 µs per call more, see benchmarks/loadgen.py).
        sock.settimeout(None)
        _kernel_timeout(sock, socket.SO_SNDTIMEO, timeout_s)
        _kernel_timeout(sock, socket.SO_RCVTIMEO, timeout_s)
        self.sock, self.timeout_s = sock, timeout_s
        if self.stopping:       # interrupted while connecting
            self.drop()
            raise ConnectionAbortedError("stopped")
        return sock

    def recv(self, sock: socket.socket, deadline: float | None) -> bytes:
        """The next bytes (b"": closed). The first read of a call waits the socket's timeout
        (its deadline less a few µs); later ones only what is left of the deadline."""
        try:
            if deadline is None:
                return sock.recv(RECV_SIZE)
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError()
            _kernel_timeout(sock, socket.SO_RCVTIMEO, remaining)
            try:
                return sock.recv(RECV_SIZE)
            finally:
                _kernel_timeout(sock, socket.SO_RCVTIMEO, self.timeout_s)
        except BlockingIOError:         # the kernel's timeout
            raise TimeoutError() from None

    @staticmethod
    def sendall(sock: socket.socket, data: bytes) -> None:
        try:
            sock.sendall(data)
        except BlockingIOError:
            raise TimeoutError() from None

    def interrupt(self) -> None:
        self.stopping = True
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def close(self) -> None:
        self.drop()


class BlockingHttp(_Socket):
    """HTTP/1.1 keep-alive, one request at a time."""

    size: str | None = None

    def __init__(self, request: HttpRequest) -> None:
        host, port, self.payload = encode_request(request)
        super().__init__(host, port)

    def send(self, timeout_s: float) -> str | None:
        return self.send_payload(timeout_s, self.payload)

    def send_payload(self, timeout_s: float, payload: bytes) -> str | None:
        deadline = time.perf_counter() + timeout_s
        try:
            sock = self.sock or self.connect(timeout_s)
        except OSError:
            return "connection"
        try:
            self.sendall(sock, payload)
            data = more = self.recv(sock, None)
            while (parsed := parse_response(data)) is None:
                if not more:
                    raise WireError("connection closed by the server")
                more = self.recv(sock, deadline)
                data += more
        except TimeoutError:
            self.drop()         # its answer may still come
            return "timeout"
        except (OSError, WireError):
            self.drop()
            return "connection"
        status, _, server_closes = parsed
        if server_closes:
            self.drop()
        return status_error(status)


class BlockingHttpMix(BlockingHttp):
    """A mix's requests in its order (shared with the other threads), over one connection."""

    def __init__(self, mix: RequestMix, payloads: list[bytes]) -> None:
        super().__init__(mix.requests[0])
        self.mix = mix
        self.payloads = payloads

    def send(self, timeout_s: float) -> str | None:
        index = self.mix.next_index()
        self.size = self.mix.sizes[index]
        return self.send_payload(timeout_s, self.payloads[index])


class _Session(H2Session[bool]):
    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock
        self.outcome: str | None = None
        self.done = False

    def _write(self, data: bytes) -> None:
        if not self.closed:
            self.sock.sendall(data)

    def _finish(self, stream_id: int, outcome: str | None) -> None:
        if self.streams.pop(stream_id, False):
            self.outcome, self.done = outcome, True

    def lost(self) -> None:
        self.closed = True
        self._fail_streams(0, "connection")


class BlockingGrpc(_Socket):
    """Unary gRPC calls over the lean HTTP/2 session, one stream at a time."""

    size: str | None = None

    def __init__(self, request: GrpcRequest) -> None:
        self.call = CallFrames(request)
        super().__init__(self.call.host, self.call.port)
        self.session: _Session | None = None

    def send(self, timeout_s: float) -> str | None:
        deadline = time.perf_counter() + timeout_s
        session = self.session
        if session is None or session.closed or session.next_stream > MAX_STREAM_ID:
            self.drop()
            try:
                session = self._open(timeout_s)
            except OSError:
                return "connection"
        try:
            return self._call(session, deadline, timeout_s)
        except TimeoutError:
            return "timeout"
        except OSError:
            self.drop()
            return "connection"

    def _open(self, timeout_s: float) -> _Session:
        sock = self.connect(timeout_s)
        self.sendall(sock, opening())
        self.session = _Session(sock)
        return self.session

    def _read(self, session: _Session, deadline: float | None) -> None:
        data = self.recv(session.sock, deadline)
        if data:
            session.feed(data)
        else:
            session.lost()

    def _call(self, session: _Session, deadline: float, timeout_s: float) -> str | None:
        size = len(self.call.message)
        while session.send_window < size and not session.closed:
            self._read(session, deadline)
        if session.closed:
            return "connection"
        session.send_window -= size
        stream_id = session.next_stream
        session.next_stream += 2
        session.streams[stream_id] = True
        session.done = False
        self.sendall(session.sock, self.call.frames(stream_id, timeout_s))
        try:
            self._read(session, None)
            while not session.done:
                self._read(session, deadline)
        except TimeoutError:
            session.cancel(stream_id)       # the connection stays, as in the asyncio client
            raise
        return session.outcome

    def drop(self) -> None:
        super().drop()
        self.session = None


def blocking_callers(target: HttpRequest | GrpcRequest | RequestMix, concurrency: int
                     ) -> list[BlockingCaller] | None:
    """One blocking caller per request in flight where that costs less CPU than the event
    loop (HTTP up to HTTP_THREADS_UP_TO, gRPC at 1: past that, its asyncio client's
    multiplexing and batched writes win); else None. A gRPC message over one frame always
    goes through grpc.aio."""
    if isinstance(target, GrpcRequest):
        if concurrency != 1 or not CallFrames(target).fits_one_frame:
            return None
        return [BlockingGrpc(target)]
    if concurrency > HTTP_THREADS_UP_TO:
        return None
    if isinstance(target, RequestMix):
        payloads = [encode_request(request)[2] for request in target.requests]
        return [BlockingHttpMix(target, payloads) for _ in range(concurrency)]
    return [BlockingHttp(target) for _ in range(concurrency)]
