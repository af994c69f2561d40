"""Triton's config.pbtxt (through its ModelConfig protobuf) and the model repository."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as pb

from pipeline.model.tensors import config_dtype
from pipeline.servers.base import ASSETS, RUNTIME_MODULE
from pipeline.servers.triton.passthrough import ONE_GROUP, merged_config, passthrough_config
from pipeline.servers.triton.wire_shapes import wire_dims
from pipeline.spec.models import Spec

MODEL_VERSION = "1"


def render_model_config(spec: Spec, model_file: str, entrypoint_file: str | None) -> Any:
    """The model's config as Triton's own ModelConfig protobuf: what the spec sets, with
    `server.triton.config` merged in."""
    return merged_config(spec_model_config(spec, model_file, entrypoint_file), spec)


def spec_model_config(spec: Spec, model_file: str, entrypoint_file: str | None) -> Any:
    """What the spec's own keys render, before the pass-through fields."""
    batching = spec.server.batching
    config = pb.ModelConfig(name=spec.name, backend=spec.server.backend,
                            max_batch_size=batching.max_batch_size)
    for tensors, declared in ((spec.model.inputs, config.input),
                              (spec.model.outputs, config.output)):
        for tensor in tensors:
            rendered = declared.add(name=tensor.name, dims=wire_dims(tensor),
                                    data_type=pb.DataType.Value(config_dtype(tensor.dtype)))
            if not tensor.shape:
                rendered.reshape.SetInParent()   # reshape { shape: [] }: the model sees [n]
    if batching.max_batch_size > 1:
        delay_us = batching.max_queue_delay.exact_in("us")
        if delay_us is None:
            raise ValueError(f"max_queue_delay {batching.max_queue_delay} is not a whole number "
                             "of microseconds")
        config.dynamic_batching.max_queue_delay_microseconds = delay_us
        config.dynamic_batching.preferred_batch_size.extend(batching.preferred_batch_sizes)
    kind = (pb.ModelInstanceGroup.KIND_GPU if spec.server.device == "gpu"
            else pb.ModelInstanceGroup.KIND_CPU)
    config.instance_group.add(count=spec.server.instances, kind=kind)
    if spec.server.backend == "python":
        parameters = {"format": spec.model.format, "model_file": model_file,
                      "entrypoint": entrypoint_file or "", "threads": "1",
                      "trusted": "true" if spec.model.trusted else "false"}
        for key, value in parameters.items():
            config.parameters[key].string_value = value
    else:
        config.default_model_filename = model_file
    return config


def config_text(config: Any) -> str:
    return str(text_format.MessageToString(config))


def check_model_config(text: str, spec: Spec) -> list[str]:
    """Parse the rendered config.pbtxt with Triton's schema and compare it with the spec."""
    try:
        config = text_format.Parse(text, pb.ModelConfig())
    except text_format.ParseError as exc:
        return [f"config.pbtxt does not parse as a Triton ModelConfig: {exc}"]
    problems = []
    if config.name != spec.name:
        problems.append(f"name {config.name!r} is not {spec.name!r}")
    for kind, declared, tensors in (("input", config.input, spec.model.inputs),
                                    ("output", config.output, spec.model.outputs)):
        rendered = [(t.name, pb.DataType.Name(t.data_type), list(t.dims)) for t in declared]
        wanted = [(t.name, config_dtype(t.dtype), wire_dims(t)) for t in tensors]
        if rendered != wanted:
            problems.append(f"{kind}s {rendered} differ from the spec {wanted}")
        problems += [f"{kind} {t.name}: a scalar per item needs reshape {{ shape: [] }}"
                     for t, tensor in zip(declared, tensors, strict=False)
                     if not tensor.shape and (not t.HasField("reshape") or t.reshape.shape)]
    batching = spec.server.batching
    if config.max_batch_size != batching.max_batch_size:
        problems.append(f"max_batch_size {config.max_batch_size} is not "
                        f"{batching.max_batch_size}")
    if batching.max_batch_size > 1:
        if not config.HasField("dynamic_batching"):
            problems.append("dynamic_batching is missing")
        elif config.dynamic_batching.max_queue_delay_microseconds * 1000 != \
                batching.max_queue_delay.ns:
            problems.append("max_queue_delay_microseconds "
                            f"{config.dynamic_batching.max_queue_delay_microseconds} is not "
                            f"{batching.max_queue_delay}")
        bad = [s for s in config.dynamic_batching.preferred_batch_size
               if s > config.max_batch_size]
        if bad:
            problems.append(f"preferred_batch_size {bad} over max_batch_size")
    if sum(group.count for group in config.instance_group) != spec.server.instances:
        problems.append("instance_group count differs from server.instances")
    return problems + passthrough_differences(config, spec)


def passthrough_differences(config: Any, spec: Spec) -> list[str]:
    """Where `config` (a release's, say) holds other pass-through fields than
    `server.triton.config`: one it lacks or holds otherwise, one it has beyond them."""
    wanted = passthrough_config(spec)
    problems = [f"{name} is not as server.triton.config sets it"
                for name in _differing(wanted, config, "")]
    own = {field.name for field, _ in spec_model_config(spec, "", None).ListFields()}
    allowed = own | {"default_model_filename"} | {field.name for field, _ in wanted.ListFields()}
    extra = [field.name for field, _ in config.ListFields() if field.name not in allowed]
    problems += [f"{name} is set, and server.triton.config does not set it" for name in extra]
    return problems


def _differing(wanted: Any, actual: Any, prefix: str) -> list[str]:
    """The dotted fields set in `wanted` that `actual` holds otherwise (a message the spec
    also renders, such as dynamic_batching, compared field by field)."""
    found = []
    for field, value in wanted.ListFields():
        name = prefix + field.name
        held = getattr(actual, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            found += [f"{name}['{key}']" for key in value
                      if key not in held or held[key] != value[key]]
        elif field.message_type is not None and not field.is_repeated:
            found += _differing(value, held, name + ".")
        elif field.name == ONE_GROUP:
            found += _differing(value[0], held[0], name + "[0].") if len(held) == 1 else [name]
        elif held != value:
            found.append(name)
    return found


@dataclass(frozen=True)
class ModelRepository:
    root: Path
    model_dir: Path
    config_path: Path


# The file each backend loads from the version folder.
NATIVE_MODEL_FILES = {"onnxruntime": "model.onnx", "pytorch": "model.pt", "tensorrt": "model.plan"}


def write_model_repository(spec: Spec, model_file: Path, entrypoint: Path | None,
                           destination: Path) -> ModelRepository:
    """<destination>/<name>/config.pbtxt and <name>/1/<model>; for the python backend also
    model.py and model_runtime.py (Triton's native backends load the file themselves).

    For backend tensorrt, `model_file` is the engine (.plan) built on the GPU runner."""
    model_dir = destination / spec.name
    version_dir = model_dir / MODEL_VERSION
    version_dir.mkdir(parents=True)
    entrypoint_file = None
    if spec.server.backend != "python":
        stored_model = NATIVE_MODEL_FILES[spec.server.backend]
        shutil.copyfile(model_file, version_dir / stored_model)
    else:
        stored_model = {"torchscript": "model.pt", "eager": "weights.pt",
                        "onnx": "model.onnx"}[spec.model.format]
        shutil.copyfile(model_file, version_dir / stored_model)
        if entrypoint is not None:
            attribute = (spec.model.entrypoint or "").rpartition(":")[2]
            shutil.copyfile(entrypoint, version_dir / "entrypoint.py")
            entrypoint_file = f"entrypoint.py:{attribute}"
        shutil.copyfile(ASSETS / "triton_model.py", version_dir / "model.py")
        shutil.copyfile(RUNTIME_MODULE, version_dir / "model_runtime.py")
    text = config_text(render_model_config(spec, stored_model, entrypoint_file))
    config_path = model_dir / "config.pbtxt"
    config_path.write_text(text)
    return ModelRepository(destination, model_dir, config_path)
