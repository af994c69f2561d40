"""`tune --write`: put the recommended server block into serve.yaml, round-trip.

ruamel.yaml's round-trip mode keeps the user's comments, key order, quoting and flow
style; only the values of server.device, server.instances and server.batching's three
keys change (a key absent before is added at the end of its block). The new file is
written beside the old one, validated as a spec, then renamed over it: a bad write never
replaces a good spec.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.util import load_yaml_guess_indent

from pipeline.errors import UsageError
from pipeline.spec.loading import load_spec


def write_recommendation(spec_path: Path, block: dict[str, Any]) -> None:
    text = spec_path.read_text(encoding="utf-8")
    _, sequence_indent, block_offset = load_yaml_guess_indent(text)
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap the user's long lines
    mapping = block_offset or 2
    yaml.indent(mapping=mapping, sequence=sequence_indent or mapping, offset=block_offset or 0)
    document = yaml.load(text)
    server = document.get("server") if isinstance(document, CommentedMap) else None
    if not isinstance(server, CommentedMap):
        raise UsageError(f"{spec_path}: no server mapping to write into")
    wanted = block["server"]
    _set(server, "instances", wanted["instances"])
    if "device" in server or wanted["device"] != "cpu":
        _set(server, "device", wanted["device"])
    batching = server.get("batching")
    if not isinstance(batching, CommentedMap):
        batching = CommentedMap()
        server["batching"] = batching
    for key in ("max_batch_size", "max_queue_delay"):
        _set(batching, key, wanted["batching"][key])
    preferred = wanted["batching"]["preferred_batch_sizes"]
    if preferred or "preferred_batch_sizes" in batching:
        _set(batching, "preferred_batch_sizes", _like(batching.get("preferred_batch_sizes"),
                                                      preferred))
    buffer = io.StringIO()
    yaml.dump(document, buffer)
    temp = spec_path.with_name(f".{spec_path.name}.tune.tmp")
    temp.write_text(buffer.getvalue(), encoding="utf-8")
    try:
        load_spec(temp)
        os.replace(temp, spec_path)
    finally:
        temp.unlink(missing_ok=True)


def _set(mapping: CommentedMap, key: str, value: Any) -> None:
    if mapping.get(key) != value:
        mapping[key] = value


def _like(old: Any, values: list[int]) -> CommentedSeq:
    """A new list in the old one's style (flow `[8, 16]` stays flow)."""
    seq = CommentedSeq(values)
    if old is None or (isinstance(old, CommentedSeq) and old.fa.flow_style()):
        seq.fa.set_flow_style()
    return seq
