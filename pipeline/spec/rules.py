"""Rules that span keys of a valid spec: the latency budget, inputs inside the project,
what each server kind and runtime can run."""

from __future__ import annotations

from pathlib import Path

from pipeline import metric_names
from pipeline.errors import SpecIssue
from pipeline.spec.models import TORCHSERVE_PORTS, TRITON_PORTS, Spec
from pipeline.spec.positions import KeyPath, Mark, PositionedDocument, format_path


def semantic_issues(spec: Spec, document: PositionedDocument, workspace: Path) -> list[SpecIssue]:
    """Rules that span keys: the latency budget, files that must exist, what can run."""
    issues: list[SpecIssue] = []

    def add(path: KeyPath, message: str) -> None:
        mark: Mark = document.mark_for(path)
        issues.append(SpecIssue(mark.file, mark.line, mark.column, format_path(path), message))

    slo = spec.slo
    queue_budget = slo.queue_budget()
    p99_at = document.mark_for(("slo", "p99"))
    items = " + ".join(f"{name} {value}" for name, value in slo.budget.items() if value.ns)
    if queue_budget.ns <= 0:
        add(("slo", "budget"), f"the budget items ({items}) use all of slo.p99 {slo.p99}; "
            "nothing is left for queueing")
    elif spec.server.batching.max_queue_delay > queue_budget:
        add(("server", "batching", "max_queue_delay"),
            f"{spec.server.batching.max_queue_delay} exceeds the queue budget {queue_budget} "
            f"(slo.p99 {slo.p99} from {p99_at.file}:{p99_at.line}"
            + (f" − {items}" if items else "") + ")")
    if slo.p95 is not None and slo.p95 > slo.p99:
        add(("slo", "p95"), f"p95 {slo.p95} is above p99 {slo.p99}")

    root = project_root(workspace)
    inputs: list[tuple[KeyPath, str | None]] = [
        (("model", "source"), spec.model.source.path),
        (("model", "entrypoint"), (spec.model.entrypoint or "").rpartition(":")[0] or None),
        (("stages", "parity", "data"), spec.stages.parity.data)]
    for key, relative in inputs:
        if relative is not None and not inside(workspace / relative, root):
            add(key, f"{relative} resolves to {(workspace / relative).resolve()}, outside the "
                f"project ({root}): inputs must stay inside the spec's repository (a symlink "
                "out of it counts)")
            return issues
    if spec.model.source.path is not None:
        source = workspace / spec.model.source.path
        if not source.is_file():
            add(("model", "source"), f"model file not found: {source}")
    dvc = spec.model.source.dvc
    if dvc is not None and "://" not in dvc.repo and not dvc.repo.startswith("git@") \
            and not (workspace / dvc.repo).is_dir():
        add(("model", "source", "dvc", "repo"), f"repository not found: {workspace / dvc.repo}")
    if spec.model.entrypoint is not None:
        file_part = spec.model.entrypoint.partition(":")[0]
        if ":" not in spec.model.entrypoint or not file_part.endswith(".py"):
            add(("model", "entrypoint"), "expected 'file.py:callable'")
        elif not (workspace / file_part).is_file():
            add(("model", "entrypoint"), f"entrypoint file not found: {workspace / file_part}")
    if spec.stages.parity.data is not None and not (workspace / spec.stages.parity.data).is_file():
        add(("stages", "parity", "data"), f"parity data not found: "
            f"{workspace / spec.stages.parity.data}")

    server = spec.server
    known_ports = TRITON_PORTS if server.kind == "triton" else TORCHSERVE_PORTS
    if server.runtime == "docker":
        if server.image is None or server.image.base is None:
            add(("server", "image", "base"), "runtime docker needs server.image.base (the "
                "image the serving image is built on)")
        if server.kind == "torchserve":
            add(("server", "runtime"), "runtime docker is available for Triton in this "
                "version; TorchServe runs as a local process (its image can still be built "
                "and published with server.image)")
        if server.backend in ("onnxruntime", "tensorrt") and spec.model.format != "onnx":
            add(("server", "backend"), f"backend {server.backend} serves ONNX models "
                "(model.format: onnx)")
        if server.backend == "pytorch" and spec.model.format != "torchscript":
            add(("server", "backend"), "backend pytorch serves TorchScript models "
                "(model.format: torchscript)")
    elif server.kind == "triton" and server.backend != "python":
        add(("server", "backend"), f"'{server.backend}' exists only in NVIDIA's Triton "
            "images (runtime: docker); the local tritonserver has the python backend, "
            "which runs TorchScript, eager and ONNX models")
    if server.kind == "torchserve":
        if server.backend != "python":
            add(("server", "backend"), "server.backend is Triton's; TorchServe runs the model "
                "in its Python workers (leave it out)")
        if server.batching.max_queue_delay.exact_in("ms") is None:
            add(("server", "batching", "max_queue_delay"),
                f"{server.batching.max_queue_delay} is not a whole number of milliseconds: "
                "TorchServe's maxBatchDelay counts milliseconds, and rounding would change "
                "the latency you measured")
    elif server.batching.max_queue_delay.exact_in("us") is None:
        add(("server", "batching", "max_queue_delay"),
            f"{server.batching.max_queue_delay} is not a whole number of microseconds "
            "(Triton's max_queue_delay_microseconds)")
    for name in sorted(set(server.ports) - set(known_ports)):
        add(("server", "ports", name), f"unknown port name; {server.kind}'s are "
            f"{', '.join(known_ports)}")
    if spec.model.format == "onnx" and spec.model.source.path is not None \
            and not spec.model.source.path.endswith(".onnx"):
        add(("model", "source"), "format onnx expects a .onnx file")
    if server.kind == "torchserve" and spec.stages.latency.protocol == "grpc":
        add(("stages", "latency", "protocol"), "gRPC load is measured for Triton only; use "
            "http with TorchServe")
    if spec.stages.latency.batch_size > server.batching.max_batch_size:
        add(("stages", "latency", "batch_size"),
            f"{spec.stages.latency.batch_size} is over server.batching.max_batch_size "
            f"{server.batching.max_batch_size}")
    for index, metric in enumerate(spec.stages.regression.metrics):
        if metric not in metric_names.WATCHABLE:
            guess = metric_names.closest(metric)
            add(("stages", "regression", "metrics", index), f"unknown metric '{metric}'" + (
                f"; did you mean '{guess}'?" if guess else
                "; expected stage.metric, e.g. latency.p99_ms (see `serve-pipeline schema`)"))
    return issues


def project_root(workspace: Path) -> Path:
    """The git work tree holding the spec, else the spec's own folder."""
    folder = workspace.resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return folder


def inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())
