"""Spec dtypes in each vocabulary, and the inputs that parity and load send."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import numpy.typing as npt

from pipeline.errors import UsageError
from pipeline.spec.models import ModelSpec, ParityStage, TensorSpec
from pipeline.spec.sizes import VARIABLE
from pipeline.spec.strings import STRING, is_string, normalized, random_text, string_array

Array = npt.NDArray[np.generic]
Batch = dict[str, Array]

NUMPY_DTYPES: dict[str, type[np.generic]] = {
    "bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16,
    "int32": np.int32, "int64": np.int64, "float16": np.float16, "float32": np.float32,
    "float64": np.float64, "string": np.object_,
}
# KServe v2 / Triton wire names; config.pbtxt uses "TYPE_" + the same suffix.
WIRE_DTYPES: dict[str, str] = {
    "bool": "BOOL", "uint8": "UINT8", "int8": "INT8", "int16": "INT16", "int32": "INT32",
    "int64": "INT64", "float16": "FP16", "float32": "FP32", "float64": "FP64",
    "string": "BYTES",
}


def config_dtype(dtype: str) -> str:
    return "TYPE_STRING" if dtype == STRING else "TYPE_" + WIRE_DTYPES[dtype]


def zeros(tensor: TensorSpec, shape: tuple[int, ...]) -> Array:
    """A tensor of `shape` filled with zeros (empty strings for text)."""
    if tensor.dtype == STRING:
        return string_array([b""] * int(np.prod(shape)), shape)
    return np.zeros(shape, dtype=NUMPY_DTYPES[tensor.dtype])


def generate_inputs(inputs: list[TensorSpec], count: int, seed: int,
                    size: int | None = None) -> Batch:
    """Deterministic inputs: standard normal for floats, small non-negative ints, coin flips,
    text of `size` words (4 without sizes) from a fixed list; every variable dimension (-1)
    `size` long."""
    rng = np.random.default_rng(seed)
    batch: Batch = {}
    for tensor in inputs:
        shape = (count, *tensor.item_shape(size))
        dtype = NUMPY_DTYPES[tensor.dtype]
        if tensor.dtype == STRING:
            batch[tensor.name] = random_text(rng, shape, size)
        elif tensor.dtype == "bool":
            batch[tensor.name] = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif tensor.dtype.startswith(("int", "uint")):
            batch[tensor.name] = rng.integers(0, 100, size=shape).astype(dtype)
        else:
            batch[tensor.name] = rng.normal(0.0, 1.0, size=shape).astype(dtype)
    return batch


def load_samples(model: ModelSpec, parity: ParityStage, workspace: Path) -> Batch:
    """Representative inputs from `parity.data`, else generated ones (variable dimensions at
    the smallest of model.sizes); checked against the spec."""
    if parity.data is None:
        size = model.sizes.values[0] if model.sizes is not None else None
        return generate_inputs(model.inputs, parity.samples, parity.seed, size)
    path = workspace / parity.data
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{parity.data}: cannot read as .npz: {exc}") from None
    batch: Batch = {}
    counts = set()
    for tensor in model.inputs:
        if tensor.name not in arrays:
            raise UsageError(f"{parity.data}: no array named '{tensor.name}' "
                             f"(has: {', '.join(sorted(arrays)) or 'none'})")
        array = arrays[tensor.name]
        if not fits(tensor, array.shape[1:]):
            raise UsageError(f"{parity.data}: '{tensor.name}' has items of shape "
                             f"{list(array.shape[1:])}, the spec says {tensor.shape}")
        if tensor.dtype == STRING and is_string(array):
            array = normalized(array)
        elif array.dtype != np.dtype(NUMPY_DTYPES[tensor.dtype]):
            raise UsageError(f"{parity.data}: '{tensor.name}' is {array.dtype}, the spec says "
                             f"{tensor.dtype}")
        counts.add(array.shape[0])
        batch[tensor.name] = array
    if len(counts) != 1 or 0 in counts:
        raise UsageError(f"{parity.data}: inputs need the same non-zero number of samples, "
                         f"got {sorted(counts)}")
    return batch


def fits(tensor: TensorSpec, item_shape: tuple[int, ...]) -> bool:
    """Whether items of `item_shape` are what `tensor` declares (a -1 takes any size)."""
    return len(item_shape) == len(tensor.shape) and all(
        declared in (VARIABLE, size) for declared, size in zip(tensor.shape, item_shape,
                                                               strict=True))


def samples_at(model: ModelSpec, parity: ParityStage, workspace: Path
               ) -> list[tuple[int | None, Batch]]:
    """Parity's samples at each size it sends: generated at the smallest, middle and largest
    of model.sizes, or those of `parity.data` (which fixes its own sizes)."""
    if parity.data is not None or model.sizes is None:
        return [(None, load_samples(model, parity, workspace))]
    return [(size, generate_inputs(model.inputs, parity.samples, parity.seed + index, size))
            for index, size in enumerate(model.sizes.parity_sizes())]


def misshapen(tensor: TensorSpec, size: int | None) -> list[int]:
    """A per-item shape `tensor` does not take: its last fixed dimension one element too
    long, or one dimension too many where every dimension is variable."""
    shape = list(tensor.item_shape(size))
    fixed = [index for index, dim in enumerate(tensor.shape) if dim != VARIABLE]
    if not fixed:
        return [*shape, 1]
    shape[fixed[-1]] += 1
    return shape


def take(batch: Batch, count: int, start: int = 0) -> Batch:
    """`count` items from `start`, wrapping around so any batch size can be built."""
    size = next(iter(batch.values())).shape[0]
    indices = [(start + i) % size for i in range(count)]
    return {name: array[indices] for name, array in batch.items()}
