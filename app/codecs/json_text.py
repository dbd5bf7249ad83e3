"""Arrays as nested JSON text: whole by orjson where its lists are few, else in pieces from a
flat encoding, with no object per subarray.

orjson serialises an N-dimensional array by visiting each subarray, which costs it some 100 bytes
per subarray (list) at rank 2 and 250 at rank 20 (a rank-20 array of 2**20 int8 took 250 MB).
Where the lists are few (a long last dimension, as most tensors have), that is nothing, and orjson
writes the whole text at once, 4-6 times faster than the pieces. Otherwise the elements are
encoded flat, and the brackets between them are worked out arithmetically: after element ``i``
(counting from 1) come ``j`` closing brackets, a comma and ``j`` opening brackets, where ``j`` is
the number of trailing dimensions whose product divides ``i``. Both write each element with
orjson, so their texts are the same, byte for byte.
"""

import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

#: The most a piece's temporaries hold (the memory estimate counts it once).
PIECE_BYTES = 24 << 20
#: The fewest elements a piece holds.
MIN_PIECE_ELEMENTS = 1024
#: What orjson holds beyond the text when it writes a whole array: this much a list and this
#: much more a dimension (measured 95-150 bytes a list at rank 2, 250 at rank 20, with glibc
#: giving large blocks back: MALLOC_MMAP_THRESHOLD_), and a fixed part (some 70 KiB measured).
WHOLE_LIST_BYTES, WHOLE_DIMENSION_BYTES, WHOLE_FIXED_BYTES = 128, 8, 128 << 10
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


@functools.lru_cache(maxsize=4096)  # a pure function of the shape and type
def text_bytes(shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    """An upper bound of the nested JSON text of an array of ``shape`` and ``dtype``, exact in
    its brackets: two for every list at every level."""
    levels = _leaf_levels(shape)
    leaves = math.prod(shape[:levels])
    longest = 2 if levels < len(shape) else _LONGEST.get(dtype.kind, {}).get(dtype.itemsize)
    lists = sum(math.prod(shape[:level]) for level in range(levels))
    return leaves * ((longest or _LONGEST_FLOAT) + 1) + 2 * lists + 2


def _lists(shape: tuple[int, ...]) -> int:
    """The lists of the nested text of an array of ``shape``, the outermost included."""
    return sum(math.prod(shape[:level]) for level in range(_leaf_levels(shape)))


def _whole_bytes(shape: tuple[int, ...]) -> int:
    """What orjson's temporaries take when it writes an array of ``shape`` whole."""
    per_list = WHOLE_LIST_BYTES + WHOLE_DIMENSION_BYTES * len(shape)
    return _lists(shape) * per_list + WHOLE_FIXED_BYTES


@functools.lru_cache(maxsize=4096)  # a pure function of the shape and type
def writes_whole(shape: tuple[int, ...], dtype: np.dtype[Any]) -> bool:
    """Whether orjson writes the text of an array of ``shape`` at once: always up to one
    dimension; above, when it has no more lists than elements (past that, as with dimensions
    of size 1 at high rank, its 100-250 ns a list make it slower than the pieces) and its
    temporaries take no more than a piece's would at most (``PIECE_BYTES``) or than half the
    text's bound (last dimensions of a dozen elements and more, at rank 2)."""
    if len(shape) < 2:
        return True
    if _lists(shape) > math.prod(shape[: _leaf_levels(shape)]):
        return False
    return _whole_bytes(shape) <= max(PIECE_BYTES, text_bytes(shape, dtype) // 2)


def _piece_elements(shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[int, int]:
    """Elements a piece holds, and the bytes its temporaries take at most (some 16 bytes a
    byte of element text, 4 a byte of output)."""
    leaves = math.prod(shape[: _leaf_levels(shape)])
    per_element = 16 * 22 + 4 * text_bytes(shape, dtype) // max(leaves, 1)
    step = max(MIN_PIECE_ELEMENTS, PIECE_BYTES // per_element)
    return step, min(step, leaves) * per_element


@functools.lru_cache(maxsize=4096)  # a pure function of the shape and type
def writing_bytes(shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    """The most the writer's temporaries hold beside the text (for the memory estimate): those
    of one piece, or orjson's when it writes the array whole and they take more (nothing counted
    up to one dimension, where orjson has one list). Never less than a piece: the estimate of
    V2's flat JSON answers counts it too, as it always has."""
    if len(shape) < 2:
        return 0
    pieces = _piece_elements(shape, dtype)[1]
    return max(pieces, _whole_bytes(shape)) if writes_whole(shape, dtype) else pieces


def nested_json(array: npt.NDArray[Any]) -> list[bytes | npt.NDArray[np.uint8]]:
    """The JSON text of ``array`` (C order, native, of a type orjson writes) as nested arrays,
    in pieces to send one after the other (one piece when orjson writes it whole)."""
    if array.ndim == 0:
        return [orjson.dumps(array.item())]
    if writes_whole(array.shape, array.dtype):
        return [orjson.dumps(array, option=orjson.OPT_SERIALIZE_NUMPY)]
    return _in_pieces(array)


def _in_pieces(array: npt.NDArray[Any]) -> list[bytes | npt.NDArray[np.uint8]]:
    """The text of ``array`` (two dimensions or more) in pieces of bounded temporaries."""
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
