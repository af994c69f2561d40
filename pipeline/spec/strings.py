"""String (BYTES) tensors, the spec's `dtype: string`: how text travels through the pipeline.

A string tensor is a numpy object array of UTF-8 `bytes`, one element per string: what
tritonclient and Triton's python backend use, so a served answer and the reference
compare element by element, exactly. `np.str_` or `str` elements (from JSON, from an
.npz of unicode) are encoded on the way in.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

STRING = "string"
"""The spec's name of the dtype (Triton TYPE_STRING, BYTES on the wire)."""
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
"""What generated string inputs are made of: words drawn from a small fixed list."""
DEFAULT_WORDS = 4


def is_string(array: npt.NDArray[Any]) -> bool:
    return array.dtype.char in "OSU"


def dtype_name(array: npt.NDArray[Any]) -> str:
    """The spec's name of an array's dtype ("string" for text)."""
    return STRING if is_string(array) else str(array.dtype)


def as_bytes(element: Any) -> bytes:
    if isinstance(element, bytes):
        return element
    if isinstance(element, str):
        return element.encode("utf-8")
    raise TypeError(f"a string tensor holds text, not {type(element).__name__}")


def string_array(values: Iterable[Any], shape: Iterable[int]) -> npt.NDArray[np.object_]:
    """An object array of `bytes` in `shape` from str or bytes values."""
    flat = [as_bytes(value) for value in values]
    array = np.empty(len(flat), dtype=np.object_)
    array[:] = flat
    return array.reshape(tuple(shape))


def normalized(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A text array as object bytes; any other array unchanged."""
    if not is_string(array):
        return array
    return string_array(array.reshape(-1).tolist(), array.shape)


def random_text(rng: np.random.Generator, shape: tuple[int, ...],
                words: int | None) -> npt.NDArray[np.object_]:
    """Each element `words` words (DEFAULT_WORDS when None) drawn from WORDS."""
    count = int(np.prod(shape))
    length = words or DEFAULT_WORDS
    picks = rng.integers(0, len(WORDS), size=(count, length))
    return string_array((" ".join(WORDS[i] for i in row) for row in picks), shape)


def texts(array: npt.NDArray[Any]) -> list[str]:
    """Every element of a text array as `str`, in row-major order."""
    return [as_bytes(element).decode("utf-8") for element in array.reshape(-1).tolist()]
