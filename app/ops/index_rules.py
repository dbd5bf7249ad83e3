"""The rules the index ops share: index values checked against the lengths they index (before
any data is touched), index tuples made flat positions, and which of repeated positions wins."""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.errors import SpecError

#: Elements of indices checked at a time once a refusal is certain (a bound on the temporaries).
_CHUNK = 1 << 20
#: Index tuples checked at a time, a column after another, once a refusal is certain.
_BLOCK_ROWS = 1 << 16
#: ``last_occurrences`` marks slots (a byte each) instead of sorting when there are at most this
#: many slots an index: a workspace counts this many bytes an index for it.
MARKS_PER_VALUE = 16


def _first_outside(
    table: npt.NDArray[Any], lengths: Sequence[int], negative: bool, rows: int
) -> tuple[int, int, int] | None:
    """The first value of ``table`` (index tuples as rows, a column a dimension) outside its
    column's range, ``[0, s - 1]`` (or ``[-s, s - 1]`` with ``negative``) for the column's length
    ``s``, as (row, column, value); None when all are inside. ``rows`` rows at a time, a column
    after another; compared as Python ints would be (a uint64 of 2**63 or more is out of range,
    never read as negative)."""
    for first in range(0, table.shape[0], rows):
        block = table[first : first + rows]
        for column, s in enumerate(lengths):
            values = block[:, column]
            if values.dtype.kind == "u":
                bad = values.astype(np.uint64) >= np.uint64(s)
            else:
                wide = values.astype(np.int64)
                bad = (wide >= s) | (wide < (-s if negative else 0))
            if bad.any():
                offset = int(np.argmax(bad))
                return first + offset, column, int(values[offset])
    return None


def check_in_bounds(
    indices: npt.NDArray[Any], length: int, refusal: Callable[[list[int], int], SpecError]
) -> None:
    """Refuse any value of ``indices`` outside ``[0, length - 1]`` (negative ones too): the first
    one found, its place in ``indices`` and its value given to ``refusal`` for the op's words.
    The greatest value is compared first (of a signed type, as the unsigned type of its width:
    a negative value reads as one of 2**(bits - 1) or more, out of range; one pass, where the
    least and the greatest values took two); only a refusal looks further."""
    if indices.size == 0:
        return
    dtype = indices.dtype
    if dtype.kind == "i" and length <= 1 << (8 * dtype.itemsize - 1):
        if int(indices.view(dtype.str.replace("i", "u")).max()) < length:
            return
    elif int(indices.min()) >= 0 and int(indices.max()) < length:
        return
    found = _first_outside(indices.reshape(-1, 1), (length,), negative=False, rows=_CHUNK)
    if found is None:  # pragma: no cover - an extreme is out of bounds
        raise AssertionError("unreachable: an extreme is out of bounds")
    row, _, value = found
    raise refusal([int(p) for p in np.unravel_index(row, indices.shape)], value)


def check_index_values(
    name: str, indices: npt.NDArray[Any], lengths: tuple[int, ...], words: str
) -> bool:
    """Refuse (SpecError on ``name``) an index tuple (the last dimension of ``indices``) holding a
    value outside ``[-s, s - 1]`` for its dimension's length ``s`` in ``lengths``; return whether
    any value is negative.

    Each column's least and greatest values are compared, as Python ints: a uint64 of 2**63 or
    more is out of range, never read as negative. Only a refusal looks further, for the first
    value out of range.
    """
    count = len(lengths)
    if count == 0 or indices.size == 0:
        return False
    table = indices.reshape(-1, count)
    # The extremes of all values first (a contiguous pass), of each column only when those
    # are not in every dimension's range.
    low, high = int(table.min()), int(table.max())
    if low >= 0 and high < min(lengths):
        return False
    lows = [int(table[:, column].min()) for column in range(count)]
    highs = [int(table[:, column].max()) for column in range(count)]
    if all(-s <= low and high < s for low, high, s in zip(lows, highs, lengths, strict=True)):
        return low < 0
    found = _first_outside(table, lengths, negative=True, rows=_BLOCK_ROWS)
    if found is None:  # pragma: no cover - a column's extreme is out of range
        raise AssertionError("unreachable: a column's extreme is out of range")
    row, column, value = found
    position = [int(p) for p in np.unravel_index(row, indices.shape[:-1])]
    s = lengths[column]
    raise SpecError(
        name,
        f"{name}{[*position, column]} = {value} is out of range for a dimension "
        f"of length {s}: {words} [-s, s-1] where s is the corresponding dimension",
    )


def row_positions(
    indices: npt.NDArray[Any], lengths: tuple[int, ...], negative: bool = True
) -> npt.NDArray[np.int64]:
    """The flat position, among the ``prod(lengths)`` slices, that each index tuple (the last
    dimension of ``indices``, checked in range) points at: negative values count from the end
    (``negative`` False when none is, to skip that step)."""
    count = len(lengths)
    table = indices.reshape(-1, count)
    positions = np.zeros(table.shape[0], dtype=np.int64)
    stride = 1
    for column in range(count - 1, -1, -1):
        length = lengths[column]
        values = table[:, column].astype(np.int64)
        if negative:
            values += (values < 0) * np.int64(length)
        if stride != 1:
            values *= np.int64(stride)
        positions += values
        stride *= length
    return positions


def sort_by_position(
    flat: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``flat`` sorted, and the position in ``flat`` of each sorted value, equal values in the
    order they come in (a stable sort).

    Values (non-negative) and positions are packed into one int64 key, ``value * n + i``, when
    that cannot overflow: NumPy's unstable sort of keys (vectorised) is several times faster
    than its stable argsort, and the keys being distinct, it is stable just the same.
    """
    count = flat.size
    largest = int(flat.max()) if count else 0
    if count and (largest + 1) * count < 1 << 62:
        keys = flat * np.int64(count)
        keys += np.arange(count, dtype=np.int64)
        keys.sort()
        ordered, order = np.divmod(keys, np.int64(count))
        return ordered, order
    order = np.argsort(flat, kind="stable").astype(np.int64)
    return flat[order], order


def last_occurrences(
    flat: npt.NDArray[np.int64], slots: int = 0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64] | None]:
    """The distinct values of ``flat`` (non-negative) and, for each, the position of its last
    occurrence; the positions None when no value repeats (``flat`` itself is then the distinct
    values).

    A stable sort puts equal values together in their order: the last of each run is kept.
    When the values lie in ``[0, slots)`` and ``slots`` is at most ``MARKS_PER_VALUE`` times
    their number, one mark per slot first tells, without a sort, whether any value repeats.
    """
    if flat.size < 2:
        return flat, None
    if 0 < slots <= MARKS_PER_VALUE * flat.size:
        marks = np.zeros(slots, dtype=bool)
        marks[flat] = True
        if np.count_nonzero(marks) == flat.size:
            return flat, None
    ordered, order = sort_by_position(flat)
    last = np.empty(ordered.size, dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=last[:-1])
    last[-1] = True
    if last.all():
        return flat, None
    return ordered[last], order[last]


#: A row (the elements of data along axis and after it, for one batch and outer index) of at
#: least this many bytes has the next one prefetched while it is gathered (``prefetch_line``):
#: its elements are read in index order, which the CPU's own prefetcher cannot follow.
PREFETCH_ROW_BYTES = 4096
#: The bytes of a cache line.
CACHE_LINE = 64


def prefetch_line(length: int, count: int, itemsize: int) -> int:
    """``take``'s ``line`` for rows of ``length`` elements of ``itemsize`` bytes read by
    ``count`` indices each: a cache line's elements (the next row prefetched while one is
    gathered) when the row is long and its indices cover much of it, else 0."""
    row_bytes = length * itemsize
    prefetch = row_bytes >= PREFETCH_ROW_BYTES and 2 * count * itemsize >= row_bytes
    return CACHE_LINE // itemsize if prefetch else 0
