"""TorchServe's statistics from its Prometheus metrics, batch sizes included."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline import metric_names as m
from pipeline.servers.base import (
    ServerStats,
)

BATCH_METRIC = "ServePipelineBatches"


@dataclass(frozen=True)
class TorchServeStats:
    """Cumulative counters from TorchServe's metrics API (and our batch-size metric)."""

    requests: float = 0.0
    inference_us: float = 0.0
    queue_us: float = 0.0
    batch_executions: dict[int, int] = field(default_factory=dict)

    @classmethod
    def from_prometheus(cls, text: str, model: str) -> TorchServeStats:
        # Imported here: prometheus_client comes with the torchserve extra, and a
        # Triton-only install imports this module through the registry of kinds.
        from prometheus_client.parser import text_string_to_metric_families

        # The parser names counter samples "<name>_total" whatever the exposition said.
        values = {"ts_inference_requests": 0.0, "ts_inference_latency_microseconds": 0.0,
                  "ts_queue_latency_microseconds": 0.0}
        batches: dict[int, int] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name.removesuffix("_total")
                if name in values and sample.labels.get("model_name") == model:
                    values[name] += sample.value
                elif name == BATCH_METRIC and sample.labels.get("ModelName") == model:
                    size = int(sample.labels.get("BatchSize", "0"))
                    batches[size] = batches.get(size, 0) + int(sample.value)
        return cls(values["ts_inference_requests"],
                   values["ts_inference_latency_microseconds"],
                   values["ts_queue_latency_microseconds"], batches)

    def since(self, before: ServerStats) -> TorchServeStats:
        assert isinstance(before, TorchServeStats)
        return TorchServeStats(
            self.requests - before.requests, self.inference_us - before.inference_us,
            self.queue_us - before.queue_us,
            {size: count - before.batch_executions.get(size, 0)
             for size, count in self.batch_executions.items()
             if count - before.batch_executions.get(size, 0) > 0})

    def window_metrics(self) -> dict[str, float]:
        requests = max(self.requests, 1.0)
        executions = sum(self.batch_executions.values())
        batched = sum(size * count for size, count in self.batch_executions.items())
        return {
            "server_requests": self.requests,
            "server_executions": float(executions),
            "server_avg_batch_size": batched / executions if executions else 0.0,
            m.SERVER_QUEUE_US: self.queue_us / requests,
            "server_compute_infer_us": max(self.inference_us - self.queue_us, 0.0) / requests,
            "server_inference_us": self.inference_us / requests,
        }
