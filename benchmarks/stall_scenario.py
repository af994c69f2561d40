"""A model that stalls every k-th request, and what queueing theory predicts for it.

Shared by the coordinated-omission test and benchmarks/loadgen.py: a Triton
python-backend model (one instance, no batching) that sleeps `stall_s` on every
`every`-th request, fed at a constant rate. A single FIFO server fed on
schedule makes every request that arrives during a stall wait for it; the
predicted latencies come from replaying that queue.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.servers.ports import loopback_ports
from pipeline.servers.specs import load_spec
from pipeline.servers.triton.kind import TritonKind
from pipeline.servers.triton.server import TritonInstallation, TritonServer

MODEL_SOURCE = Path(__file__).parent / "stall_model" / "model.py"


@dataclass(frozen=True)
class StallScenario:
    """Every `every`-th request stalls the model for `stall_s`, under `rate`/s for `seconds`."""

    every: int = 200      # requests between stalls
    stall_s: float = 0.3  # how long the model stalls
    rate: float = 100.0   # offered requests per second
    seconds: float = 9.0  # the schedule's length

    def expected_latencies(self, service_s: float) -> list[float]:
        done, latencies = 0.0, []
        for index in range(int(self.rate * self.seconds)):
            arrival = index / self.rate
            work = service_s + (self.stall_s if (index + 1) % self.every == 0 else 0.0)
            done = max(done, arrival) + work
            latencies.append(done - arrival)
        return latencies

    def expected_p99_ms(self, service_s: float) -> float:
        return float(np.percentile(self.expected_latencies(service_s), 99)) * 1e3

    def write_spec(self, folder: Path) -> Path:
        """A spec naming the model (the repository itself is written by hand)."""
        (folder / "dummy.pt").write_bytes(b"unused: the repository is written by hand")
        spec = folder / "serve.yaml"
        spec.write_text(
            "version: 1\nname: stall\nmodel:\n  source: dummy.pt\n  format: torchscript\n"
            "  inputs: [{name: x, dtype: float32, shape: [1]}]\n"
            "  outputs: [{name: y, dtype: float32, shape: [1]}]\n"
            "server: {kind: triton, batching: {max_batch_size: 1}}\nslo: {p99: 1s}\n")
        return spec

    def write_repository(self, folder: Path) -> Path:
        repository = folder / "repository"
        model = repository / "stall"
        (model / "1").mkdir(parents=True)
        shutil.copyfile(MODEL_SOURCE, model / "1" / "model.py")
        (model / "config.pbtxt").write_text(
            'name: "stall"\nbackend: "python"\nmax_batch_size: 1\n'
            'input [{name: "x" data_type: TYPE_FP32 dims: [1]}]\n'
            'output [{name: "y" data_type: TYPE_FP32 dims: [1]}]\n'
            "instance_group [{count: 1 kind: KIND_CPU}]\n"
            f'parameters {{key: "stall_every" value {{string_value: "{self.every}"}}}}\n'
            f'parameters {{key: "stall_s" value {{string_value: "{self.stall_s}"}}}}\n')
        return repository

    @contextmanager
    def serving(self, folder: Path) -> Iterator[TritonServer]:
        """A ready tritonserver on loopback serving the hand-written repository."""
        loaded = load_spec(self.write_spec(folder))
        repository = self.write_repository(folder)
        with TritonServer(TritonInstallation.find(), repository, loaded,
                          loopback_ports(TritonKind.port_names), folder / "server",
                          dict(os.environ)) as server:
            yield server
