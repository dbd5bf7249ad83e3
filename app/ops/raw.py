"""Views of any element type as unsigned integers of the same width, for bit-exact moves."""

from typing import Any

import numpy as np
import numpy.typing as npt

_UNSIGNED_OF_WIDTH: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
    8: np.dtype(np.uint64),
}


def as_raw(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Return ``array`` viewed as unsigned integers of its item size (no copy).

    Roll and Gather only move elements, so they work on the bits: floats keep their NaN payloads
    and signed zeros, and every element type (bfloat16 included) takes the same path.
    """
    raw_dtype = _UNSIGNED_OF_WIDTH.get(array.dtype.itemsize)
    if raw_dtype is None:
        return array
    # A view to a type of the same width is allowed on any strides and keeps the bytes as stored.
    return array.view(raw_dtype)


def is_integer_type(dtype: np.dtype[Any]) -> bool:
    """True for the spec's "any supported integer type": signed or unsigned, not bool."""
    return dtype.kind in "iu"
