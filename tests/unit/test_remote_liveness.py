"""A server we did not start: dead because it stopped answering, or because nothing ever
answered at its URL (`measure --url` to the wrong port)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pipeline.servers.base import RemoteLiveness
from pipeline.servers.ports import loopback_ports


class _Live(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def test_nothing_listening_never_answered() -> None:
    port = loopback_ports(("http",))["http"]
    liveness = RemoteLiveness(f"http://127.0.0.1:{port}/live")
    assert not liveness()
    assert liveness.stopped("the server") == ("the server never answered: no server is "
                                             "running there, or this is not its URL")


def test_a_server_that_answered_then_went_stopped_answering() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Live)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    liveness = RemoteLiveness(f"http://127.0.0.1:{server.server_port}/live")
    assert liveness()
    server.shutdown()
    server.server_close()
    thread.join()
    liveness.checked = 0.0   # asked at most once a second: ask again now
    assert not liveness()
    assert liveness.stopped("the server") == "the server stopped answering"
