"""Tensors in the JSON body the generated TorchServe handler reads and answers:
`{"shape": [n, ...], "dtype": "float32", "data": [...flat...]}`; text as `"dtype": "string"`
with JSON strings for data."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.model.tensors import Array
from pipeline.spec.strings import STRING, dtype_name, is_string, string_array, texts


def json_tensor(array: Array) -> dict[str, Any]:
    data: list[Any] = texts(array) if is_string(array) else array.reshape(-1).tolist()
    return {"shape": list(array.shape), "dtype": dtype_name(array), "data": data}


def from_json_tensor(tensor: dict[str, Any]) -> Array:
    if tensor["dtype"] == STRING:
        return string_array(tensor["data"], tensor["shape"])
    return np.asarray(tensor["data"], dtype=np.dtype(tensor["dtype"])).reshape(tensor["shape"])
