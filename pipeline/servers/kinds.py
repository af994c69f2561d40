"""The server kinds, by the name a spec gives in `server.kind`: the one registry."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from pipeline.servers.base import ServerKind
from pipeline.servers.torchserve.kind import TORCHSERVE
from pipeline.servers.triton.kind import TRITON
from pipeline.spec.kind_specs import KindSpecs

KINDS: Final[Mapping[str, ServerKind]] = MappingProxyType({
    TRITON.name: TRITON,
    TORCHSERVE.name: TORCHSERVE,
})

KIND_SPECS: Final[KindSpecs] = MappingProxyType({
    name: kind.spec for name, kind in KINDS.items()})
"""What the spec layer is told of the kinds (it sits below them): `pipeline/servers/specs.py`."""
