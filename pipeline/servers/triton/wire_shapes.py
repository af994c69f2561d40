"""How a spec tensor's per-item shape looks on Triton's wire.

A scalar per item (`shape: []`, a model that takes or returns `[n]`) cannot be a batched
Triton tensor of no dimensions: Triton's own convention is `dims: [1]` with
`reshape: { shape: [] }`, so its clients send and receive `[n, 1]` while the model sees
`[n]`. Our clients speak that wire form and hand the rest of the pipeline the declared
`[n]`, so parity, the output contract and the reference agree on the spec's shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeline.model.tensors import Array, Batch, misshapen
from pipeline.spec.models import TensorSpec

SCALAR_WIRE_DIMS = [1]


def wire_dims(tensor: TensorSpec) -> list[int]:
    """config.pbtxt's dims for `tensor`."""
    return list(tensor.shape) or list(SCALAR_WIRE_DIMS)


def wire_item_shape(tensor: TensorSpec, size: int | None) -> list[int]:
    """One item's shape as a client sends it (variable dimensions `size` long)."""
    return list(tensor.item_shape(size)) or list(SCALAR_WIRE_DIMS)


def wire_misshapen(tensor: TensorSpec, size: int | None) -> list[int]:
    """A per-item shape Triton refuses for `tensor` (for a scalar, [2], not its [1])."""
    return [2] if not tensor.shape else misshapen(tensor, size)


def to_wire(batch: Batch, inputs: Sequence[TensorSpec]) -> Batch:
    """`batch` with every scalar-per-item input as [n, 1]."""
    scalars = {tensor.name for tensor in inputs if not tensor.shape}
    return {name: array.reshape(-1, 1) if name in scalars and array.ndim == 1 else array
            for name, array in batch.items()}


def from_wire(arrays: Mapping[str, Array], outputs: Sequence[TensorSpec]) -> dict[str, Array]:
    """The answer's tensors with every scalar-per-item output [n, 1] back as [n] (any
    other shape is left as served, for the output contract to judge)."""
    scalars = {tensor.name for tensor in outputs if not tensor.shape}
    return {name: array.reshape(-1) if name in scalars and array.ndim == 2
            and array.shape[1] == 1 else array
            for name, array in arrays.items()}
