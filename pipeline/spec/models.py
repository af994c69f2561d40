"""The serve.yaml spec (version 1) as pydantic models, loaded with its environment overlay."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pipeline import metric_names
from pipeline.errors import SpecError, SpecIssue
from pipeline.spec.issues import issues_from_validation
from pipeline.spec.positions import KeyPath, Mark, PositionedDocument, format_path, load_document
from pipeline.spec.units import (
    Duration,
    DurationField,
    Percentage,
    PercentageField,
    RateField,
    SizeField,
)

Dtype = Literal["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                "float64"]
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
TRITON_PORTS = ("http", "grpc", "metrics")
TORCHSERVE_PORTS = ("inference", "management", "metrics", "grpc_inference", "grpc_management")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TensorSpec(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$",
                      description="Tensor name as the server exposes it.")
    dtype: Dtype = Field(description="Element type.")
    shape: list[int] = Field(min_length=1, description=(
        "Per-item shape; the batch dimension is implicit and comes first."))

    @field_validator("shape")
    @classmethod
    def _positive_dims(cls, shape: list[int]) -> list[int]:
        if any(dim < 1 for dim in shape):
            raise PydanticCustomError(
                "shape", "every dimension must be a positive integer, got {shape}",
                {"shape": shape})
        return shape


class DvcLocation(StrictModel):
    path: str = Field(description="Path of the DVC-tracked file inside the repository.")
    repo: str = Field(default=".", description="Git repository (path or URL).")
    rev: str | None = Field(default=None, description="Git revision (tag, branch, commit).")


class ModelSource(StrictModel):
    """Either a path (written as a plain string) or a DVC location."""

    path: str | None = None
    dvc: DvcLocation | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"path": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _exactly_one(self) -> ModelSource:
        if (self.path is None) == (self.dvc is None):
            raise PydanticCustomError(
                "source", "give either a path (a string) or {{dvc: {{path, repo, rev}}}}")
        return self

    def describe(self) -> str:
        if self.dvc is not None:
            return f"dvc:{self.dvc.repo}:{self.dvc.path}@{self.dvc.rev or 'HEAD'}"
        return str(self.path)


class ModelSpec(StrictModel):
    source: Annotated[ModelSource, WithJsonSchema({
        "description": "Where the model file comes from.",
        "anyOf": [
            {"type": "string", "description": "Path relative to the spec file."},
            {"type": "object", "required": ["dvc"], "additionalProperties": False,
             "properties": {"dvc": {"type": "object", "additionalProperties": False,
                                    "required": ["path"],
                                    "properties": {"path": {"type": "string"},
                                                   "repo": {"type": "string"},
                                                   "rev": {"type": "string"}}}}},
        ]})]
    format: Literal["torchscript", "eager", "onnx"] = Field(description=(
        "torchscript: a torch.jit archive (.pt); eager: a state_dict plus an entrypoint; "
        "onnx: an ONNX graph."))
    entrypoint: str | None = Field(default=None, description=(
        "eager only: 'file.py:callable' returning an nn.Module, relative to the spec."))
    inputs: list[TensorSpec] = Field(min_length=1, description="The model's inputs, in "
                                     "forward() argument order.")
    outputs: list[TensorSpec] = Field(min_length=1, description="The model's outputs, in "
                                      "return order.")
    trusted: bool = Field(default=False, description=(
        "eager only: allow full pickle loading of the weights (torch.load weights_only=False)."))

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        if self.format == "eager" and self.entrypoint is None:
            raise PydanticCustomError("entrypoint", "format eager needs model.entrypoint "
                                      "('file.py:callable' returning an nn.Module)")
        if self.format != "eager" and self.entrypoint is not None:
            raise PydanticCustomError("entrypoint", "model.entrypoint is used only with "
                                      "format: eager")
        names = [t.name for t in (*self.inputs, *self.outputs)]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise PydanticCustomError("names", "tensor names must be unique; repeated: "
                                      "{names}", {"names": ", ".join(duplicates)})
        return self


class BatchingSpec(StrictModel):
    max_batch_size: int = Field(default=8, ge=1, le=4096, description=(
        "Largest batch the server may form (Triton max_batch_size, TorchServe batchSize)."))
    max_queue_delay: DurationField = Field(default=Duration(0, "0us"), description=(
        "How long a request may wait for a batch to fill. Triton: "
        "max_queue_delay_microseconds; TorchServe: maxBatchDelay (ms)."))
    preferred_batch_sizes: list[int] = Field(default_factory=list, description=(
        "Triton preferred_batch_size; the report checks whether they are reached."))

    @model_validator(mode="after")
    def _preferred_within_max(self) -> BatchingSpec:
        bad = [s for s in self.preferred_batch_sizes if not 1 <= s <= self.max_batch_size]
        if bad:
            raise PydanticCustomError(
                "preferred", "preferred_batch_sizes {bad} must lie in 1..max_batch_size "
                "({max})", {"bad": bad, "max": self.max_batch_size})
        return self


class ImageSpec(StrictModel):
    base: str | None = Field(default=None, description=(
        "Base image of the serving image: NVIDIA's Triton image (nvcr.io/nvidia/"
        "tritonserver:<version>-py3) or a TorchServe image (pytorch/torchserve:<tag>); it "
        "must be present on the Docker host or pullable."))
    repository: str | None = Field(default=None, description=(
        "Where publish pushes the image (registry/path/name); the release records "
        "repository@sha256:<digest>."))
    shm_size: str = Field(default="256m", pattern=r"^\d+[bkmg]?$", description=(
        "Shared memory of the container (Triton's python backend passes tensors through "
        "it)."))
    memory_limit: str | None = Field(default=None, pattern=r"^\d+[bkmg]?$", description=(
        "Memory limit of the container (docker's --memory), e.g. 8g."))


class ServerSpec(StrictModel):
    kind: Literal["triton", "torchserve"] = Field(description="Which model server runs it.")
    runtime: Literal["process", "docker"] = Field(default="process", description=(
        "process: a local server process; docker: the serving image as a container."))
    backend: Literal["python", "onnxruntime", "pytorch", "tensorrt"] = Field(
        default="python", description="Triton only: the backend that runs the model.")
    device: Literal["cpu", "gpu"] = Field(default="cpu", description="Where instances run.")
    instances: int = Field(default=1, ge=1, le=64, description=(
        "Triton instance_group count / TorchServe workers."))
    batching: BatchingSpec = Field(default_factory=BatchingSpec, description=(
        "Dynamic batching, in units the tool converts for each server."))
    ports: dict[str, int] = Field(default_factory=dict, description=(
        "Production ports by name (triton: http, grpc, metrics; torchserve: inference, "
        "management, metrics, grpc_inference, grpc_management). Pipeline runs pick free "
        "ports on 127.0.0.1 for those not given."))
    model_api: bool = Field(default=False, description=(
        "TorchServe only: enable the model (register/unregister) API. Off by default; it "
        "listens on the loopback-only management address when on."))
    image: ImageSpec | None = Field(default=None, description=(
        "The serving image (runtime docker, or an image published with the release)."))

    @field_validator("ports")
    @classmethod
    def _port_range(cls, ports: dict[str, int]) -> dict[str, int]:
        bad = {name: port for name, port in ports.items() if not 1 <= port <= 65535}
        if bad:
            raise PydanticCustomError("port", "ports must be in 1..65535: {bad}", {"bad": bad})
        return ports


class BudgetSpec(StrictModel):
    network: DurationField = Duration(0, "0ms")
    preprocess: DurationField = Duration(0, "0ms")
    execution: DurationField = Field(default=Duration(0, "0ms"), description=(
        "Model execution time at the intended batch size."))
    postprocess: DurationField = Duration(0, "0ms")
    serialization: DurationField = Duration(0, "0ms")

    def items(self) -> list[tuple[str, Duration]]:
        return [(name, getattr(self, name)) for name in type(self).model_fields]

    def total(self) -> Duration:
        total = Duration(0)
        for _, value in self.items():
            total = total + value
        return total


class SloSpec(StrictModel):
    p99: DurationField = Field(description="Gate: client p99 latency at the latency stage.")
    p95: DurationField | None = Field(default=None, description="Optional gate: client p95.")
    p50: DurationField | None = Field(default=None, description="Optional gate: client p50.")
    error_rate: PercentageField = Field(default=Percentage(0.0, "0%"), description=(
        "Gate: failed or timed-out requests over all requests."))
    min_throughput: RateField | None = Field(default=None, description=(
        "Gate: completed requests per second at the latency stage."))
    budget: BudgetSpec = Field(default_factory=BudgetSpec, description=(
        "The latency budget; what is left of p99 is the queue budget."))
    queue_mean: DurationField | None = Field(default=None, description=(
        "Optional gate latency.server_queue_mean: the MEAN time a request waited in the "
        "server's queue over the measured windows (from the server's cumulative counters, "
        "which give a mean only; so this budget is stated as a mean)."))

    def queue_budget(self) -> Duration:
        return self.p99 - self.budget.total()


class ReadinessStage(StrictModel):
    timeout: DurationField = Field(default=Duration(120_000_000_000, "120s"), description=(
        "Deadline for the server and the model to report ready."))


class ParityStage(StrictModel):
    data: str | None = Field(default=None, description=(
        ".npz of representative inputs, one array per input name, first axis = samples."))
    atol: float = Field(default=1e-5, ge=0, description="Absolute tolerance per element.")
    rtol: float = Field(default=1e-4, ge=0, description="Relative tolerance per element.")
    samples: int = Field(default=16, ge=1, le=4096, description=(
        "Generated inputs when no data is given."))
    seed: int = Field(default=0, description="Seed of the generated inputs.")


ProbeName = Literal["wrong_shape", "wrong_dtype", "missing_input", "batch_over_max",
                    "unknown_model", "oversized_body", "declared_huge_shape"]
ALL_PROBES: tuple[ProbeName, ...] = ("wrong_shape", "wrong_dtype", "missing_input",
                                     "batch_over_max", "unknown_model", "oversized_body",
                                     "declared_huge_shape")
# Sizes of the two probes that test the server's limits; bounded so that a server that
# allocates whatever it is told still cannot endanger the machine.
OVERSIZED_BODY_BYTES = 64 * 2**20
DECLARED_HUGE_BYTES = 256 * 2**20


class FailureStage(StrictModel):
    enabled: bool = Field(default=True, description="Send the bad-input probes.")
    probes: list[ProbeName] = Field(default_factory=lambda: list(ALL_PROBES), description=(
        "Which probes: each must get a 4xx and leave the server ready."))


class StabilitySpec(StrictModel):
    windows: int = Field(default=3, ge=1, le=20, description=(
        "Fewest windows before a verdict; a clear verdict stops after this many."))
    tolerance: PercentageField = Field(default=Percentage(0.1, "10%"), description=(
        "Largest (max - min) / mean of throughput and of p99 across all windows for the "
        "record to say stabilised."))
    max_windows: int = Field(default=6, ge=1, le=50, description=(
        "The cap: the duration is split into this many windows; a latency gate still "
        "undecided after the last one is inconclusive."))


class VerdictSpec(StrictModel):
    confidence: PercentageField = Field(default=Percentage(0.95, "95%"), description=(
        "Coverage of each percentile gate's confidence bound, over all its looks."))
    accept_inconclusive: bool = Field(default=False, description=(
        "Let an inconclusive latency gate pass the stage (still reported as inconclusive). "
        "Off: inconclusive blocks promotion like a failure."))

    @field_validator("confidence")
    @classmethod
    def _sensible_confidence(cls, value: Percentage) -> Percentage:
        if not 0.5 <= value.fraction <= 0.9999:
            raise PydanticCustomError("confidence", "confidence must be in 50%..99.99%", {})
        return value


class LatencyStage(StrictModel):
    concurrency: int = Field(default=8, ge=1, le=4096, description=(
        "Requests in flight during the window (closed loop)."))
    warmup: DurationField = Field(default=Duration(5_000_000_000, "5s"), description=(
        "Traffic sent and discarded before the window."))
    duration: DurationField = Field(default=Duration(20_000_000_000, "20s"), description=(
        "Most measurement time after the warm-up; a clear verdict stops earlier."))
    batch_size: int = Field(default=1, ge=1, description="Items per request.")
    request_timeout: DurationField = Field(default=Duration(10_000_000_000, "10s"),
                                           description="Client timeout of every request.")
    max_memory_growth: SizeField | Literal[False] | None = Field(
        default=None, description=(
            "Gate: how much the server's process-tree RSS may grow from right after the "
            "warm-up to the end of the windows. Unset: 64MiB for Triton, 256MiB for "
            "TorchServe (its JVM grows its heap while it warms); false turns the gate off."))
    protocol: Literal["http", "grpc"] = Field(default="http", description=(
        "Triton: the load can go over gRPC too; TorchServe: http."))
    stability: StabilitySpec = Field(default_factory=StabilitySpec, description=(
        "Windows repeat until every latency gate is decided (or the cap)."))
    verdict: VerdictSpec = Field(default_factory=VerdictSpec, description=(
        "How percentile gates are decided: confidence, and whether inconclusive may pass."))


class BurstSpec(StrictModel):
    rate: RateField = Field(description="Arrival rate during the burst (open loop).")
    duration: DurationField = Field(description="How long the burst lasts.")
    base_rate: RateField | None = Field(default=None, description=(
        "Rate before and after the burst (default: a tenth of the burst rate)."))
    arrivals: Literal["constant", "poisson"] = Field(default="constant", description=(
        "Evenly spaced requests, or Poisson arrivals at the same mean rate."))
    settle: DurationField = Field(default=Duration(2_000_000_000, "2s"), description=(
        "How long the base rate runs before the burst (and at least as long after it)."))


class CapacitySpec(StrictModel):
    enabled: bool = Field(default=True, description=(
        "After the closed-loop ramp, search the highest open-loop arrival rate that meets "
        "slo.p99 and slo.error_rate without a growing backlog (capacity_rps)."))
    budget: DurationField = Field(default=Duration(10_000_000_000, "10s"), description=(
        "Measuring time the rate search may spend; it stops before a step that would not "
        "fit, and reports a lower bound when it found no failing rate by then."))
    step: DurationField = Field(default=Duration(1_000_000_000, "1s"), description=(
        "Length of each rate step (longer where the rate is too low for 100 samples)."))
    resolution: PercentageField = Field(default=Percentage(0.05, "5%"), description=(
        "Stop bisecting once the failing rate is within this much of the passing one."))


class SaturationStage(StrictModel):
    enabled: bool = Field(default=True, description="Run the saturation stage.")
    max_concurrency: int = Field(default=64, ge=1, le=4096, description=(
        "Highest concurrency the knee search may try."))
    probe_duration: DurationField = Field(default=Duration(3_000_000_000, "3s"), description=(
        "Length of each probe window."))
    burst: BurstSpec | None = Field(default=None, description=(
        "A low -> high -> low rate test; reports p99 during the burst and the drain time."))
    capacity: CapacitySpec = Field(default_factory=CapacitySpec, description=(
        "The sustainable arrival rate at the SLO, bisected in open loop."))


class RegressionStage(StrictModel):
    gate: bool = Field(default=False, description=(
        "Fail the publish (nothing is released or promoted) when a metric below is worse "
        "than in the release live in the target environment by more than the tolerance."))
    tolerance: PercentageField = Field(default=Percentage(0.1, "10%"), description=(
        "How much worse a metric may get before it counts as a regression."))
    metrics: list[str] = Field(default_factory=lambda: [
        "latency.p99_ms", "latency.p95_ms", "latency.throughput_rps", "latency.error_rate",
        "saturation.knee_throughput_rps"], description=(
        "stage.metric names that the gate watches (the report compares all of them); "
        "an unknown name is a spec error. Known: " + ", ".join(sorted(metric_names.WATCHABLE))
        + "."))


class StagesSpec(StrictModel):
    readiness: ReadinessStage = Field(default_factory=ReadinessStage,
                                      description="Waiting for the server to be ready.")
    parity: ParityStage = Field(default_factory=ParityStage,
                                description="Served outputs against the source model.")
    failure: FailureStage = Field(default_factory=FailureStage,
                                  description="Bad-input probes (part of the parity stage).")
    latency: LatencyStage = Field(default_factory=LatencyStage,
                                  description="Fixed-concurrency latency window.")
    saturation: SaturationStage = Field(default_factory=SaturationStage,
                                        description="Knee search and burst.")
    regression: RegressionStage = Field(default_factory=RegressionStage, description=(
        "Comparison with the release live in the target environment (in publish)."))


class PublishSpec(StrictModel):
    store: str = Field(default="file://.serve-pipeline/store", description=(
        "file://<dir> (relative to the spec) or s3://bucket/prefix."))
    endpoint_url: str | None = Field(default=None, description=(
        "S3-compatible endpoint (MinIO, Ceph); default from AWS_ENDPOINT_URL_S3."))

    @field_validator("store")
    @classmethod
    def _known_scheme(cls, store: str) -> str:
        if not re.match(r"^(file|s3)://.+", store):
            raise PydanticCustomError("store", "expected file://<dir> or s3://bucket/prefix, "
                                      "got {store!r}", {"store": store})
        return store


class Spec(StrictModel):
    version: Literal[1] = Field(description="Spec format version; must be 1.")
    name: str = Field(pattern=NAME_PATTERN, description=(
        "Release name: lowercase letters, digits and dashes."))
    model: ModelSpec = Field(description="The model file and its tensors.")
    server: ServerSpec = Field(description="The server and its production config.")
    slo: SloSpec = Field(description="Service-level objectives: the gates.")
    stages: StagesSpec = Field(default_factory=StagesSpec, description="Stage settings.")
    publish: PublishSpec = Field(default_factory=PublishSpec, description=(
        "Where releases are stored."))


class ApprovalPolicy(StrictModel):
    required: bool = Field(default=False, description=(
        "A recorded approval (`approve`, or `--approved-by` on the promotion) before the "
        "pointer moves."))
    distinct_from_creator: bool = Field(default=False, description=(
        "An approval by the release's creator (the manifest's created_by, or the user that "
        "created it) does not count, and naming the creator with --approved-by is refused."))


class EnvironmentPolicy(StrictModel):
    """Keys that only an environment overlay may hold."""

    requires: list[str] = Field(default_factory=list, description=(
        "Environments a release must have passed before it may come here."))
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
    reverify: bool = Field(default=False, description=(
        "Promotion here re-runs start..saturation on the release's own artifact under this "
        "environment's gates before the pointer moves (never a rebuild)."))


ENVIRONMENT_ONLY_KEYS = tuple(EnvironmentPolicy.model_fields)


@dataclass(frozen=True)
class LoadedSpec:
    spec: Spec
    policy: EnvironmentPolicy
    environment: str | None
    path: Path
    workspace: Path
    files: tuple[str, ...]

    def resolve(self, relative: str) -> Path:
        return (self.workspace / relative).resolve()

    def canonical_json(self) -> str:
        body = {"spec": self.spec.model_dump(mode="json"),
                "environment": self.environment,
                "policy": self.policy.model_dump(mode="json")}
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        return "sha256:" + sha256(self.canonical_json().encode()).hexdigest()


def environment_names(workspace: Path) -> list[str]:
    folder = workspace / "environments"
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def load_spec(path: Path, environment: str | None = None) -> LoadedSpec:
    """Load, overlay and validate; raise SpecError with every issue found."""
    spec_path = path.resolve() if path.exists() else path
    workspace = spec_path.parent
    base = load_document(spec_path, display=_display(path))
    if not isinstance(base.data, dict):
        raise SpecError([SpecIssue(base.file, 1, 1, "", "the spec must be a mapping of keys")])
    documents = [base]
    policy_data: dict[str, Any] = {}
    if environment is not None:
        overlay = _load_overlay(workspace, environment, path)
        documents.append(overlay)
        policy_data = {k: overlay.data.pop(k) for k in ENVIRONMENT_ONLY_KEYS if k in overlay.data}
    merged = merge_documents(documents)
    issues: list[SpecIssue] = []
    spec: Spec | None = None
    try:
        spec = Spec.model_validate(merged.data)
    except ValidationError as exc:
        issues += issues_from_validation(exc, merged, Spec, hint_keys=_env_only_hint)
    policy = EnvironmentPolicy()
    if environment is not None:
        overlay_doc = documents[-1]
        try:
            policy = EnvironmentPolicy.model_validate(policy_data)
        except ValidationError as exc:
            # The policy keys were taken out of the overlay's data: judge them where they were.
            policy_doc = dataclasses.replace(overlay_doc, data=policy_data)
            issues += issues_from_validation(exc, policy_doc, EnvironmentPolicy)
    if spec is not None:
        issues += semantic_issues(spec, merged, workspace)
    if issues:
        raise SpecError(issues)
    assert spec is not None
    return LoadedSpec(spec, policy, environment, spec_path, workspace,
                      tuple(d.file for d in documents))


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _env_only_hint(key: str) -> str | None:
    if key in ENVIRONMENT_ONLY_KEYS:
        return f"'{key}' belongs in an environment overlay (environments/<env>.yaml)"
    return None


def _load_overlay(workspace: Path, environment: str, spec_path: Path) -> PositionedDocument:
    overlay_path = workspace / "environments" / f"{environment}.yaml"
    if not re.match(NAME_PATTERN, environment) or not overlay_path.is_file():
        known = environment_names(workspace)
        from difflib import get_close_matches

        close = get_close_matches(environment, known, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        listed = ", ".join(known) if known else "none"
        raise SpecError([SpecIssue(
            _display(overlay_path), 1, 1, "",
            f"no environment '{environment}' next to {_display(spec_path)} "
            f"(known: {listed}){hint}")])
    document = load_document(overlay_path, display=_display(overlay_path))
    if document.data is None or document.data == {}:
        document.data = {}
    if not isinstance(document.data, dict):
        raise SpecError([SpecIssue(document.file, 1, 1, "",
                                   "an environment overlay must be a mapping of keys")])
    return document


def merge_documents(documents: list[PositionedDocument]) -> PositionedDocument:
    """Deep-merge mappings (later wins; a list replaces a list), keeping marks."""
    merged = PositionedDocument(documents[0].file, {}, {}, {})
    for document in documents:
        merged.data = _merge(merged.data, document.data)
        for path in _replaced_paths(document.data, ()):
            for marks in (merged.value_marks, merged.key_marks):
                for known in [p for p in marks if p[: len(path)] == path and len(p) > len(path)]:
                    del marks[known]
        merged.value_marks.update(document.value_marks)
        merged.key_marks.update(document.key_marks)
    return merged


def _merge(base: Any, overlay: Any) -> Any:
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = dict(base)
        for key, value in overlay.items():
            out[key] = _merge(base[key], value) if key in base else value
        return out
    return overlay


def _replaced_paths(data: Any, path: KeyPath) -> list[KeyPath]:
    """Paths whose value replaces (rather than merges into) what was there."""
    if isinstance(data, dict):
        out: list[KeyPath] = []
        for key, value in data.items():
            out += _replaced_paths(value, (*path, key))
        return out
    return [path]


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


def json_schema() -> dict[str, Any]:
    schema = Spec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "serve.yaml (version 1)"
    return schema
