"""What the server said when load requests failed: one of them sent again, after the load.

The load clients read an answer only as far as its status (they must not be the
bottleneck), so a window knows that requests failed with HTTP 500, never why. Once the
load is over, the stage sends the requests it was sending again, one at a time, up to
`TRIES` of them, until one fails, and quotes that answer: Triton's body carries the
model's exception; TorchServe's says less, and its log beside the record says more.
"""

from __future__ import annotations

from pipeline.model.reference import one_line
from pipeline.request_types import HttpRequest, RequestMix
from pipeline.servers import http

TRIES = 8                 # requests sent again before giving up
TIMEOUT_S = 10.0


def _requests(target: object) -> list[HttpRequest]:
    if isinstance(target, HttpRequest):
        return [target]
    if isinstance(target, RequestMix):
        distinct = {(request.url, request.body): request for request in target.requests}
        return list(distinct.values())
    return []      # gRPC: the status's message is all there is, and the load kept it


def error_example(target: object, timeout_s: float = TIMEOUT_S) -> str | None:
    """"HTTP 500: <the start of its body>" for the first request that fails again; a
    sentence saying they all succeeded now; None when nothing can be sent over HTTP."""
    requests = _requests(target)
    if not requests:
        return None
    for attempt in range(TRIES):
        request = requests[attempt % len(requests)]
        try:
            reply = http.call(request.method, request.url, request.body, request.headers,
                              timeout_s=timeout_s)
        except http.Unreachable as exc:
            return f"no answer: {one_line(str(exc), 200)}"
        if reply.status != 200:
            return f"HTTP {reply.status}: {one_line(reply.text(), 240) or '(empty body)'}"
    return (f"none failed: {TRIES} of the requests sent again, one at a time, all "
            "succeeded (they fail under load, or only now and then)")
