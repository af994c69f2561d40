"""Memory that grows with traffic: the server's process tree before and after the windows.

A leak shows as memory that keeps growing while requests are served. The latency stage
measures the tree right after its warm-up (allocators and caches have warmed by then) and
again after its last window; the growth between the two is gated against
`stages.latency.max_memory_growth`. RSS is compared, not PSS: a leak is private memory,
which RSS counts in full, while PSS also moves when unrelated processes map or unmap the
same libraries (another torch process starting on the machine shrinks our share of libtorch).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.measure.memory import process_tree_memory
from pipeline.results import Gate
from pipeline.servers.base import ModelServer
from pipeline.spec.units import ByteSize

GATE = "latency.memory_growth"
# Growth a healthy server shows over the latency windows when the spec sets no limit. A JVM
# (TorchServe's frontend) expands its heap during the first minutes of traffic: 34-64 MiB
# were measured over the TorchServe example's 10 s windows, under 1 MiB for Triton.
DEFAULT_LIMITS = {"triton": ByteSize(64 * 2**20, "64MiB"),
                  "torchserve": ByteSize(256 * 2**20, "256MiB")}


def limit_for(configured: ByteSize | bool | None, server_kind: str) -> ByteSize | None:
    """The spec's limit, the server kind's default when unset, None when turned off."""
    if configured is False:
        return None
    if isinstance(configured, ByteSize):
        return configured
    return DEFAULT_LIMITS.get(server_kind, DEFAULT_LIMITS["triton"])


@dataclass(frozen=True)
class MemoryGrowth:
    before_mb: float
    after_mb: float
    requests: int

    @property
    def growth_mb(self) -> float:
        return self.after_mb - self.before_mb

    @property
    def per_1000_requests_mb(self) -> float:
        return self.growth_mb * 1000 / self.requests if self.requests else 0.0

    def metrics(self) -> dict[str, float]:
        return {"server_rss_before_mb": self.before_mb, "memory_growth_mb": self.growth_mb,
                "memory_growth_per_1000_requests_mb": self.per_1000_requests_mb}


def baseline(server: ModelServer) -> dict[str, float]:
    """The tree's memory now (empty when the server is not a local process)."""
    tree = server.process_tree()
    return process_tree_memory(tree) if tree else {}


def growth(before: dict[str, float], after: dict[str, float],
           requests: int) -> MemoryGrowth | None:
    """None when either measurement is missing (the server is not a local process)."""
    if "server_rss_mb" not in before or "server_rss_mb" not in after:
        return None
    return MemoryGrowth(before["server_rss_mb"], after["server_rss_mb"], requests)


def gate(measured: MemoryGrowth | None, limit: ByteSize) -> Gate:
    """Fails closed: memory that could not be measured does not pass."""
    if measured is None:
        return Gate(GATE, "not measured", str(limit), False, "<=", "")
    return Gate.at_most(GATE, measured.growth_mb, limit.mib, "MiB")
