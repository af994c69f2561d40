"""A fault-injecting HTTP/1.1 proxy between an S3 client and an S3-compatible server.

Stdlib only (socket + threading). It listens on 127.0.0.1:<free port>, forwards each
request byte for byte to the upstream endpoint (Content-Length or chunked / aws-chunked
bodies; `Expect: 100-continue` answered here; client connections kept alive even when
the upstream closes after each response) and, per request, may instead inject a fault chosen
by a `FaultRule` (an explicit schedule and/or a probability with a seeded RNG, limited
to some methods and paths):

- ``slowdown``: answer 503 with an S3 ``SlowDown`` XML error (the request is not forwarded)
- ``internal``: answer 500 with an S3 ``InternalError`` XML error (not forwarded)
- ``drop``: read the request, then close the connection without answering (not forwarded)
- ``cut``: forward, then send the response headers with the full Content-Length and only
  the first half of the body, then close
- ``lose``: forward (the server acts on it), then close without answering: the client
  cannot tell whether its request took effect

Every injected fault is counted by kind (`FaultProxy.counts`). The proxy is a context
manager; it also stops itself after `lifetime` seconds so a stuck test cannot leave it
behind. `seen` lists every request and its fault, for the tests' own checks.
"""

from __future__ import annotations

import random
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO
from urllib.parse import urlsplit

FAULT_KINDS = ("slowdown", "internal", "drop", "cut", "lose")
MAX_LINE = 65536
MAX_HEADERS = 200

_ERRORS = {
    "slowdown": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    "internal": (500, "Internal Server Error", "InternalError",
                 "We encountered an internal error. Please try again."),
}


class ProtocolViolation(Exception):
    """The peer sent something that is not HTTP/1.1 as we expect it."""


@dataclass(frozen=True)
class Seen:
    """One request that reached the proxy and what was done to it."""

    method: str
    target: str
    fault: str | None


class FaultRule:
    """Which requests get a fault, and which one.

    A request matches when its method is in `methods` (any when None) and its target
    (path and query) matches the regular expression `path` (any when None). For each
    matching request, in order: the next entry of `schedule` is used while there is
    one (None there means "let it through"); afterwards, with `probability`, a kind
    drawn from `kinds` by an RNG seeded with `seed`. At most `limit` faults in all, and
    at most `per_target` for the same method and target: a client's retries of one
    request carry the same target, so `per_target=attempts - 1` makes every fault
    transient (retries always win) while `probability=1.0` makes one permanent.
    """

    def __init__(self, kinds: Sequence[str] = ("slowdown", "internal", "drop"), *,
                 probability: float = 0.0, schedule: Sequence[str | None] = (),
                 methods: Collection[str] | None = None, path: str | None = None,
                 seed: int = 0, limit: int | None = None,
                 per_target: int | None = None) -> None:
        unknown = [kind for kind in [*kinds, *schedule] if kind is not None and
                   kind not in FAULT_KINDS]
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; known: {FAULT_KINDS}")
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability {probability} is not in [0, 1]")
        self.kinds = tuple(kinds)
        self.probability = probability
        self.schedule = list(schedule)
        self.methods = None if methods is None else frozenset(m.upper() for m in methods)
        self.path = None if path is None else re.compile(path)
        self.limit = limit
        self.per_target = per_target
        self._by_target: Counter[tuple[str, str]] = Counter()
        self.matched = 0
        self.injected = 0
        self._random = random.Random(seed)

    def matches(self, method: str, target: str) -> bool:
        if self.methods is not None and method.upper() not in self.methods:
            return False
        return self.path is None or self.path.search(target) is not None

    def decide(self, method: str, target: str) -> str | None:
        """The fault for this request, or None. Not thread-safe: the proxy serialises."""
        if not self.matches(method, target):
            return None
        self.matched += 1
        if self.limit is not None and self.injected >= self.limit:
            return None
        if self.per_target is not None and \
                self._by_target[(method, target)] >= self.per_target:
            return None
        if self.schedule:
            kind = self.schedule.pop(0)
        elif self.kinds and self._random.random() < self.probability:
            kind = self._random.choice(self.kinds)
        else:
            kind = None
        if kind is not None:
            self.injected += 1
            self._by_target[(method, target)] += 1
        return kind


class _Request:
    def __init__(self, line: bytes, headers: list[bytes]) -> None:
        parts = line.decode("latin-1").rstrip("\r\n").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise ProtocolViolation(f"bad request line {line[:80]!r}")
        self.method, self.target, self.version = parts
        self.line = line
        self.headers = headers


def _header_values(headers: list[bytes], name: str) -> list[str]:
    wanted = name.lower()
    values = []
    for raw in headers:
        key, _, value = raw.decode("latin-1").partition(":")
        if key.strip().lower() == wanted:
            values.append(value.strip())
    return values


def _tokens(headers: list[bytes], name: str) -> set[str]:
    return {token.strip().lower() for value in _header_values(headers, name)
            for token in value.split(",") if token.strip()}


def _read_line(reader: BinaryIO) -> bytes:
    line = reader.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise ProtocolViolation("line too long")
    return line


def read_head(reader: BinaryIO) -> tuple[bytes, list[bytes]] | None:
    """The start line and the raw header lines; None on a clean EOF before a request."""
    line = _read_line(reader)
    while line in (b"\r\n", b"\n"):      # tolerated before a request (RFC 9112 2.2)
        line = _read_line(reader)
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise ProtocolViolation("connection closed inside the start line")
    headers: list[bytes] = []
    while True:
        raw = _read_line(reader)
        if not raw.endswith(b"\n"):
            raise ProtocolViolation("connection closed inside the headers")
        if raw in (b"\r\n", b"\n"):
            return line, headers
        headers.append(raw)
        if len(headers) > MAX_HEADERS:
            raise ProtocolViolation("too many headers")


def _read_exact(reader: BinaryIO, size: int) -> bytes:
    data = reader.read(size)
    if len(data) != size:
        raise ProtocolViolation(f"connection closed after {len(data)} of {size} body bytes")
    return data


def read_chunked(reader: BinaryIO) -> bytes:
    """A chunked body exactly as it was framed (chunk extensions and trailers included:
    aws-chunked signatures and checksum trailers pass through untouched)."""
    parts: list[bytes] = []
    while True:
        line = _read_line(reader)
        if not line.endswith(b"\n"):
            raise ProtocolViolation("connection closed inside a chunk header")
        parts.append(line)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolViolation(f"bad chunk size line {line[:80]!r}") from None
        if size == 0:
            break
        parts.append(_read_exact(reader, size + 2))
    while True:                          # trailer section, ended by an empty line
        line = _read_line(reader)
        if not line.endswith(b"\n"):
            raise ProtocolViolation("connection closed inside the trailers")
        parts.append(line)
        if line in (b"\r\n", b"\n"):
            return b"".join(parts)


def read_body(reader: BinaryIO, headers: list[bytes], *, until_eof: bool) -> bytes:
    if "chunked" in _tokens(headers, "transfer-encoding"):
        return read_chunked(reader)
    lengths = _header_values(headers, "content-length")
    if lengths:
        try:
            size = int(lengths[0])
        except ValueError:
            raise ProtocolViolation(f"bad Content-Length {lengths[0]!r}") from None
        return _read_exact(reader, size) if size else b""
    if until_eof:
        return reader.read()
    return b""


def _error_response(kind: str, method: str, number: int) -> bytes:
    status, reason, code, message = _ERRORS[kind]
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message><RequestId>faultproxy-{number}</RequestId>"
            "<HostId>faultproxy</HostId></Error>").encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nx-amz-request-id: faultproxy-{number}\r\n"
            "Connection: keep-alive\r\n\r\n").encode()
    # A HEAD response carries the headers of the would-be body, never the body.
    return head if method == "HEAD" else head + body


class FaultProxy:
    """See the module docstring. `url` is the endpoint to give the client."""

    def __init__(self, upstream: str, *, timeout: float = 60.0, lifetime: float = 600.0) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"upstream {upstream!r}: only http://host:port is supported")
        self.upstream = (parts.hostname, parts.port or 80)
        self.timeout = timeout
        self.lifetime = lifetime
        self._lock = threading.Lock()
        self._rules: tuple[FaultRule, ...] = ()
        self._counts: Counter[str] = Counter()
        self._seen: list[Seen] = []
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._started_at = 0.0
        self.url = ""

    # ---------------------------------------------------------------- control

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        listener.settimeout(0.1)
        self._listener = listener
        self._started_at = time.monotonic()
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        self._acceptor = threading.Thread(target=self._accept, name="faultproxy-accept",
                                          daemon=True)
        self._acceptor.start()

    def stop(self) -> None:
        self._stop.set()
        if self._acceptor is not None:
            self._acceptor.join(timeout=10)
        self._hang_up()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=10)
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _hang_up(self) -> None:
        """Wake every connection thread (blocked reads return EOF) so that it ends."""
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def set_rules(self, *rules: FaultRule) -> None:
        """From now on, each request is decided by the first of `rules` that matches it
        (none: every request goes through)."""
        with self._lock:
            self._rules = rules

    @contextmanager
    def faults(self, *rules: FaultRule) -> Iterator[tuple[FaultRule, ...]]:
        """Inject the rules' faults inside the block only."""
        self.set_rules(*rules)
        try:
            yield rules
        finally:
            self.set_rules()

    @property
    def counts(self) -> Counter[str]:
        """Injected faults by kind (a copy)."""
        with self._lock:
            return Counter(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    @property
    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    # ---------------------------------------------------------------- serving

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            if time.monotonic() - self._started_at > self.lifetime:
                self._stop.set()
                self._hang_up()
                break
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            client.settimeout(self.timeout)
            thread = threading.Thread(target=self._serve, args=(client,),
                                      name="faultproxy-conn", daemon=True)
            with self._lock:
                self._sockets.add(client)
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.append(thread)
            thread.start()

    def _decide(self, method: str, target: str) -> tuple[str | None, int]:
        """The fault for this request (counted) and the request's number."""
        with self._lock:
            rule = next((r for r in self._rules if r.matches(method, target)), None)
            fault = None if rule is None else rule.decide(method, target)
            if fault is not None:
                self._counts[fault] += 1
            self._seen.append(Seen(method, target, fault))
            return fault, len(self._seen)

    def _open(self, sock: socket.socket) -> BinaryIO:
        with self._lock:
            self._sockets.add(sock)
        return sock.makefile("rb")

    def _close(self, sock: socket.socket | None, reader: BinaryIO | None) -> None:
        if reader is not None:
            reader.close()
        if sock is None:
            return
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        with self._lock:
            self._sockets.discard(sock)

    def _serve(self, client: socket.socket) -> None:
        """One client connection, kept alive across requests. The upstream connection is
        opened when needed and reopened after the server closes it (werkzeug, under moto,
        closes after every response): the client keeps its connection all the same, as
        it would with S3."""
        upstream: socket.socket | None = None
        up_reader: BinaryIO | None = None
        reader = self._open(client)
        try:
            while not self._stop.is_set():
                head = read_head(reader)
                if head is None:
                    return
                request = _Request(*head)
                if "100-continue" in _tokens(request.headers, "expect"):
                    # We answer the 100 ourselves and forward without the Expect header,
                    # so that a fault can be decided once the whole request is in.
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = read_body(reader, request.headers, until_eof=False)
                fault, number = self._decide(request.method, request.target)
                if fault is not None and fault in _ERRORS:
                    client.sendall(_error_response(fault, request.method, number))
                    continue
                if fault == "drop":
                    return
                if upstream is None or up_reader is None:
                    upstream = socket.create_connection(self.upstream, timeout=self.timeout)
                    up_reader = self._open(upstream)
                forwarded = [h for h in request.headers
                             if not h.lower().startswith(b"expect:")]
                upstream.sendall(request.line + b"".join(forwarded) + b"\r\n" + body)
                status, line, response_headers = self._response_head(up_reader)
                no_body = request.method == "HEAD" or status in (204, 304)
                framed = no_body or \
                    "chunked" in _tokens(response_headers, "transfer-encoding") or \
                    bool(_header_values(response_headers, "content-length"))
                response_body = b"" if no_body else read_body(up_reader, response_headers,
                                                               until_eof=True)
                if "close" in _tokens(response_headers, "connection") or not framed:
                    self._close(upstream, up_reader)
                    upstream, up_reader = None, None
                client_closes = ("close" in _tokens(request.headers, "connection") or
                                 request.version == "HTTP/1.0" or not framed)
                if not client_closes:
                    response_headers = [h for h in response_headers
                                        if not h.lower().startswith(b"connection:")]
                response_head = line + b"".join(response_headers) + b"\r\n"
                if fault == "lose":
                    return
                if fault == "cut" and len(response_body) >= 2:
                    client.sendall(response_head + response_body[: len(response_body) // 2])
                    return
                client.sendall(response_head + response_body)
                if client_closes:
                    return
        except (OSError, ProtocolViolation, ValueError):
            return      # the peer went away or spoke nonsense: drop this connection
        finally:
            self._close(client, reader)
            self._close(upstream, up_reader)

    @staticmethod
    def _response_head(reader: BinaryIO) -> tuple[int, bytes, list[bytes]]:
        """The final response's status, status line and headers (interim 1xx are passed
        over: the client already had its 100 Continue from us)."""
        while True:
            head = read_head(reader)
            if head is None:
                raise ProtocolViolation("upstream closed before answering")
            line, headers = head
            try:
                status = int(line.split(b" ", 2)[1])
            except (IndexError, ValueError):
                raise ProtocolViolation(f"bad status line {line[:80]!r}") from None
            if not 100 <= status < 200 or status == 101:
                return status, line, headers
