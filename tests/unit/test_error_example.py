"""After a load with errors, one failed request is sent again and its answer quoted."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

from pipeline.measure.error_example import error_example
from pipeline.request_types import HttpRequest, MixCursor, RequestMix
from tests.support.http_server import serving


class RaisesOnB(BaseHTTPRequestHandler):
    """200 for body b"a"; 500 with a Triton-like error body for anything else."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status, answer = (200, b"{}") if body == b"a" else (
            500, b'{"error":"Failed to process the request(s) for model \'m\', message: '
                 b'RuntimeError: shape mismatch\\n  at line 3"}')
        self.send_response(status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


def request(url: str, body: bytes) -> HttpRequest:
    return HttpRequest("POST", f"{url}/infer", body, {})


def test_the_failed_answer_is_quoted() -> None:
    with serving(RaisesOnB) as url:
        said = error_example(request(url, b"b"))
    assert said is not None and said.startswith("HTTP 500: ")
    assert "RuntimeError: shape mismatch" in said and "\n" not in said


def test_a_mix_is_tried_until_one_fails() -> None:
    with serving(RaisesOnB) as url:
        mix = RequestMix((request(url, b"a"), request(url, b"a"), request(url, b"b")),
                         ("1", "1", "2"), (0, 1, 2), MixCursor())
        said = error_example(mix)
    assert said is not None and "shape mismatch" in said


def test_requests_that_succeed_alone_are_said_to_fail_under_load_or_now_and_then() -> None:
    with serving(RaisesOnB) as url:
        said = error_example(request(url, b"a"))
    assert said is not None and said.startswith("none failed: 8 of the requests")


def test_a_gone_server_gives_no_answer() -> None:
    with serving(RaisesOnB) as url:
        pass
    said = error_example(request(url, b"b"), timeout_s=2.0)
    assert said is not None and said.startswith("no answer: ")


def test_grpc_has_nothing_to_send_again() -> None:
    assert error_example(object()) is None
