"""A small synchronous HTTP call that never raises on an HTTP status."""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from urllib.parse import urlsplit


class Unreachable(Exception):
    """No HTTP answer: refused, reset, or timed out."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def call(method: str, url: str, body: bytes | None = None,
         headers: dict[str, str] | None = None, timeout_s: float = 10.0) -> Response:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port,
                                            timeout=timeout_s)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    try:
        connection.request(method, path or "/", body=body, headers=headers or {})
        reply = connection.getresponse()
        data = reply.read()
        return Response(reply.status, {k.lower(): v for k, v in reply.getheaders()}, data)
    except (TimeoutError, OSError, http.client.HTTPException) as exc:
        raise Unreachable(f"{method} {url}: {exc or type(exc).__name__}") from None
    finally:
        connection.close()
