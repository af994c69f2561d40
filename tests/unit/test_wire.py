"""The lean HTTP client against a real (stdlib) HTTP server on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from pipeline.measure.wire.blocking import BlockingHttp
from pipeline.measure.wire.http_client import WireError, WirePool, encode_request
from pipeline.request_types import HttpRequest
from tests.support.http_server import serving


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/slow":
            threading.Event().wait(1.0)
        if self.path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"hello", b" world"):
                self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path == "/closing":
            # As TorchServe answers an error: "connection: close", then the close, a little
            # later than the answer.
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.flush()
            threading.Event().wait(0.2)
            return
        if self.path == "/idle-close":
            # A keep-alive answer, then the close a keep-alive idle timeout makes.
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.wfile.flush()
            threading.Event().wait(0.1)
            self.close_connection = True
            return
        status = 400 if body == b"bad" else 200
        payload = b"x" * 70_000
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def handle(self) -> None:
        # The timeout test hangs up on the slow answer; that is the point, not an error.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().handle()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serving(_Handler) as url:
        yield url


def test_encoding_keeps_the_body_and_headers() -> None:
    host, port, payload = encode_request(
        HttpRequest("POST", "http://127.0.0.1:8000/v2/models/m/infer", b"abc",
                    {"Content-Type": "application/json", "Authorization": "Bearer k"}))
    assert (host, port) == ("127.0.0.1", 8000)
    assert payload.startswith(b"POST /v2/models/m/infer HTTP/1.1\r\n")
    assert b"Content-Length: 3\r\n" in payload and b"Authorization: Bearer k" in payload
    assert payload.endswith(b"\r\n\r\nabc")


def test_statuses_keep_alive_chunked_and_timeouts(server: str) -> None:
    async def scenario() -> None:
        good = WirePool(HttpRequest("POST", server + "/ok", b"fine", {}))
        assert [await good.send(5.0) for _ in range(5)] == [200] * 5
        assert len(good.all) == 1                      # one connection, kept alive
        bad = WirePool(HttpRequest("POST", server + "/ok", b"bad", {}))
        assert await bad.send(5.0) == 400
        chunked = WirePool(HttpRequest("POST", server + "/chunked", b"", {}))
        assert await chunked.send(5.0) == 200 and await chunked.send(5.0) == 200
        slow = WirePool(HttpRequest("POST", server + "/slow", b"", {}))
        with pytest.raises(TimeoutError):
            await slow.send(0.2)
        for pool in (good, bad, chunked, slow):
            pool.close()

    asyncio.run(scenario())


def test_an_answer_with_connection_close_is_not_reused(server: str) -> None:
    async def scenario() -> None:
        closing = WirePool(HttpRequest("POST", server + "/closing", b"", {}))
        assert [await closing.send(5.0) for _ in range(3)] == [500] * 3
        assert len(closing.all) == 3                   # a new connection after each close
        closing.close()

    asyncio.run(scenario())


def test_an_idle_connection_the_server_closed_is_not_reused(server: str) -> None:
    """A request written to a connection the server has closed would never be answered: it
    waited for its whole timeout (a capacity hold's ~20 s), holding its in-flight slot."""
    async def scenario() -> None:
        pool = WirePool(HttpRequest("POST", server + "/idle-close", b"", {}))
        assert await pool.send(5.0) == 200
        await asyncio.sleep(0.4)                        # the server closes it meanwhile
        assert await asyncio.wait_for(pool.send(5.0), 1.0) == 200
        assert len(pool.all) == 2
        pool.close()

    asyncio.run(scenario())


def test_refused_connection_is_a_wire_error() -> None:
    from pipeline.servers.ports import free_ports

    async def scenario() -> None:
        pool = WirePool(HttpRequest("POST", f"http://127.0.0.1:{free_ports(1)[0]}/", b"", {}))
        with pytest.raises(WireError):
            await pool.send(1.0)

    asyncio.run(scenario())


def test_the_blocking_client_reads_the_same_answers(server: str) -> None:
    """The concurrency-1 caller: statuses, a body over several reads, chunked, keep-alive,
    a timeout, a server that closes after its answer, a refused connection."""
    from pipeline.servers.ports import free_ports

    good = BlockingHttp(HttpRequest("POST", server + "/ok", b"fine", {}))
    assert [good.send(5.0) for _ in range(5)] == [None] * 5
    kept = good.sock
    assert good.send(5.0) is None and good.sock is kept          # one connection, kept alive
    bad = BlockingHttp(HttpRequest("POST", server + "/ok", b"bad", {}))
    assert bad.send(5.0) == "http_400"
    chunked = BlockingHttp(HttpRequest("POST", server + "/chunked", b"", {}))
    assert [chunked.send(5.0), chunked.send(5.0)] == [None, None]
    slow = BlockingHttp(HttpRequest("POST", server + "/slow", b"", {}))
    assert slow.send(0.2) == "timeout" and slow.sock is None     # dropped: its answer may come
    closing = BlockingHttp(HttpRequest("POST", server + "/closing", b"", {}))
    assert [closing.send(5.0) for _ in range(3)] == ["http_500"] * 3
    assert closing.sock is None
    refused = BlockingHttp(HttpRequest("POST", f"http://127.0.0.1:{free_ports(1)[0]}/", b"", {}))
    assert refused.send(1.0) == "connection"
    for caller in (good, bad, chunked, slow):
        caller.close()
