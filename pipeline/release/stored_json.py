"""Reading the JSON documents of a release store as typed records that write back unchanged.

A record read from the store keeps `shape`, the keys (in order) of the document it was read
from: an older document, missing keys a later version writes, comes out of `to_json` with
exactly the keys it went in with. A record built by this version has no shape and writes
the keys this version writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.errors import StoreError


def text(value: Any) -> str | None:
    return None if value is None else str(value)


def in_shape(written: dict[str, Any], every: Mapping[str, Any],
             shape: tuple[str, ...] | None) -> dict[str, Any]:
    """`written` (what this version writes) for a new record; for one read from the store,
    every value it holds (`every`, unknown keys included) under the keys it was read with."""
    if shape is None:
        return written
    return {key: every[key] for key in shape if key in every}


def shape_of(body: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(key) for key in body)


def unknown(body: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """The keys this version has no field for, kept so that they are written back."""
    return {str(key): value for key, value in body.items() if key not in known}


def objects(body: Mapping[str, Any], key: str, what: str) -> list[dict[str, Any]]:
    """`body[key]` as a list of JSON objects (empty when absent); a StoreError otherwise."""
    value = body.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise StoreError(f"{what}: {key} is not a list of JSON objects")
    return [dict(item) for item in value]
