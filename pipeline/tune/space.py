"""The search space: server batching and instance settings, from defaults and `tune:`.

Decisions:
- Defaults: instances 1..min(CPU count, 4) on CPU and 1, 2, 4 per GPU; max_batch_size
  1, 8, 16, 32, 64 (and the spec's own value); max_queue_delay 0, 1ms, 2ms, 5ms (TorchServe
  counts whole milliseconds and has no "0": 1ms, 2ms, 5ms, 10ms); preferred_batch_sizes
  the spec's own list and none (Triton then fills in [max_batch_size]: a list that is
  just that counts as none).
- A delay over the spec's queue budget (slo.p99 minus slo.budget) is left out, as
  `validate` would refuse it. With max_batch_size 1 nothing is batched: one delay (0).
- `gpu` is in the space only where a GPU is seen (NVML), or when `tune.devices` asks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, replace

from pipeline.servers import server_kind
from pipeline.spec.models import BatchingSpec, LoadedSpec, Spec
from pipeline.spec.units import Duration, format_duration_ns

DEFAULT_BATCH_SIZES = (1, 8, 16, 32, 64)
MAX_DEFAULT_CPU_INSTANCES = 4
GPU_INSTANCES = (1, 2, 4)


@dataclass(frozen=True, order=True)
class Config:
    """One point of the space: what goes into server.batching / server.instances / device."""

    device: str
    instances: int
    max_batch_size: int
    max_queue_delay_us: int
    preferred: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        delay = format_duration_ns(self.max_queue_delay_us * 1000) if self.max_queue_delay_us \
            else "0"
        text = f"{self.device} x{self.instances} batch {self.max_batch_size} delay {delay}"
        if self.preferred:
            text += f" pref {list(self.preferred)}"
        return text

    def to_json(self) -> dict[str, object]:
        return {"device": self.device, "instances": self.instances,
                "max_batch_size": self.max_batch_size,
                "max_queue_delay": format_duration_ns(self.max_queue_delay_us * 1000)
                if self.max_queue_delay_us else "0us",
                "preferred_batch_sizes": list(self.preferred)}

    def applied(self, loaded: LoadedSpec) -> LoadedSpec:
        """The spec with this config as its server block (everything else unchanged)."""
        return replace(loaded, spec=apply_config(loaded.spec, self))


def apply_config(spec: Spec, config: Config) -> Spec:
    delay = Duration(config.max_queue_delay_us * 1000,
                     format_duration_ns(config.max_queue_delay_us * 1000)
                     if config.max_queue_delay_us else "0us")
    batching = BatchingSpec(max_batch_size=config.max_batch_size, max_queue_delay=delay,
                            preferred_batch_sizes=list(config.preferred))
    server = spec.server.model_copy(update={"device": config.device,
                                            "instances": config.instances,
                                            "batching": batching})
    return spec.model_copy(update={"server": server})


def current_config(spec: Spec) -> Config:
    """The spec's own server settings as a point of the space (tune's baseline), written as
    `build_space` writes its points."""
    batching = spec.server.batching
    size = batching.max_batch_size
    preferred = tuple(sorted(set(batching.preferred_batch_sizes)))
    if preferred == (size,) or size == 1 or \
            not server_kind(spec.server.kind).tuning.has_preferred_batch_sizes:
        preferred = ()
    return Config(spec.server.device, spec.server.instances, size,
                  batching.max_queue_delay.ns // 1000, preferred)


def build_space(spec: Spec, gpu_present: bool, cpu_count: int | None = None) -> list[Config]:
    """Every config the search may consider, in a stable order."""
    tune = spec.tune
    step_us = server_kind(spec.server.kind).tuning.delay_step_us
    devices = list(tune.devices) if tune and tune.devices else [spec.server.device]
    if tune is None or tune.devices is None:
        devices = [d for d in devices if d == "cpu" or gpu_present] or ["cpu"]
    budget_us = spec.slo.queue_budget().ns // 1000
    sizes = _batch_sizes(spec)
    delays = _delays(spec)
    configs: set[Config] = set()
    for device in devices:
        for instances in _instances(spec, device, cpu_count):
            for size in sizes:
                for delay in (delays if size > 1 else [0]):
                    if delay > budget_us or delay % step_us:
                        continue
                    for preferred in _preferred(spec, size):
                        configs.add(Config(device, instances, size, delay, preferred))
    return sorted(configs)


def _instances(spec: Spec, device: str, cpu_count: int | None) -> list[int]:
    if spec.tune and spec.tune.instances:
        return sorted(set(spec.tune.instances))
    if device == "gpu":
        return list(GPU_INSTANCES)
    cores = cpu_count or os.cpu_count() or 1
    return list(range(1, min(cores, MAX_DEFAULT_CPU_INSTANCES) + 1))


def _batch_sizes(spec: Spec) -> list[int]:
    if spec.tune and spec.tune.max_batch_size:
        return sorted(set(spec.tune.max_batch_size))
    return sorted(set(DEFAULT_BATCH_SIZES) | {spec.server.batching.max_batch_size})


def _delays(spec: Spec) -> list[int]:
    if spec.tune and spec.tune.max_queue_delay:
        return sorted({d.ns // 1000 for d in spec.tune.max_queue_delay})
    return list(server_kind(spec.server.kind).tuning.default_delays_us)


def _preferred(spec: Spec, size: int) -> Iterable[tuple[int, ...]]:
    if not server_kind(spec.server.kind).tuning.has_preferred_batch_sizes or size == 1:
        return [()]
    choices = [list(c) for c in spec.tune.preferred_batch_sizes] \
        if spec.tune and spec.tune.preferred_batch_sizes is not None \
        else [spec.server.batching.preferred_batch_sizes, []]
    found = set()
    for choice in choices:
        kept = tuple(sorted({s for s in choice if 1 <= s <= size}))
        # Triton fills in [max_batch_size] when none is given: the same config.
        found.add(() if kept == (size,) else kept)
    return sorted(found)
