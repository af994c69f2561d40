"""One spec, one server block per kind: what each server is given, shown side by side.

The model, tensors, SLO, inputs and gates are shared as written. The server block is
translated: `kind` changes, durations become each server's own unit (Triton's
microseconds, TorchServe's whole milliseconds), and settings one server does not have
are named as such. A spec that only one kind can serve is refused (exit 2) with the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from pipeline.errors import UsageError
from pipeline.spec.models import LoadedSpec, Spec

KINDS = ("triton", "torchserve")


@dataclass(frozen=True)
class Setting:
    """One spec setting and what each server kind is given for it."""

    key: str
    written: str
    per_kind: dict[str, str]


@dataclass(frozen=True)
class Translated:
    kind: str
    loaded: LoadedSpec


def parse_kinds(text: str) -> tuple[str, str]:
    kinds = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in kinds if name not in KINDS]
    if unknown or len(kinds) != 2 or kinds[0] == kinds[1]:
        raise UsageError(f"--servers: expected two different kinds from {', '.join(KINDS)} "
                         f"(e.g. triton,torchserve), got {text!r}")
    return kinds[0], kinds[1]


def parse_instances(text: str | None, kinds: tuple[str, str]) -> dict[str, int]:
    """`triton=2,torchserve=1`: instances (Triton) / workers (TorchServe) per kind, in place
    of server.instances (to compare configs on purpose, e.g. a handicapped one)."""
    if not text:
        return {}
    counts: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        kind, _, count = part.partition("=")
        if kind.strip() not in kinds or not count.strip().isdigit() or \
                not 1 <= int(count) <= 64:
            raise UsageError(f"--instances: {part!r}: expected KIND=N with KIND one of "
                             f"{', '.join(kinds)} and N in 1..64")
        counts[kind.strip()] = int(count)
    return counts


def refusals(spec: Spec, file: str) -> list[str]:
    """Keys that only one of the kinds can serve: each a one-line reason."""
    server = spec.server
    found = []
    if server.runtime != "process":
        found.append(f"{file}: server.runtime: '{server.runtime}' runs Triton only in this "
                     "version; compare serves both kinds as local processes")
    if server.backend != "python":
        found.append(f"{file}: server.backend: '{server.backend}' is a Triton-only backend; "
                     "TorchServe cannot serve this spec (use backend: python to compare)")
    if server.batching.max_queue_delay.exact_in("ms") is None:
        found.append(f"{file}: server.batching.max_queue_delay: "
                     f"{server.batching.max_queue_delay} is not a whole number of "
                     "milliseconds, which TorchServe's maxBatchDelay needs")
    if server.image is not None and server.image.base is not None:
        found.append(f"{file}: server.image.base: a serving image is built for one kind; "
                     "leave server.image out to compare")
    return found


def translate(loaded: LoadedSpec, kinds: tuple[str, str],
              instances: Mapping[str, int] | None = None) -> list[Translated]:
    """The spec once per kind (ports picked free for each); UsageError naming the key
    when one kind cannot serve it."""
    problems = refusals(loaded.spec, loaded.files[-1])
    if problems:
        raise UsageError("; ".join(problems))
    spec = loaded.spec
    latency = spec.stages.latency.model_copy(update={"protocol": "http"})
    stages = spec.stages.model_copy(update={"latency": latency})
    translated = []
    for kind in kinds:
        count = (instances or {}).get(kind, spec.server.instances)
        server = spec.server.model_copy(update={"kind": kind, "ports": {},
                                                "instances": count})
        per_kind = spec.model_copy(update={"server": server, "stages": stages})
        translated.append(Translated(kind, replace(loaded, spec=per_kind)))
    return translated


def settings(spec: Spec, instances: Mapping[str, int] | None = None) -> list[Setting]:
    """The server block as written, and as each kind's own config receives it."""
    counts = {kind: (instances or {}).get(kind, spec.server.instances) for kind in KINDS}
    written = str(spec.server.instances) + (
        f" (--instances {','.join(f'{k}={n}' for k, n in instances.items())})"
        if instances else "")
    batching = spec.server.batching
    delay = batching.max_queue_delay
    preferred = batching.preferred_batch_sizes
    device = "KIND_GPU" if spec.server.device == "gpu" else "KIND_CPU"
    return [
        Setting("server.batching.max_batch_size", str(batching.max_batch_size),
                {"triton": f"max_batch_size: {batching.max_batch_size}",
                 "torchserve": f"batchSize: {batching.max_batch_size}"}),
        Setting("server.batching.max_queue_delay", str(delay),
                {"triton": f"max_queue_delay_microseconds: {delay.exact_in('us')}",
                 "torchserve": f"maxBatchDelay: {delay.exact_in('ms')} (milliseconds)"}),
        Setting("server.batching.preferred_batch_sizes", str(preferred or "[]"),
                {"triton": f"preferred_batch_size: {preferred}" if preferred
                 else "(none: batches up to max_batch_size)",
                 "torchserve": "(no such setting: batches up to batchSize; the report shows "
                               "whether the preferred sizes formed)"}),
        Setting("server.instances", written,
                {"triton": f"instance_group {{count: {counts['triton']}, kind: {device}}}",
                 "torchserve": f"minWorkers: {counts['torchserve']}, "
                               f"maxWorkers: {counts['torchserve']}"}),
        Setting("server.ports", str(spec.server.ports or "{}"),
                {"triton": "http, grpc, metrics: free ports on 127.0.0.1",
                 "torchserve": "inference, management, metrics, gRPC: free ports on "
                               "127.0.0.1"}),
        Setting("stages.latency.protocol", spec.stages.latency.protocol,
                {"triton": "HTTP/1.1, KServe v2 with binary tensor data",
                 "torchserve": "HTTP/1.1, .npy body (.npz for several inputs)"}),
    ]
