"""`tune --write`: put the recommended server block into serve.yaml, round-trip.

ruamel.yaml's round-trip mode keeps the user's comments, key order, quoting and flow
style; only the values of server.device, server.instances and server.batching's three
keys change (a key absent before is added at the end of its block). The new file is
written beside the old one, validated as a spec, then renamed over it: a bad write never
replaces a good spec.

A changed value's end-of-line comment is kept as the user wrote it, but it may describe
the old value ("Triton gets 2000 microseconds"): each such comment is returned, for the
CLI to ask the user to check it, rather than rewritten by guess.
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
from pipeline.servers.specs import load_spec


def write_recommendation(spec_path: Path, block: dict[str, Any]) -> list[str]:
    """Write `block` into the spec; the comments on changed lines, to be checked."""
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
    kept: list[str] = []
    _set(server, "instances", wanted["instances"], "server", kept)
    if "device" in server or wanted["device"] != "cpu":
        _set(server, "device", wanted["device"], "server", kept)
    batching = server.get("batching")
    if not isinstance(batching, CommentedMap):
        batching = CommentedMap()
        server["batching"] = batching
    for key in ("max_batch_size", "max_queue_delay"):
        _set(batching, key, wanted["batching"][key], "server.batching", kept)
    preferred = wanted["batching"]["preferred_batch_sizes"]
    if preferred or "preferred_batch_sizes" in batching:
        _set(batching, "preferred_batch_sizes", _like(batching.get("preferred_batch_sizes"),
                                                      preferred), "server.batching", kept)
    buffer = io.StringIO()
    yaml.dump(document, buffer)
    temp = spec_path.with_name(f".{spec_path.name}.tune.tmp")
    temp.write_text(buffer.getvalue(), encoding="utf-8")
    try:
        load_spec(temp)
        os.replace(temp, spec_path)
    finally:
        temp.unlink(missing_ok=True)
    return kept


def _set(mapping: CommentedMap, key: str, value: Any, where: str, kept: list[str]) -> None:
    old = mapping.get(key)
    if old == value:
        return
    mapping[key] = value
    comment = _end_of_line_comment(mapping, key)
    if comment:
        kept.append(f"{where}.{key}: {_show(old)} -> {_show(value)}; its comment was kept, "
                    f"check it still holds: {comment}")


def _end_of_line_comment(mapping: CommentedMap, key: str) -> str:
    tokens = mapping.ca.items.get(key)
    token = tokens[2] if tokens and len(tokens) > 2 else None
    return str(token.value).strip() if token is not None else ""


def _show(value: Any) -> str:
    return "[" + ", ".join(map(str, value)) + "]" if isinstance(value, list) else str(value)


def _like(old: Any, values: list[int]) -> CommentedSeq:
    """A new list in the old one's style (flow `[8, 16]` stays flow)."""
    seq = CommentedSeq(values)
    if old is None or (isinstance(old, CommentedSeq) and old.fa.flow_style()):
        seq.fa.set_flow_style()
    return seq
