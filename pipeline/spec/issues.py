"""Turn pydantic validation errors into issues that say file:line:col, key and expectation."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from difflib import get_close_matches
from typing import Any

from pydantic import BaseModel, ValidationError

from pipeline.errors import SpecIssue
from pipeline.spec.positions import KeyPath, PositionedDocument, format_path

_TYPE_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
    "bool_parsing": "true or false", "string_type": "a string", "list_type": "a list",
    "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
}


def issues_from_validation(
    error: ValidationError,
    document: PositionedDocument,
    root: type[BaseModel],
    hint_keys: Callable[[str], str | None] | None = None,
    blocks: Mapping[KeyPath, type[BaseModel]] | None = None,
) -> list[SpecIssue]:
    """`blocks`: the models of keys that `root` validates by a model handed in (a kind's
    own `server.<kind>`), so that an unknown key there gets its "did you mean" too."""
    issues: list[SpecIssue] = []
    seen: set[tuple[str, str]] = set()
    for item in error.errors(include_url=False):
        path = _data_path(document.data, tuple(item["loc"]))
        message = _message(item, path, root, hint_keys, blocks or {})
        mark = document.mark_for(path)
        shown = format_path(path)
        if (shown, message) in seen:
            continue
        seen.add((shown, message))
        issues.append(SpecIssue(mark.file, mark.line, mark.column, shown, message))
    return issues


def _data_path(data: Any, loc: tuple[Any, ...]) -> KeyPath:
    """Keep the parts of pydantic's loc that index the data (drop union/validator tags)."""
    path: list[str | int] = []
    node = data
    for index, part in enumerate(loc):
        if isinstance(node, dict) and isinstance(part, str):
            path.append(part)
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            path.append(part)
            node = node[part]
        elif index == len(loc) - 1 and isinstance(part, str) and isinstance(node, dict):
            path.append(part)
    return tuple(path)


def _message(item: Any, path: KeyPath, root: type[BaseModel],
             hint_keys: Callable[[str], str | None] | None,
             blocks: Mapping[KeyPath, type[BaseModel]]) -> str:
    error_type = item["type"]
    given = item.get("input")
    if error_type == "extra_forbidden":
        key = str(path[-1]) if path else "?"
        hint = hint_keys(key) if hint_keys else None
        if hint:
            return f"unknown key '{key}': {hint}"
        valid = fields_at(root, path[:-1], blocks)
        close = get_close_matches(key, valid, n=1, cutoff=0.6)
        suggestion = f"; did you mean '{close[0]}'?" if close else ""
        listed = f" (valid keys: {', '.join(valid)})" if valid and not close else ""
        return f"unknown key '{key}'{suggestion}{listed}"
    if error_type == "missing":
        return "required key is missing"
    if error_type == "literal_error":
        expected = item.get("ctx", {}).get("expected", "")
        options = [o.strip().strip("'") for o in expected.replace(" or ", ",").split(",")]
        close = get_close_matches(str(given), options, n=1, cutoff=0.6)
        suggestion = f"; did you mean '{close[0]}'?" if close else ""
        return f"expected one of {expected}, got {given!r}{suggestion}"
    if error_type in _TYPE_WORDS:
        return f"expected {_TYPE_WORDS[error_type]}, got {_describe(given)}"
    if error_type == "string_pattern_mismatch":
        pattern = item.get("ctx", {}).get("pattern", "")
        return f"{given!r} does not match {pattern}"
    if error_type in ("greater_than_equal", "less_than_equal", "greater_than", "less_than",
                "too_short", "too_long"):
        return f"{item['msg'].lower()}, got {_describe(given)}"
    message = str(item["msg"])
    return message.removeprefix("Value error, ")


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    return f"{value!r} ({type(value).__name__})"


def fields_at(root: type[BaseModel], path: KeyPath,
              blocks: Mapping[KeyPath, type[BaseModel]] | None = None) -> list[str]:
    """The keys a model accepts at `path`, following nested models, lists and dicts (and
    `blocks`, the models of keys validated by a model handed in)."""
    handed_in = blocks or {}
    node: Any = root
    for index, part in enumerate(path):
        node = _unwrap(node)
        if path[: index + 1] in handed_in:
            node = handed_in[path[: index + 1]]
        elif isinstance(part, int):
            args = typing.get_args(node)
            node = args[0] if args else None
        elif isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(part)
            node = field.annotation if field else None
        else:
            return []
    node = _unwrap(node)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    return []


def _unwrap(node: Any) -> Any:
    """Strip Optional/Annotated wrappers down to the model or container type."""
    while True:
        origin = typing.get_origin(node)
        if origin is typing.Annotated:
            node = typing.get_args(node)[0]
        elif origin in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(node) if a is not type(None)]
            models = [a for a in options if isinstance(a, type) and issubclass(a, BaseModel)]
            node = models[0] if models else options[0]
        else:
            return node
