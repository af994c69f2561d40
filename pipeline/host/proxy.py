"""The host's one stable HTTP port: a reverse proxy (aiohttp) onto the release served now.

Clients keep one address while releases come and go behind it. `switch` points new
requests at another upstream at once (the event loop runs one handler step at a time, so
a request is counted on the upstream it picked before anything can switch); requests
already sent to the old one finish there, and `Upstream.drained` says when none is left.

Every response carries the release that answered it (`X-Serve-Pipeline-Release`), and
`GET /serve-pipeline/status` answers with the host's state as JSON.

Only HTTP/1.1 is proxied. gRPC (HTTP/2) is not: a gRPC client would have to follow each
swap to the release's own loopback port, so the host offers none.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

RELEASE_HEADER = "X-Serve-Pipeline-Release"
STATUS_PATH = "/serve-pipeline/status"
# The largest request body passed on; a larger one gets 413 here (Triton itself has no
# body limit: see parity's oversized_body finding).
MAX_BODY_BYTES = 64 * 2**20
# Per hop, not passed on (RFC 9110 7.6.1); aiohttp sets length and framing itself.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate",
                        "proxy-authorization", "te", "trailer", "transfer-encoding",
                        "upgrade", "host", "content-length"})
CONNECT_TIMEOUT_S = 10.0


def passed_on(headers: Any) -> list[tuple[str, str]]:
    """The end-to-end headers of a request or response (every value of a repeated one)."""
    return [(name, value) for name, value in headers.items()
            if name.lower() not in HOP_BY_HOP]


class Upstream:
    """One release's server as the proxy sends to it: its base URL and what is in flight.
    Made inside the event loop (it opens a client session)."""

    def __init__(self, release_id: str, base_url: str) -> None:
        self.release_id = release_id
        self.base_url = base_url
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        # The request goes on with the client's headers only (aiohttp would add its own
        # Accept-Encoding, and Triton would then compress for a client that did not ask),
        # and the body comes back as the server sent it.
        self.session = aiohttp.ClientSession(
            base_url, auto_decompress=False, skip_auto_headers=("Accept-Encoding",
                                                                "User-Agent"),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S))

    def enter(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    async def drained(self, timeout_s: float) -> bool:
        """Whether every request sent here finished within `timeout_s`."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        await self.session.close()


class ReverseProxy:
    """`start` binds `host:port`, `switch` picks the upstream, `close` stops listening and
    lets requests in flight finish (up to `shutdown_timeout_s`)."""

    def __init__(self, host: str, port: int, status: Callable[[], dict[str, Any]],
                 shutdown_timeout_s: float = 10.0) -> None:
        self.host = host
        self.port = port
        self.upstream: Upstream | None = None
        self._status = status
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get(STATUS_PATH, self._status_page)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        # A compressed request body goes on as it came, with its Content-Encoding: the
        # server decompresses it (decompressed here, it would reach it still labelled gzip).
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                     shutdown_timeout=shutdown_timeout_s,
                                     auto_decompress=False)

    def switch(self, upstream: Upstream) -> Upstream | None:
        """Send every new request to `upstream`; the one it replaced."""
        previous, self.upstream = self.upstream, upstream
        return previous

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            raise
        if self.port == 0:
            self.port = int(self._runner.addresses[0][1])

    async def close(self) -> None:
        await self._runner.cleanup()

    async def _status_page(self, request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(self._status(), indent=2) + "\n",
                            content_type="application/json")

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        upstream = self.upstream
        if upstream is None:
            return web.json_response({"error": "no release is served yet"}, status=503)
        upstream.enter()
        try:
            body = await request.read()
            async with upstream.session.request(
                    request.method, request.rel_url, data=body,
                    headers=passed_on(request.headers), allow_redirects=False) as reply:
                payload = await reply.read()
                answer = web.Response(status=reply.status, reason=reply.reason, body=payload,
                                      headers=passed_on(reply.headers))
        except aiohttp.ClientError as exc:
            reason = str(exc) or type(exc).__name__
            answer = web.json_response(
                {"error": f"release {upstream.release_id} did not answer: {reason}"},
                status=502)
        finally:
            upstream.leave()
        answer.headers[RELEASE_HEADER] = upstream.release_id
        return answer
