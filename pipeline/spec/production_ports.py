"""Each server kind's named ports and their production numbers: the one port table.

Spec-level data, not a server's runtime ports (those are `pipeline/servers/ports.py`: free
loopback ports for the servers we start). A leaf module (it imports nothing of ours) in
`pipeline.spec` on purpose: the spec names these ports (`server.ports` keys), and the spec
sits below the servers package, whose `__init__` imports the kinds, which import the spec.
Everything else (the kinds, the serving images, the rendered configs, the spec's rules)
reads it here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

PRODUCTION_PORTS: Final[Mapping[str, Mapping[str, int]]] = MappingProxyType({
    "triton": MappingProxyType({"http": 8000, "grpc": 8001, "metrics": 8002}),
    "torchserve": MappingProxyType({"inference": 8080, "management": 8081, "metrics": 8082,
                                    "grpc_inference": 7070, "grpc_management": 7071}),
})


def port_names(kind: str) -> tuple[str, ...]:
    """The kind's port names, in the table's order (the order ports are handed out in)."""
    return tuple(PRODUCTION_PORTS[kind])
