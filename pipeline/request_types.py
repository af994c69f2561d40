"""The requests a server kind renders and the load clients send: one HTTP or gRPC call,
already encoded. A leaf module, below both `pipeline.servers` and `pipeline.measure`."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class HttpRequest:
    method: str
    url: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class GrpcRequest:
    target: str                 # host:port
    method: str                 # /package.Service/Method
    payload: bytes
    metadata: tuple[tuple[str, str], ...] = field(default_factory=tuple)


class MixCursor:
    """How far a mix's order has been sent, shared by every window, connection and thread
    that sends the mix in this process (a load worker gets a copy of its own)."""

    def __init__(self) -> None:
        self._next = 0
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            taken, self._next = self._next, self._next + 1
            return taken

    def __getstate__(self) -> dict[str, Any]:
        return {"next": self._next}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._next = int(state["next"])
        self._lock = threading.Lock()


@dataclass(frozen=True)
class RequestMix:
    """Several HTTP requests to one server, sent in turn: the n-th request sent is
    `requests[order[n % len(order)]]`, of the size bucket `sizes[order[...]]` (how the
    latency report groups its percentiles; None: in no bucket, only the overall figures).
    The n counts on across windows (`cursor`)."""

    requests: tuple[HttpRequest, ...]
    sizes: tuple[str | None, ...]
    order: tuple[int, ...]
    cursor: MixCursor = field(default_factory=MixCursor, compare=False, repr=False)

    def next_index(self) -> int:
        """The request to send next."""
        return self.order[self.cursor.take() % len(self.order)]

    def __post_init__(self) -> None:
        if not self.requests or len(self.sizes) != len(self.requests) or not self.order:
            raise ValueError("a mix needs requests, one size bucket each, and an order")
        if not all(0 <= index < len(self.requests) for index in self.order):
            raise ValueError("the order of a mix indexes its requests")
