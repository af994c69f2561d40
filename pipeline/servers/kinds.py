"""The server kinds, by the name a spec gives in `server.kind`: the one registry."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from pipeline.servers.base import ServerKind
from pipeline.servers.torchserve.kind import TORCHSERVE
from pipeline.servers.triton.kind import TRITON

KINDS: Final[Mapping[str, ServerKind]] = MappingProxyType({
    TRITON.name: TRITON,
    TORCHSERVE.name: TORCHSERVE,
})
