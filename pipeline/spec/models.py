"""The serve.yaml spec (version 1) as pydantic models, and its JSON schema."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from difflib import get_close_matches
from hashlib import sha256
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pipeline.spec.sizes import SIZES_DESCRIPTION, VARIABLE, SizesSpec
from pipeline.spec.stage_settings import (
    ALL_PROBES,
    DECLARED_HUGE_BYTES,
    OVERSIZED_BODY_BYTES,
    BurstSpec,
    CapacitySpec,
    FailureStage,
    LatencyStage,
    ParityStage,
    ProbeName,
    ReadinessStage,
    RegressionStage,
    SaturationStage,
    StabilitySpec,
    StagesSpec,
    VerdictSpec,
)
from pipeline.spec.strict import StrictModel
from pipeline.spec.tune import TUNE_DESCRIPTION, TuneSpec
from pipeline.spec.units import Duration, DurationField, Percentage, PercentageField, RateField

# Re-exported: these live in stage_settings.py and strict.py, and
# `from pipeline.spec.models import X` keeps working for them.
__all__ = [
    "ALL_PROBES",
    "DECLARED_HUGE_BYTES",
    "OVERSIZED_BODY_BYTES",
    "BurstSpec",
    "CapacitySpec",
    "FailureStage",
    "LatencyStage",
    "ParityStage",
    "ProbeName",
    "ReadinessStage",
    "RegressionStage",
    "SaturationStage",
    "StabilitySpec",
    "StagesSpec",
    "StrictModel",
    "VerdictSpec",
]

Dtype = Literal["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                "float64", "string"]
UNSUPPORTED_DTYPES = {
    "bfloat16": "bfloat16 is not supported: numpy has no bfloat16, so neither the parity "
                "reference nor the request encoders can hold one; declare float16 or float32",
    "bytes": "write dtype: string for text (Triton TYPE_STRING, BYTES on the wire)",
}
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
KINDS_CONTEXT = "server kinds"
"""The validation context's key for the known kind names (`validate_spec`)."""
SECTIONS_CONTEXT = "kind sections"
"""The validation context's key for the models of the kinds' own `server.<kind>` blocks."""


class DeclaresSection(Protocol):
    """A kind as the spec sees it (`pipeline/spec/kind_specs.py`): the model of its own
    `server.<kind>:` block, if it has one."""

    @property
    def section(self) -> type[StrictModel] | None: ...


class TensorSpec(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$",
                      description="Tensor name as the server exposes it.")
    dtype: Dtype = Field(description=(
        "Element type. `string` is text, one string per item (shape [1]): Triton "
        "TYPE_STRING (BYTES on the wire), JSON strings on TorchServe; a TorchScript or "
        "eager model takes it as a List[str] and may return one. bfloat16 is not "
        "supported."))
    shape: list[int] = Field(description=(
        "Per-item shape; the batch dimension is implicit and comes first. -1 is a variable "
        "dimension, whose size each request sets (Triton dims -1; an input's sizes are "
        "model.sizes). [] is one scalar per item (a model that takes or returns [n]): "
        "Triton declares it dims [1] with reshape [], so its clients send and receive "
        "[n, 1] while the model sees [n]; TorchServe's JSON carries [n]."))

    @field_validator("dtype", mode="before")
    @classmethod
    def _known_dtype(cls, dtype: object) -> object:
        if isinstance(dtype, str) and dtype in UNSUPPORTED_DTYPES:
            raise PydanticCustomError("dtype", UNSUPPORTED_DTYPES[dtype])
        return dtype

    @model_validator(mode="after")
    def _one_string_per_item(self) -> TensorSpec:
        if self.dtype == "string" and self.shape != [1]:
            raise PydanticCustomError(
                "shape", "a string tensor holds one string per item: shape [1], got {shape}",
                {"shape": self.shape})
        return self

    @field_validator("shape")
    @classmethod
    def _positive_dims(cls, shape: list[int]) -> list[int]:
        if any(dim < 1 and dim != VARIABLE for dim in shape):
            raise PydanticCustomError(
                "shape", "every dimension must be a positive integer or -1 (variable), got "
                "{shape}", {"shape": shape})
        return shape

    @property
    def variable(self) -> bool:
        """Whether a dimension is -1."""
        return VARIABLE in self.shape

    def item_shape(self, size: int | None) -> tuple[int, ...]:
        """The per-item shape with every -1 set to `size` (a fixed shape needs none)."""
        if size is None and self.variable:
            raise ValueError(f"{self.name} has a variable dimension: it needs a size")
        return tuple(size if dim == VARIABLE and size is not None else dim
                     for dim in self.shape)


class OutputSpec(TensorSpec):
    allow_nonfinite: bool = Field(default=False, description=(
        "Float outputs only: NaN and Inf are values this output may take. Off by default: "
        "parity fails `parity.finite_outputs` on any NaN or Inf, served or in the "
        "reference; on, NaN where the reference has NaN counts as a match."))

    @model_validator(mode="after")
    def _nonfinite_needs_floats(self) -> OutputSpec:
        if self.allow_nonfinite and not self.dtype.startswith("float"):
            raise PydanticCustomError(
                "allow_nonfinite", "allow_nonfinite is for float outputs; {dtype} has no NaN "
                "or Inf", {"dtype": self.dtype})
        return self


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
    outputs: list[OutputSpec] = Field(min_length=1, description=(
        "The model's outputs, in return order. Parity holds the served outputs and the "
        "reference's to these names, dtypes and per-item shapes."))
    trusted: bool = Field(default=False, description=(
        "eager only: allow full pickle loading of the weights (torch.load weights_only=False)."))
    sizes: SizesSpec | None = Field(default=None, description=SIZES_DESCRIPTION)

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
        variable = [t.name for t in self.inputs if t.variable]
        if variable and self.sizes is None:
            raise PydanticCustomError(
                "sizes", "input(s) {names} have a variable dimension (-1): model.sizes "
                "declares the sizes requests give it (e.g. {{values: [8, 32, 128]}})",
                {"names": ", ".join(variable)})
        if self.sizes is not None and not variable:
            raise PydanticCustomError("sizes", "model.sizes sizes the -1 dimensions of the "
                                      "inputs, and no input has one")
        return self

    @property
    def variable(self) -> bool:
        """Whether an input has a variable dimension (-1)."""
        return any(t.variable for t in self.inputs)

    def size_values(self) -> list[int | None]:
        """The sizes parity sends: [None] for fixed shapes."""
        return [None] if self.sizes is None else list(self.sizes.parity_sizes())


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


@dataclass(frozen=True)
class _UnknownKey:
    """A `server` key that is neither a field nor a kind's block, refused where it stands."""

    key: str
    known: tuple[str, ...]


@dataclass(frozen=True)
class _Section:
    """A kind's block, with the model that kind declares for it."""

    model: type[StrictModel]
    value: Any


def _kind_section(value: Any, info: ValidationInfo) -> Any:
    """Validated where it stands, so its errors carry its key path beside the others."""
    if isinstance(value, _Section):
        return value.model.model_validate(value.value, context=info.context)
    if isinstance(value, _UnknownKey):
        close = get_close_matches(value.key, value.known, n=1, cutoff=0.6)
        hint = (f"; did you mean '{close[0]}'?" if close
                else f" (valid keys: {', '.join(value.known)})")
        raise PydanticCustomError("unknown_key", "unknown key '{key}'{hint}",
                                  {"key": value.key, "hint": hint})
    return value


class ServerSpec(StrictModel):
    """The server block. Beside its fields it holds one block per kind, `server.<kind>:`
    (e.g. `server.triton.config`), validated by the model that kind declares; each kind
    reads only its own (`section`)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, Annotated[SerializeAsAny[StrictModel],
                                            BeforeValidator(_kind_section)]] = Field(init=False)

    kind: str = Field(description="Which model server runs it.")
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

    @field_validator("kind", mode="before")
    @classmethod
    def _known_kind(cls, kind: Any, info: ValidationInfo) -> Any:
        """One of the kinds the caller knows, refused as pydantic refuses a Literal."""
        known = _known_kinds(info)
        if kind not in known:
            raise PydanticCustomError("literal_error", "Input should be {expected}",
                                      {"expected": _one_of(known)})
        return kind

    @model_validator(mode="wrap")
    @classmethod
    def _kind_sections(cls, data: Any, handler: ValidatorFunctionWrapHandler,
                       info: ValidationInfo) -> Any:
        """Each kind's block validated by its own model; any other unknown key refused."""
        if not isinstance(data, dict):
            return handler(data)
        sections = _kind_sections(info)
        known = (*cls.model_fields, *sections)
        marked = {}
        for key, value in data.items():
            if key in cls.model_fields:
                marked[key] = value
            elif key in sections:
                marked[key] = _Section(sections[key], value)
            else:
                marked[key] = _UnknownKey(str(key), known)
        return handler(marked)

    def section(self, kind: str) -> StrictModel | None:
        """The block `server.<kind>:` as the kind's model validated it, if the spec has one."""
        return (self.model_extra or {}).get(kind)

    @field_validator("ports")
    @classmethod
    def _port_range(cls, ports: dict[str, int]) -> dict[str, int]:
        bad = {name: port for name, port in ports.items() if not 1 <= port <= 65535}
        if bad:
            raise PydanticCustomError("port", "ports must be in 1..65535: {bad}", {"bad": bad})
        shared = sorted({port for port in ports.values()
                         if list(ports.values()).count(port) > 1})
        if shared:
            names = [f"{name} {port}" for name, port in ports.items() if port in shared]
            raise PydanticCustomError("port", "each port needs a number of its own: {names}",
                                      {"names": ", ".join(names)})
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


STALL_FLOOR_S = 2.0
STALL_P99_MULTIPLE = 20.0


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

    def max_stall_s(self) -> float:
        """The longest span without an answer the latency stage lets pass (gate
        latency.longest_stall, pipeline/gates/stall.py): 20 x p99, at least 2 s."""
        return max(STALL_FLOOR_S, STALL_P99_MULTIPLE * self.p99.seconds)


class PublishSpec(StrictModel):
    store: str = Field(default="file://.serve-pipeline/store", description=(
        "file://<dir> (relative to the spec) or s3://bucket/prefix."))
    endpoint_url: str | None = Field(default=None, description=(
        "S3-compatible endpoint (MinIO, Ceph); default from AWS_ENDPOINT_URL_S3."))
    serving_layout: bool = Field(default=False, description=(
        "Also write the release in its server's layout (what `materialize` writes: a Triton "
        "model repository, or TorchServe's model-store/ and config/) under "
        "<store>/serving/<name>/<release id>/ when it is published, where `export kserve` "
        "points storageUri by default. Every file's digest is in the manifest and the "
        "attestation; it is never overwritten. A release published without it is laid "
        "out there later with `materialize RELEASE --to <store>/serving/<name>/<id>`."))

    @field_validator("store")
    @classmethod
    def _known_scheme(cls, store: str) -> str:
        if not re.match(r"^(file|s3)://.+", store):
            raise PydanticCustomError("store", "expected file://<dir> or s3://bucket/prefix, "
                                      "got {store}", {"store": repr(store)})
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
    tune: TuneSpec | None = Field(default=None, exclude=True, description=TUNE_DESCRIPTION)


class TrustedKeySpec(StrictModel):
    id: str = Field(min_length=1, description="The name this key goes by in the records.")
    public_key: str = Field(min_length=1, description=(
        "A PEM public key (Ed25519 or ECDSA P-256), or the path of one relative to the spec."))
    owner: str | None = Field(default=None, description=(
        "The verified identity the key belongs to (`github:<login>`), so that "
        "distinct_from_creator knows the creator's own key."))


class AttestationPolicy(StrictModel):
    required: bool = Field(default=False, description=(
        "Only releases whose attestation is signed by one of `keys` may come here; an "
        "unsigned release is refused."))
    keys: list[TrustedKeySpec] = Field(default_factory=list, description=(
        "Public keys trusted to sign release attestations."))


# Whose tokens identify a GitHub Actions job (pipeline.release.oidc).
GITHUB_OIDC_ISSUER = "https://token.actions.githubusercontent.com"


class ApprovalPolicy(StrictModel):
    required: bool = Field(default=False, description=(
        "A signed approval (`serve-pipeline approve RELEASE --env ENV --key KEY`) over the "
        "release's manifest digest and this environment before the pointer moves."))
    keys: list[TrustedKeySpec] = Field(default_factory=list, description=(
        "Public keys of the approvers; an approval signed by any other key does not count."))
    approvers: list[str] = Field(default_factory=list, description=(
        "The key ids whose approvals count (default: every key in `keys`)."))
    distinct_from_creator: bool = Field(default=False, description=(
        "An approval by the release's creator does not count: the same key as the one that "
        "signed the attestation, a key whose owner is the creator's verified identity, or "
        "the same verified GitHub identity. Typed names are never compared."))
    verified_identity: bool = Field(default=False, description=(
        "An approval counts only when its approver's identity was verified when it was "
        "signed (the GitHub Actions OIDC token); GITHUB_* variables alone are a claim."))
    oidc_issuers: list[str] = Field(default_factory=lambda: [GITHUB_OIDC_ISSUER], description=(
        "The OIDC issuers whose verified identities count here (for verified_identity and "
        "distinct_from_creator); an identity another issuer verified (one named by "
        "SERVE_PIPELINE_OIDC_ISSUER when the approval was signed) is a claim. Default: "
        "GitHub Actions'; add a GitHub Enterprise Server's issuer here."))

    @model_validator(mode="after")
    def _approvers_have_keys(self) -> ApprovalPolicy:
        known = {key.id for key in self.keys}
        unknown = [name for name in self.approvers if name not in known]
        if unknown:
            raise PydanticCustomError("approvers", "approvers {unknown} have no entry in "
                                      "approval.keys", {"unknown": ", ".join(unknown)})
        return self


class EnvironmentPolicy(StrictModel):
    """Keys that only an environment overlay may hold."""

    requires: list[str] = Field(default_factory=list, description=(
        "Environments a release must have passed before it may come here."))
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
    attestation: AttestationPolicy = Field(default_factory=AttestationPolicy)
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


def _known_kinds(info: ValidationInfo) -> tuple[str, ...]:
    context = info.context
    if not isinstance(context, dict) or KINDS_CONTEXT not in context:
        raise TypeError("a spec is validated with the known server kinds: validate_spec()")
    return tuple(context[KINDS_CONTEXT])


def _kind_sections(info: ValidationInfo) -> Mapping[str, type[StrictModel]]:
    context = info.context
    if not isinstance(context, dict):
        return {}
    sections: Mapping[str, type[StrictModel]] = context.get(SECTIONS_CONTEXT, {})
    return sections


def _sections_of(kinds: Collection[str] | Mapping[str, DeclaresSection]
                 ) -> dict[str, type[StrictModel]]:
    if not isinstance(kinds, Mapping):
        return {}
    return {name: kind.section for name, kind in kinds.items() if kind.section is not None}


def _one_of(names: tuple[str, ...]) -> str:
    """The names as pydantic lists a Literal's values: 'a', 'b' or 'c'."""
    quoted = [repr(name) for name in names]
    return " or ".join(filter(None, (", ".join(quoted[:-1]), *quoted[-1:])))


def validate_spec(data: Any, kinds: Collection[str] | Mapping[str, DeclaresSection]) -> Spec:
    """The spec in `data`, whose `server.kind` must be one of `kinds` (names, or the kinds
    by name, whose own `server.<kind>` blocks are then read too); ValidationError."""
    return Spec.model_validate(data, context={KINDS_CONTEXT: tuple(kinds),
                                              SECTIONS_CONTEXT: _sections_of(kinds)})


def json_schema(kinds: Collection[str] | Mapping[str, DeclaresSection]) -> dict[str, Any]:
    """The JSON schema of the spec, with `server.kind` an enum of `kinds` and each kind's
    own block `server.<kind>` (no other key)."""
    schema = Spec.model_json_schema()
    server = schema["$defs"]["ServerSpec"]
    server["properties"]["kind"] = dict(sorted(
        {**server["properties"]["kind"], "enum": list(kinds)}.items()))
    server["additionalProperties"] = False
    for name, section in _sections_of(kinds).items():
        section_schema = section.model_json_schema(ref_template="#/$defs/{model}")
        schema["$defs"].update(section_schema.pop("$defs", {}))
        server["properties"][name] = section_schema
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "serve.yaml (version 1)"
    return schema
