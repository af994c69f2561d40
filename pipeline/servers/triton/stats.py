"""Triton's cumulative per-model statistics and the server-side queue/compute split."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipeline import metric_names as m
from pipeline.servers.base import (
    ServerStats,
)


@dataclass(frozen=True)
class TritonStats:
    """Cumulative per-model statistics from /v2/models/<m>/stats."""

    inference_count: int = 0
    execution_count: int = 0
    success_count: int = 0
    fail_count: int = 0
    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    batch_executions: dict[int, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> TritonStats:
        stats = body["model_stats"][0]
        inference = stats["inference_stats"]
        return cls(
            inference_count=int(stats.get("inference_count", 0)),
            execution_count=int(stats.get("execution_count", 0)),
            success_count=int(inference["success"]["count"]),
            fail_count=int(inference["fail"]["count"]),
            queue_ns=int(inference["queue"]["ns"]),
            compute_input_ns=int(inference["compute_input"]["ns"]),
            compute_infer_ns=int(inference["compute_infer"]["ns"]),
            compute_output_ns=int(inference["compute_output"]["ns"]),
            batch_executions={int(b["batch_size"]): int(b["compute_infer"]["count"])
                              for b in stats.get("batch_stats", [])},
        )

    def since(self, before: ServerStats) -> TritonStats:
        assert isinstance(before, TritonStats)
        return TritonStats(
            inference_count=self.inference_count - before.inference_count,
            execution_count=self.execution_count - before.execution_count,
            success_count=self.success_count - before.success_count,
            fail_count=self.fail_count - before.fail_count,
            queue_ns=self.queue_ns - before.queue_ns,
            compute_input_ns=self.compute_input_ns - before.compute_input_ns,
            compute_infer_ns=self.compute_infer_ns - before.compute_infer_ns,
            compute_output_ns=self.compute_output_ns - before.compute_output_ns,
            batch_executions={
                size: count - before.batch_executions.get(size, 0)
                for size, count in self.batch_executions.items()
                if count - before.batch_executions.get(size, 0) > 0},
        )

    def window_metrics(self) -> dict[str, float]:
        """Averages over a window (call on a delta): where a request spent its time."""
        requests = max(self.success_count, 1)
        executions = max(self.execution_count, 1)
        return {
            "server_requests": float(self.success_count),
            "server_executions": float(self.execution_count),
            "server_avg_batch_size": self.inference_count / executions,
            m.SERVER_QUEUE_US: self.queue_ns / requests / 1e3,
            "server_compute_input_us": self.compute_input_ns / requests / 1e3,
            "server_compute_infer_us": self.compute_infer_ns / requests / 1e3,
            "server_compute_output_us": self.compute_output_ns / requests / 1e3,
        }
