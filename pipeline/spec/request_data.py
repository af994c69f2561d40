"""A file of real requests (`stages.latency.data`, `stages.saturation.data`), read and held
to the declared inputs.

`.npz`: one array per input name, the first axis the items (as `stages.parity.data`).
`.jsonl`: one item per line, a JSON object of the inputs by name, each a nested list of the
item's shape (no batch dimension): `{"tokens": [5, 8, 13], "mask": [1, 1, 1]}`. A request
holds `batch_size` consecutive items, which must share their shapes. Every way the file can
disagree with the spec is a `RequestDataError` naming `file:line` or `file:array`.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pipeline.spec.models import TensorSpec
from pipeline.spec.sizes import VARIABLE
from pipeline.spec.strings import STRING, normalized, string_array

Items = dict[str, npt.NDArray[Any]]
MAX_DATA_BYTES = 256 * 2**20
"""The largest data file read: every request is held encoded in memory while it is sent."""


class RequestDataError(ValueError):
    """The file does not hold requests the spec's inputs take; the message names where."""


@dataclass(frozen=True)
class RequestData:
    """The file's requests in file order, each with its batch dimension, and the size
    bucket of each (its variable dimensions' sizes; None where no input has one)."""

    requests: list[Items]
    sizes: list[str | None]


def read_request_data(path: Path, shown: str, inputs: Sequence[TensorSpec],
                      batch_size: int) -> RequestData:
    """The requests of `path` (named `shown` in messages); RequestDataError."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise RequestDataError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    if size > MAX_DATA_BYTES:
        raise RequestDataError(f"{shown}: {size} bytes, over the {MAX_DATA_BYTES // 2**20} MiB "
                               "a data file may hold")
    if path.suffix == ".npz":
        items, where = _npz_items(path, shown, inputs)
    elif path.suffix == ".jsonl":
        items, where = _jsonl_items(path, shown, inputs)
    else:
        raise RequestDataError(f"{shown}: expected a .npz or a .jsonl file")
    if not items:
        raise RequestDataError(f"{shown}: holds no items")
    return _requests(items, where, shown, inputs, batch_size)


def _check_item(tensor: TensorSpec, shape: tuple[int, ...], where: str) -> None:
    if len(shape) != len(tensor.shape) or any(
            declared not in (VARIABLE, got) or got < 1
            for declared, got in zip(tensor.shape, shape, strict=True)):
        raise RequestDataError(f"{where}: '{tensor.name}' has items of shape {list(shape)}, "
                               f"outside the declared {tensor.shape} (-1: any size from 1)")


def _npz_items(path: Path, shown: str, inputs: Sequence[TensorSpec]
               ) -> tuple[list[Items], list[str]]:
    try:
        with path.open("rb") as handle:
            archive = np.load(handle, allow_pickle=False)
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise ValueError("a single array (.npy), not an archive of arrays")
            with archive:
                arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise RequestDataError(f"{shown}: cannot read as .npz: {exc}") from None
    counts = set()
    for tensor in inputs:
        if tensor.name not in arrays:
            raise RequestDataError(f"{shown}: no array named '{tensor.name}' (has: "
                                   f"{', '.join(sorted(arrays)) or 'none'})")
        array = arrays[tensor.name]
        where = f"{shown}:{tensor.name}"
        if tensor.dtype == STRING:
            if array.dtype.char not in "SU":
                raise RequestDataError(f"{where}: {array.dtype}, the spec says string (an "
                                       "array of str or bytes)")
            arrays[tensor.name] = array = normalized(array)
        elif array.dtype != np.dtype(tensor.dtype):
            raise RequestDataError(f"{where}: {array.dtype}, the spec says {tensor.dtype}")
        if array.ndim < 1:
            raise RequestDataError(f"{where}: a scalar; the first axis must be the items")
        _check_item(tensor, tuple(array.shape[1:]), where)
        counts.add(array.shape[0])
    unknown = sorted(set(arrays) - {tensor.name for tensor in inputs})
    if unknown:
        raise RequestDataError(f"{shown}:{unknown[0]}: not an input of the model")
    if len(counts) != 1:
        raise RequestDataError(f"{shown}: the arrays hold different numbers of items "
                               f"({sorted(counts)})")
    count = counts.pop()
    items = [{t.name: arrays[t.name][index] for t in inputs} for index in range(count)]
    return items, [f"{shown}:item {index + 1}" for index in range(count)]


def _jsonl_items(path: Path, shown: str, inputs: Sequence[TensorSpec]
                 ) -> tuple[list[Items], list[str]]:
    items: list[Items] = []
    where: list[str] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RequestDataError(f"{shown}: cannot read as UTF-8 text: {exc}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        at = f"{shown}:{number}"
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise RequestDataError(f"{at}: not a JSON line: {exc}") from None
        items.append(json_item(record, inputs, at))
        where.append(at)
    return items, where


def json_item(record: Any, inputs: Sequence[TensorSpec], at: str) -> Items:
    """One item from a JSON object of the inputs by name (each a nested list of the item's
    shape); RequestDataError naming `at` (file:line)."""
    if not isinstance(record, dict):
        raise RequestDataError(f"{at}: expected an object of the inputs by name")
    unknown = sorted(set(record) - {tensor.name for tensor in inputs})
    if unknown:
        raise RequestDataError(f"{at}: '{unknown[0]}' is not an input of the model")
    return {tensor.name: _json_tensor(record, tensor, at) for tensor in inputs}


def _json_tensor(record: dict[str, Any], tensor: TensorSpec, at: str) -> npt.NDArray[Any]:
    if tensor.name not in record:
        raise RequestDataError(f"{at}: no '{tensor.name}' (the model's inputs: every one "
                               "on every line)")
    value = record[tensor.name]
    if tensor.dtype == STRING and not isinstance(value, list):
        value = [value]                 # a string input holds one string per item
    shape = _nested_shape(value, tensor.name, at)
    flat = list(_flatten(value))
    bad = [element for element in flat if not _fits_dtype(element, tensor.dtype)]
    if bad:
        raise RequestDataError(f"{at}: '{tensor.name}' holds {json.dumps(bad[0])}, not a "
                               f"{tensor.dtype}")
    _check_item(tensor, shape, at)
    if tensor.dtype == STRING:
        return string_array(flat, shape)
    return np.asarray(flat, dtype=np.dtype(tensor.dtype)).reshape(shape)


def _nested_shape(value: Any, name: str, at: str) -> tuple[int, ...]:
    """The shape of a nested list; RequestDataError for a ragged one or a bare number."""
    if not isinstance(value, list):
        raise RequestDataError(f"{at}: '{name}' is not a list (an item's tensor, without "
                               "the batch dimension)")
    shape: list[int] = []
    level: list[Any] = [value]
    while level and all(isinstance(element, list) for element in level):
        lengths = {len(element) for element in level}
        if len(lengths) != 1:
            raise RequestDataError(f"{at}: '{name}' is ragged: its lists differ in length")
        shape.append(lengths.pop())
        level = [part for element in level for part in element]
    if any(isinstance(element, list) for element in level):
        raise RequestDataError(f"{at}: '{name}' is ragged: lists beside numbers")
    return tuple(shape)


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [leaf for element in value for leaf in _flatten(element)]
    return [value]


def _fits_dtype(element: Any, dtype: str) -> bool:
    if dtype == STRING:
        return isinstance(element, str)
    if dtype == "bool":
        return isinstance(element, bool)
    if isinstance(element, bool) or not isinstance(element, int | float):
        return False
    if dtype.startswith(("int", "uint")):
        if not isinstance(element, int):
            return False
        limits = np.iinfo(np.dtype(dtype))
        return int(limits.min) <= element <= int(limits.max)
    return True


def _requests(items: list[Items], where: list[str], shown: str, inputs: Sequence[TensorSpec],
              batch_size: int) -> RequestData:
    if len(items) < batch_size:
        raise RequestDataError(f"{shown}: {len(items)} items, fewer than one request of "
                               f"batch_size {batch_size}")
    requests: list[Items] = []
    sizes: list[str | None] = []
    for start in range(0, len(items) - batch_size + 1, batch_size):
        group = items[start:start + batch_size]
        shapes = {tuple(item[t.name].shape for t in inputs) for item in group}
        if len(shapes) > 1:
            raise RequestDataError(
                f"{where[start]} to {where[start + batch_size - 1].rpartition(':')[2]}: "
                f"items of one request (batch_size {batch_size}) differ in size")
        requests.append({t.name: np.stack([item[t.name] for item in group]) for t in inputs})
        sizes.append(size_of(inputs, group[0]))
    return RequestData(requests, sizes)


def size_of(inputs: Sequence[TensorSpec], item: Items) -> str | None:
    """The sizes of the item's variable dimensions ("32", or "32x7" where they differ)."""
    found: list[int] = []
    for tensor in inputs:
        for declared, got in zip(tensor.shape, item[tensor.name].shape, strict=True):
            if declared == VARIABLE and int(got) not in found:
                found.append(int(got))
    return "x".join(str(size) for size in found) if found else None
