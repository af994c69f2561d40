"""`server.triton.config`: config.pbtxt fields the spec does not model, read through Triton's
own ModelConfig protobuf, refused where they would change what the spec renders, and merged
into the rendered config."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2 as pb

from pipeline.servers.triton.settings import KIND_NAME, triton_settings
from pipeline.spec.models import Spec
from pipeline.spec.positions import KeyPath, PositionedDocument, format_path
from pipeline.spec.problems import Problem

CONFIG_PATH: KeyPath = ("server", KIND_NAME, "config")

SPEC_OWNED: Mapping[str, KeyPath] = {
    "name": ("name",),
    "platform": ("server", "backend"),
    "backend": ("server", "backend"),
    "max_batch_size": ("server", "batching", "max_batch_size"),
    "input": ("model", "inputs"),
    "output": ("model", "outputs"),
    "dynamic_batching.max_queue_delay_microseconds": ("server", "batching", "max_queue_delay"),
    "dynamic_batching.preferred_batch_size": ("server", "batching", "preferred_batch_sizes"),
    "instance_group.count": ("server", "instances"),
    "instance_group.kind": ("server", "device"),
    "default_model_filename": ("model", "source"),
}
"""The config.pbtxt fields (dotted) the spec renders, and the spec key each comes from."""

ONE_GROUP = "instance_group"
"""The spec renders one instance group; the pass-through's one entry (its rate_limiter,
host_policy, ...) is merged into it."""


def passthrough_config(spec: Spec) -> Any:
    """`server.triton.config` as a ModelConfig message (empty without one). The spec was
    validated, so it parses."""
    return json_format.ParseDict(triton_settings(spec).config, pb.ModelConfig())


def merged_config(rendered: Any, spec: Spec) -> Any:
    """`rendered` with the pass-through fields merged in (none of them is one it sets)."""
    passthrough = passthrough_config(spec)
    groups = list(passthrough.instance_group)
    passthrough.ClearField(ONE_GROUP)
    rendered.MergeFrom(passthrough)
    for group in groups:
        rendered.instance_group[0].MergeFrom(group)
    return rendered


def response_cache_enabled(spec: Spec) -> bool:
    return bool(passthrough_config(spec).response_cache.enable)


def server_flags(spec: Spec, cache_directory: Path | None = None) -> list[str]:
    """What tritonserver needs on its command line for the pass-through fields: the
    response cache a model enables exists only when the server is started with one, from
    `cache_directory` (None: the server's default, as in NVIDIA's images)."""
    if not response_cache_enabled(spec):
        return []
    flags = [f"--cache-config=local,size={triton_settings(spec).cache_size.bytes}"]
    if cache_directory is not None:
        flags.append(f"--cache-directory={cache_directory}")
    return flags


def config_problems(spec: Spec, document: PositionedDocument, rendered: Any) -> list[Problem]:
    """Unknown fields and enum values where they are written; then what Triton's parser
    refuses; then fields that `rendered` (the spec's own config) already sets."""
    config = triton_settings(spec).config
    problems = list(_unknown(config, pb.ModelConfig.DESCRIPTOR, CONFIG_PATH))
    if problems:
        return problems
    try:
        parsed = json_format.ParseDict(config, pb.ModelConfig())
    except json_format.ParseError as error:
        return [(CONFIG_PATH, f"not a Triton ModelConfig: {error}")]
    return [*_conflicts(config, pb.ModelConfig.DESCRIPTOR, rendered, (), CONFIG_PATH, document),
            *_warmup_inputs(spec, config, parsed)]


def _warmup_inputs(spec: Spec, config: dict[str, Any], parsed: Any) -> Iterator[Problem]:
    """A warm-up sample names the model's inputs (Triton refuses to load it otherwise)."""
    written = "modelWarmup" if "modelWarmup" in config else "model_warmup"
    names = [tensor.name for tensor in spec.model.inputs]
    for index, sample in enumerate(parsed.model_warmup):
        for name in sorted(set(sample.inputs) - set(names)):
            yield ((*CONFIG_PATH, written, index, "inputs", name),
                   f"the model has no input '{name}' (model.inputs: {', '.join(names)})")


def _fields(descriptor: Descriptor) -> dict[str, FieldDescriptor]:
    """A message's fields by the names ParseDict takes: proto names and JSON names."""
    return {**{f.json_name: f for f in descriptor.fields},
            **{f.name: f for f in descriptor.fields}}


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _unknown(value: Any, descriptor: Descriptor, path: KeyPath) -> Iterator[Problem]:
    if not isinstance(value, dict):
        return
    fields = _fields(descriptor)
    for key, item in value.items():
        field = fields.get(key)
        if field is None:
            names = [f.name for f in descriptor.fields]
            close = get_close_matches(key, names, n=1, cutoff=0.6)
            hint = (f"; did you mean '{close[0]}'?" if close
                    else f" (its fields: {', '.join(names)})")
            shown = descriptor.full_name.removeprefix(descriptor.file.package + ".")
            yield ((*path, key), f"{shown} has no field '{key}'{hint}")
        else:
            yield from _unknown_inside(field, item, (*path, key))


def _unknown_inside(field: FieldDescriptor, item: Any, path: KeyPath) -> Iterator[Problem]:
    if field.message_type is not None and _is_map(field):
        value_field = field.message_type.fields_by_name["value"]
        for key, value in (item.items() if isinstance(item, dict) else ()):
            yield from _unknown_inside(value_field, value, (*path, key))
    elif field.is_repeated and isinstance(item, list):
        for index, element in enumerate(item):
            yield from _unknown_element(field, element, (*path, index))
    else:
        yield from _unknown_element(field, item, path)


def _unknown_element(field: FieldDescriptor, item: Any, path: KeyPath) -> Iterator[Problem]:
    if field.message_type is not None:
        yield from _unknown(item, field.message_type, path)
    elif field.enum_type is not None and isinstance(item, str) \
            and item not in field.enum_type.values_by_name:
        names = list(field.enum_type.values_by_name)
        close = get_close_matches(item, names, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else f" (one of {', '.join(names)})"
        yield (path, f"'{item}' is not a {field.enum_type.name}{hint}")


def _conflicts(value: dict[str, Any], descriptor: Descriptor, rendered: Any,
               dotted: tuple[str, ...], path: KeyPath,
               document: PositionedDocument) -> Iterator[Problem]:
    """Fields of `value` (written at `path`) that `rendered` gets from the spec."""
    fields = _fields(descriptor)
    for key, item in value.items():
        field = fields[key]
        name = ".".join((*dotted, field.name))
        at = (*path, key)
        owner = SPEC_OWNED.get(name)
        if owner is not None:
            yield (at, f"{name} is set by {format_path(owner)} ({document.written_at(owner)}); "
                   "set it there")
        elif field.containing_oneof is not None and _other_in_oneof(field, rendered):
            chosen = rendered.WhichOneof(field.containing_oneof.name)
            choices = ", ".join(f.name for f in field.containing_oneof.fields)
            yield (at, f"{name} would replace {chosen}, which server.batching renders "
                   f"({document.written_at(('server', 'batching'))}); Triton takes one of "
                   f"{choices}")
        elif name == ONE_GROUP and field.message_type is not None and isinstance(item, list):
            if len(item) != 1:
                yield (at, f"{ONE_GROUP} takes one entry here, merged into the one group "
                       "server.instances and server.device render")
            elif isinstance(item[0], dict):
                yield from _conflicts(item[0], field.message_type, rendered.instance_group[0],
                                      (*dotted, field.name), (*at, 0), document)
        elif _is_map(field) and isinstance(item, dict):
            for entry in sorted(set(item) & set(getattr(rendered, field.name))):
                yield ((*at, entry), f"{name}['{entry}'] is set by serve-pipeline for the "
                       f"{rendered.backend} backend (from model.format, model.source, "
                       "model.entrypoint and model.trusted); leave it out")
        elif field.message_type is not None and not field.is_repeated \
                and isinstance(item, dict):
            yield from _conflicts(item, field.message_type, getattr(rendered, field.name),
                                  (*dotted, field.name), at, document)


def _other_in_oneof(field: FieldDescriptor, rendered: Any) -> bool:
    oneof = field.containing_oneof
    chosen = rendered.WhichOneof(oneof.name) if oneof is not None else None
    return chosen is not None and chosen != field.name
