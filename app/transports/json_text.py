"""Arrays as nested JSON text, written in pieces from a flat encoding: no object per subarray.

orjson serialises an N-dimensional array by visiting each subarray, which at high rank costs
hundreds of bytes per element (a rank-20 array of 2**20 int8 took 250 MB). Here the elements are
encoded flat, and the brackets between them are worked out arithmetically: after element ``i``
(counting from 1) come ``j`` closing brackets, a comma and ``j`` opening brackets, where ``j`` is
the number of trailing dimensions whose product divides ``i``.
"""

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

#: The most a piece's temporaries hold (the memory estimate counts it once).
PIECE_BYTES = 24 << 20
#: The fewest elements a piece holds.
MIN_PIECE_ELEMENTS = 1024
_OPEN, _CLOSE, _COMMA = ord("["), ord("]"), ord(",")
# The longest JSON text of one element of each kind (bool, signed, unsigned, float), by size.
_LONGEST = {"b": {1: 5}, "i": {1: 4, 2: 6, 4: 11, 8: 20}, "u": {1: 3, 2: 5, 4: 10, 8: 20}}
_LONGEST_FLOAT = 24  # "-1.7976931348623157e+308"


def _leaf_levels(shape: tuple[int, ...]) -> int:
    """How many dimensions hold leaves: all of them, or those before the first empty one (each
    leaf then an empty list, ``[]``)."""
    for level, size in enumerate(shape):
        if size == 0:
            return level
    return len(shape)


def text_bytes(shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    """An upper bound of the nested JSON text of an array of ``shape`` and ``dtype``, exact in
    its brackets: two for every list at every level."""
    levels = _leaf_levels(shape)
    leaves = math.prod(shape[:levels])
    longest = 2 if levels < len(shape) else _LONGEST.get(dtype.kind, {}).get(dtype.itemsize)
    lists = sum(math.prod(shape[:level]) for level in range(levels))
    return leaves * ((longest or _LONGEST_FLOAT) + 1) + 2 * lists + 2


def _piece_elements(shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[int, int]:
    """Elements a piece holds, and the bytes its temporaries take at most (some 16 bytes a
    byte of element text, 4 a byte of output)."""
    leaves = math.prod(shape[: _leaf_levels(shape)])
    per_element = 16 * 22 + 4 * text_bytes(shape, dtype) // max(leaves, 1)
    step = max(MIN_PIECE_ELEMENTS, PIECE_BYTES // per_element)
    return step, min(step, leaves) * per_element


def piece_bytes(shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    """The most the temporaries of one piece of the text hold (for the memory estimate)."""
    return 0 if len(shape) < 2 else _piece_elements(shape, dtype)[1]


def nested_json(array: npt.NDArray[Any]) -> list[bytes | npt.NDArray[np.uint8]]:
    """The JSON text of ``array`` (C order, native, of a type orjson writes) as nested arrays,
    in pieces to send one after the other."""
    if array.ndim == 0:
        return [orjson.dumps(array.item())]
    if array.ndim == 1:
        return [orjson.dumps(array, option=orjson.OPT_SERIALIZE_NUMPY)]
    levels = _leaf_levels(array.shape)
    dims = array.shape[:levels]
    count = math.prod(dims)
    flat = array.reshape(-1) if levels == array.ndim else None
    # The product of the last k leaf dimensions, for k = 1 .. levels - 1, grouped by value.
    products: dict[int, int] = {}
    product = 1
    for size in reversed(dims[1:]):
        product *= size
        products[product] = products.get(product, 0) + 1
    # Temporaries are some 16 bytes per byte of element text and 4 per byte of output.
    step = _piece_elements(array.shape, array.dtype)[0]
    pieces: list[bytes | npt.NDArray[np.uint8]] = [b"[" * levels]
    for start in range(0, count, step):
        stop = min(start + step, count)
        pieces.append(_piece(flat, start, stop, products))
        if stop < count:
            depth = _depths(np.array([stop], dtype=np.int64), products)[0]
            pieces.append(b"]" * depth + b"," + b"[" * depth)
    pieces.append(b"]" * levels)
    return pieces


def _depths(positions: npt.NDArray[np.int64], products: dict[int, int]) -> npt.NDArray[np.int64]:
    """For each boundary after element ``position`` (from 1), the lists it closes and opens."""
    depths = np.zeros(len(positions), dtype=np.int64)
    for product, times in products.items():
        depths += times * (positions % product == 0)
    return depths


def _piece(
    flat: npt.NDArray[Any] | None, start: int, stop: int, products: dict[int, int]
) -> npt.NDArray[np.uint8]:
    if flat is None:  # leaves are empty lists
        inner = np.tile(np.frombuffer(b"[],", dtype=np.uint8), stop - start)[:-1]
    else:
        text = orjson.dumps(flat[start:stop], option=orjson.OPT_SERIALIZE_NUMPY)
        inner = np.frombuffer(text, dtype=np.uint8)[1:-1]
    commas = np.flatnonzero(inner == _COMMA)
    depths = _depths(np.arange(start + 1, stop, dtype=np.int64), products)
    if not depths.any():
        return inner
    # Each element's text with its comma moves right by the brackets inserted before it; the
    # comma by its own closing brackets too. The output starts as all "[", so only the
    # elements, the commas and the runs of "]" before each comma need writing.
    shifts = np.zeros(len(commas) + 1, dtype=np.int64)
    np.cumsum(2 * depths, out=shifts[1:])
    lengths = np.diff(commas, prepend=-1, append=len(inner) - 1)
    destination = np.arange(len(inner), dtype=np.int64)
    destination += np.repeat(shifts, lengths)
    destination[commas] += depths
    out = np.full(len(inner) + int(shifts[-1]), _OPEN, dtype=np.uint8)
    out[destination] = inner
    del destination
    closing = commas + shifts[:-1] + depths  # where each comma lands; its "]" run ends there
    marks = np.zeros(len(out) + 1, dtype=np.int8)
    marks[closing - depths] += 1
    marks[closing] -= 1
    out[np.cumsum(marks[:-1], dtype=np.int8).view(np.bool_)] = _CLOSE
    return out
