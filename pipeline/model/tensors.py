"""Spec dtypes in each vocabulary, and the inputs that parity and load send."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from pipeline.errors import UsageError
from pipeline.spec.models import ModelSpec, ParityStage, TensorSpec

Array = npt.NDArray[np.generic]
Batch = dict[str, Array]

NUMPY_DTYPES: dict[str, type[np.generic]] = {
    "bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16,
    "int32": np.int32, "int64": np.int64, "float16": np.float16, "float32": np.float32,
    "float64": np.float64,
}
# KServe v2 / Triton wire names; config.pbtxt uses "TYPE_" + the same suffix.
WIRE_DTYPES: dict[str, str] = {
    "bool": "BOOL", "uint8": "UINT8", "int8": "INT8", "int16": "INT16", "int32": "INT32",
    "int64": "INT64", "float16": "FP16", "float32": "FP32", "float64": "FP64",
}


def config_dtype(dtype: str) -> str:
    return "TYPE_" + WIRE_DTYPES[dtype]


def generate_inputs(inputs: list[TensorSpec], count: int, seed: int) -> Batch:
    """Deterministic inputs: standard normal for floats, small non-negative ints, coin flips."""
    rng = np.random.default_rng(seed)
    batch: Batch = {}
    for tensor in inputs:
        shape = (count, *tensor.shape)
        dtype = NUMPY_DTYPES[tensor.dtype]
        if tensor.dtype == "bool":
            batch[tensor.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif tensor.dtype.startswith(("int", "uint")):
            batch[tensor.name] = rng.integers(0, 100, size=shape).astype(dtype)
        else:
            batch[tensor.name] = rng.normal(0.0, 1.0, size=shape).astype(dtype)
    return batch


def load_samples(model: ModelSpec, parity: ParityStage, workspace: Path) -> Batch:
    """Representative inputs from `parity.data`, else generated ones; checked against the spec."""
    if parity.data is None:
        return generate_inputs(model.inputs, parity.samples, parity.seed)
    path = workspace / parity.data
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as exc:
        raise UsageError(f"{parity.data}: cannot read as .npz: {exc}") from None
    batch: Batch = {}
    counts = set()
    for tensor in model.inputs:
        if tensor.name not in arrays:
            raise UsageError(f"{parity.data}: no array named '{tensor.name}' "
                             f"(has: {', '.join(sorted(arrays)) or 'none'})")
        array = arrays[tensor.name]
        if tuple(array.shape[1:]) != tuple(tensor.shape):
            raise UsageError(f"{parity.data}: '{tensor.name}' has items of shape "
                             f"{list(array.shape[1:])}, the spec says {tensor.shape}")
        if array.dtype != np.dtype(NUMPY_DTYPES[tensor.dtype]):
            raise UsageError(f"{parity.data}: '{tensor.name}' is {array.dtype}, the spec says "
                             f"{tensor.dtype}")
        counts.add(array.shape[0])
        batch[tensor.name] = array
    if len(counts) != 1 or 0 in counts:
        raise UsageError(f"{parity.data}: inputs need the same non-zero number of samples, "
                         f"got {sorted(counts)}")
    return batch


def take(batch: Batch, count: int, start: int = 0) -> Batch:
    """`count` items from `start`, wrapping around so any batch size can be built."""
    size = next(iter(batch.values())).shape[0]
    indices = [(start + i) % size for i in range(count)]
    return {name: array[indices] for name, array in batch.items()}
