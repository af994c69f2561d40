"""Model servers: render their configs, start them, watch them."""

from __future__ import annotations

from pipeline.servers.base import ServerKind


def server_kind(name: str) -> ServerKind:
    if name == "triton":
        from pipeline.servers.triton.server import TritonKind

        return TritonKind()
    if name == "torchserve":
        from pipeline.servers.torchserve.server import TorchServeKind

        return TorchServeKind()
    raise ValueError(f"unknown server kind {name!r}")
