"""Rules that span keys of a valid spec: the latency budget, inputs inside the project,
what the runtime can run; the server kind's own rules (its `KindSpec`) run among them."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from pipeline import metric_names
from pipeline.errors import SpecIssue
from pipeline.spec.kind_specs import KindSpec, KindSpecs
from pipeline.spec.models import Spec
from pipeline.spec.positions import KeyPath, Mark, PositionedDocument, format_path
from pipeline.spec.problems import Problem, Rule
from pipeline.spec.replay_log import read_replay_log
from pipeline.spec.request_data import RequestDataError, read_request_data


def semantic_issues(spec: Spec, document: PositionedDocument, workspace: Path,
                    kinds: KindSpecs) -> list[SpecIssue]:
    """Rules that span keys: the latency budget, files that must exist, what can run;
    `kinds` are the known kinds: the spec's own kind's rules run, and every kind's rules on
    its block `server.<kind>` where the spec has one.

    An input outside the project stops the checks there: nothing else is looked up."""
    problems: list[Problem] = []
    for rule in _BUDGET_RULES:
        problems += rule(spec, document, workspace)
    outside = next(inputs_outside_project(spec, workspace), None)
    if outside is not None:
        return _issues(document, [*problems, outside])
    kind = kinds[spec.server.kind]
    sections = [rule for other in kinds.values() if spec.server.section(other.name) is not None
                for rule in other.section_rules]
    rules = (input_files_exist, docker_has_a_base_image, *kind.settings_rules,
             port_names_known(kind), *sections, onnx_model_is_onnx, *kind.load_rules,
             load_batch_fits, requests_fit, regression_metrics_known, request_data_matches,
             replay_log_matches, mixes_go_over_http, text_needs_a_torch_model)
    for rule in rules:
        problems += rule(spec, document, workspace)
    return _issues(document, problems)


def _issues(document: PositionedDocument, problems: list[Problem]) -> list[SpecIssue]:
    issues: list[SpecIssue] = []
    for path, message in problems:
        mark: Mark = document.mark_for(path)
        issues.append(SpecIssue(mark.file, mark.line, mark.column, format_path(path), message))
    return issues


def queue_budget_left(spec: Spec, document: PositionedDocument, _: Path) -> Iterator[Problem]:
    slo = spec.slo
    queue_budget = slo.queue_budget()
    p99_at = document.mark_for(("slo", "p99"))
    items = " + ".join(f"{name} {value}" for name, value in slo.budget.items() if value.ns)
    if queue_budget.ns <= 0:
        yield (("slo", "budget"), f"the budget items ({items}) use all of slo.p99 {slo.p99} "
               f"(from {p99_at.file}:{p99_at.line}); nothing is left for queueing")
    elif spec.server.batching.max_queue_delay > queue_budget:
        yield (("server", "batching", "max_queue_delay"),
               f"{spec.server.batching.max_queue_delay} exceeds the queue budget {queue_budget} "
               f"(slo.p99 {slo.p99} from {p99_at.file}:{p99_at.line}"
               + (f" − ({items})" if items else "") + ")")


def p95_under_p99(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    slo = spec.slo
    if slo.p95 is not None and slo.p95 > slo.p99:
        yield ("slo", "p95"), f"p95 {slo.p95} is above p99 {slo.p99}"


def inputs_outside_project(spec: Spec, workspace: Path) -> Iterator[Problem]:
    root = project_root(workspace)
    inputs: list[tuple[KeyPath, str | None]] = [
        (("model", "source"), spec.model.source.path),
        (("model", "entrypoint"), (spec.model.entrypoint or "").rpartition(":")[0] or None),
        (("stages", "parity", "data"), spec.stages.parity.data),
        (("stages", "latency", "data"), spec.stages.latency.data),
        (("stages", "saturation", "data"), spec.stages.saturation.data)]
    replay = spec.stages.replay
    if replay is not None:
        inputs += [(("stages", "replay", "log"), replay.log),
                   (("stages", "replay", "data"), replay.data)]
    for key, relative in inputs:
        if relative is not None and not inside(workspace / relative, root):
            yield (key, f"{relative} resolves to {(workspace / relative).resolve()}, outside the "
                   f"project ({root}): inputs must stay inside the spec's repository (a symlink "
                   "out of it counts)")


def input_files_exist(spec: Spec, _: PositionedDocument, workspace: Path) -> Iterator[Problem]:
    if spec.model.source.path is not None:
        source = workspace / spec.model.source.path
        if not source.is_file():
            yield ("model", "source"), f"model file not found: {source}"
    dvc = spec.model.source.dvc
    if dvc is not None and "://" not in dvc.repo and not dvc.repo.startswith("git@") \
            and not (workspace / dvc.repo).is_dir():
        yield ("model", "source", "dvc", "repo"), f"repository not found: {workspace / dvc.repo}"
    if spec.model.entrypoint is not None:
        file_part = spec.model.entrypoint.partition(":")[0]
        if ":" not in spec.model.entrypoint or not file_part.endswith(".py"):
            yield ("model", "entrypoint"), "expected 'file.py:callable'"
        elif not (workspace / file_part).is_file():
            yield ("model", "entrypoint"), f"entrypoint file not found: {workspace / file_part}"
    if spec.stages.parity.data is not None and not (workspace / spec.stages.parity.data).is_file():
        yield (("stages", "parity", "data"), f"parity data not found: "
               f"{workspace / spec.stages.parity.data}")
    elif spec.stages.parity.data is not None:
        # Read as a request data file (the same .npz layout), so that one that is not an
        # .npz or does not match model.inputs is refused here, not after a server started.
        data = spec.stages.parity.data
        if not data.endswith(".npz"):
            yield ("stages", "parity", "data"), f"{data}: expected a .npz file"
            return
        try:
            read_request_data(workspace / data, data, spec.model.inputs, 1)
        except RequestDataError as exc:
            yield ("stages", "parity", "data"), str(exc)


def docker_has_a_base_image(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    server = spec.server
    if server.runtime == "docker" and (server.image is None or server.image.base is None):
        yield (("server", "image", "base"), "runtime docker needs server.image.base (the "
               "image the serving image is built on)")


def docker_backend_serves_format(spec: Spec, _: PositionedDocument,
                                 __: Path) -> Iterator[Problem]:
    """In a serving image, the backend must serve the model's format (a kind whose images
    have backends lists this rule among its own)."""
    server = spec.server
    if server.runtime != "docker":
        return
    if server.backend in ("onnxruntime", "tensorrt") and spec.model.format != "onnx":
        yield (("server", "backend"), f"backend {server.backend} serves ONNX models "
               "(model.format: onnx)")
    if server.backend == "pytorch" and spec.model.format != "torchscript":
        yield (("server", "backend"), "backend pytorch serves TorchScript models "
               "(model.format: torchscript)")


def port_names_known(kind: KindSpec) -> Rule:
    def rule(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
        for name in sorted(set(spec.server.ports) - set(kind.port_names)):
            yield (("server", "ports", name), f"unknown port name; {kind.name}'s are "
                   f"{', '.join(kind.port_names)}")
    return rule


def delay_in_whole(unit: str, units: str, why: str) -> Rule:
    """max_queue_delay must be a whole number of `unit` (`units` in words): the kind's
    config counts it so, and rounding would change the latency measured."""
    def rule(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
        delay = spec.server.batching.max_queue_delay
        if delay.exact_in(unit) is None:
            yield (("server", "batching", "max_queue_delay"),
                   f"{delay} is not a whole number of {units}{why}")
    return rule


def onnx_model_is_onnx(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    if spec.model.format == "onnx" and spec.model.source.path is not None \
            and not spec.model.source.path.endswith(".onnx"):
        yield ("model", "source"), "format onnx expects a .onnx file"


def load_batch_fits(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    server = spec.server
    if spec.stages.latency.batch_size > server.batching.max_batch_size:
        yield (("stages", "latency", "batch_size"),
               f"{spec.stages.latency.batch_size} is over server.batching.max_batch_size "
               f"{server.batching.max_batch_size}")


def regression_metrics_known(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    for index, metric in enumerate(spec.stages.regression.metrics):
        if metric not in metric_names.WATCHABLE:
            guess = metric_names.closest(metric)
            yield (("stages", "regression", "metrics", index), f"unknown metric '{metric}'" + (
                f"; did you mean '{guess}'?" if guess else
                "; expected stage.metric, e.g. latency.p99_ms (see `serve-pipeline schema`)"))


def request_data_matches(spec: Spec, _: PositionedDocument, workspace: Path
                         ) -> Iterator[Problem]:
    """A stage's data file holds requests the model's inputs take: every input, its dtype,
    items inside the declared dims, parsable lines (the message names file:line or
    file:array)."""
    for stage in ("latency", "saturation"):
        relative = getattr(spec.stages, stage).data
        if relative is None:
            continue
        key = ("stages", stage, "data")
        path = workspace / relative
        if not path.is_file():
            yield key, f"data file not found: {path}"
            continue
        try:
            read_request_data(path, relative, spec.model.inputs, spec.stages.latency.batch_size)
        except RequestDataError as error:
            yield key, str(error)


def replay_log_matches(spec: Spec, _: PositionedDocument, workspace: Path
                       ) -> Iterator[Problem]:
    """The replay's log holds requests the model takes, in arrival order, no longer than
    max_duration at its speed; its data file (where it names one) as a stage's data file."""
    replay = spec.stages.replay
    if replay is None:
        return
    if replay.data is not None:
        path = workspace / replay.data
        if not path.is_file():
            yield ("stages", "replay", "data"), f"data file not found: {path}"
        else:
            try:
                read_request_data(path, replay.data, spec.model.inputs,
                                  spec.stages.latency.batch_size)
            except RequestDataError as error:
                yield ("stages", "replay", "data"), str(error)
    key = ("stages", "replay", "log")
    path = workspace / replay.log
    if not path.is_file():
        yield key, f"replay log not found: {path}"
        return
    try:
        log = read_replay_log(path, replay.log, spec.model.inputs)
    except RequestDataError as error:
        yield key, str(error)
        return
    seconds = log.duration_s / replay.speed.factor
    if seconds > replay.max_duration.seconds:
        yield key, (f"{replay.log} spans {log.duration_s:.1f}s, {seconds:.1f}s at "
                    f"{replay.speed}: longer than stages.replay.max_duration "
                    f"{replay.max_duration}")


def mixes_go_over_http(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    """Requests of several sizes or from a file go over HTTP (one connection pool sends
    them in turn); gRPC load sends one request."""
    stages = spec.stages
    replay = stages.replay
    mixed = spec.model.sizes is not None or stages.latency.data is not None \
        or stages.saturation.data is not None or replay is not None
    if mixed and stages.latency.protocol == "grpc":
        why = "model.sizes" if spec.model.sizes is not None else \
            "a replay log" if replay is not None else "a data file"
        yield (("stages", "latency", "protocol"), f"load with {why} is sent over http; grpc "
               "sends a single request")


def text_needs_a_torch_model(spec: Spec, _: PositionedDocument, __: Path
                             ) -> Iterator[Problem]:
    """String tensors reach a TorchScript or eager model as List[str], through Triton's
    python backend or TorchServe's handler; nothing else here carries them."""
    model = spec.model
    if not any(t.dtype == "string" for t in [*model.inputs, *model.outputs]):
        return
    if model.format == "onnx":
        yield (("model", "format"), "string tensors are served for torchscript and eager "
               "models (a List[str] in forward); onnx models take numeric tensors here")
    elif spec.server.backend != "python":       # Triton's; TorchServe runs a handler
        yield (("server", "backend"), f"string tensors are served by the python backend; "
               f"backend {spec.server.backend} is not")


# The largest request any stage builds (parity's batches of max_batch_size items) is held in
# memory whole, several times: by the generator or data file, the encoder, the server, the
# reference. Past this, a typo in a shape (an extra zero) is what it almost always is.
REQUEST_LIMIT_BYTES = 1 << 30
DTYPE_BYTES = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
               "float16": 2, "float32": 4, "float64": 8}


def requests_fit(spec: Spec, _: PositionedDocument, __: Path) -> Iterator[Problem]:
    """A full batch of the declared tensors stays under REQUEST_LIMIT_BYTES (string tensors
    have no declared size; a -1 takes the largest of model.sizes, else 1)."""
    model = spec.model
    items = max(spec.server.batching.max_batch_size, 1)
    largest = max(model.sizes.values) if model.sizes is not None else 1
    for side, tensors in (("inputs", model.inputs), ("outputs", model.outputs)):
        for index, tensor in enumerate(tensors):
            width = DTYPE_BYTES.get(tensor.dtype)
            if width is None:
                continue
            item = width * math.prod(tensor.item_shape(largest) if tensor.variable
                                     else tensor.shape)
            if item * items > REQUEST_LIMIT_BYTES:
                yield (("model", side, index, "shape"),
                       f"one item of {tensor.name} is {_bytes(item)} ({tensor.dtype} "
                       f"{tensor.shape}), {_bytes(item * items)} for a batch of "
                       f"max_batch_size {items}: over the {_bytes(REQUEST_LIMIT_BYTES)} a "
                       "request may hold here (check the shape for a typo; a smaller "
                       "max_batch_size lowers it)")


def _bytes(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:,.1f} {unit}"
    return f"{count} B"


_BUDGET_RULES: tuple[Rule, ...] = (queue_budget_left, p95_under_p99)


def project_root(workspace: Path) -> Path:
    """The git work tree holding the spec, else the spec's own folder."""
    folder = workspace.resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return folder


def inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())
