"""Model servers: render their configs, start them, watch them."""

from __future__ import annotations

from pipeline.servers.base import ServerKind


def server_kind(name: str) -> ServerKind:
    if name == "triton":
        from pipeline.servers.triton import TritonKind

        return TritonKind()
    raise ValueError(f"unknown server kind {name!r}")
