"""StridedSlice-1: a strided slice of a tensor, by the spec's text (its slicing steps, clamping
and masks), which differs from Python's slicing where the text says so."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import Arrays, Attributes, Plan
from app.ops.errors import SpecError
from app.ops.raw import as_raw, is_integer_type

MASKS = ("begin_mask", "end_mask", "new_axis_mask", "shrink_axis_mask", "ellipsis_mask")
#: The masks that change the output's rank: at most one of them at a slicing step.
_RANK_MASKS = ("new_axis_mask", "shrink_axis_mask", "ellipsis_mask")

Index = slice | int | None


def _vector(name: str, array: npt.NDArray[Any]) -> list[int]:
    if not is_integer_type(array.dtype):
        raise SpecError(name, f"{name} must be of an integer type (T_IND), got {array.dtype.name}")
    if array.ndim != 1:
        raise SpecError(
            name, f"{name} must be a 1D tensor, got a tensor of shape {list(array.shape)}"
        )
    return [int(value) for value in array.tolist()]


def _mask(name: str, values: Sequence[int], length: int) -> list[int]:
    """A mask read for ``length`` slicing steps: padded with zeros, the rest ignored."""
    for position, value in enumerate(values):
        if value not in (0, 1):
            raise SpecError(
                name, f"{name}[{position}] = {value}: a bit mask is a list of 0s and 1s"
            )
    return [*values[:length], *[0] * (length - len(values))]


def _forward(first: int, last: int, stride: int, size: int, masked: tuple[int, int]) -> slice:
    """One step slicing forward: begin (inclusive), then every stride-th while below end; the
    begin's element is always added, when the dimension has it."""
    begin = 0 if masked[0] else _clamped(first + size if first < 0 else first, 0, size)
    end = size if masked[1] else _clamped(last + size if last < 0 else last, 0, size)
    if begin >= size:  # begin clamped to size(dim): there is no element to add
        return slice(0, 0)
    count = max(1, -((begin - end) // stride))
    return slice(begin, begin + (count - 1) * stride + 1, stride)


def _reverse(first: int, last: int, stride: int, size: int, masked: tuple[int, int]) -> slice:
    """One step slicing in reverse: begin, then every |stride|-th while above end."""
    if size == 0:
        return slice(0, 0)
    begin = size - 1 if masked[0] else _clamped(first + size if first < 0 else first, 0, size - 1)
    end = 0 if masked[1] else _clamped(last + size if last < 0 else last, -1, size)
    count = max(1, -((end - begin) // -stride))
    final = begin + (count - 1) * stride
    return slice(begin, final - 1 if final > 0 else None, stride)


def _clamped(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)


def strided_slice_plan(
    shape: tuple[int, ...],
    begin: npt.NDArray[Any],
    end: npt.NDArray[Any],
    stride: npt.NDArray[Any] | None,
    masks: Attributes,
) -> tuple[tuple[Index, ...], tuple[int, ...]]:
    """Check the inputs and masks against the spec; the NumPy index that takes the slice
    (slices, ints for shrunk axes, None for new ones) and the output's shape. Python integers:
    any int64 or uint64 value."""
    firsts = _vector("begin", begin)
    count = len(firsts)
    lasts = _vector("end", end)
    strides = [1] * count if stride is None else _vector("stride", stride)
    if not len(lasts) == len(strides) == count:
        raise SpecError(
            "end" if len(lasts) != count else "stride",
            "begin, end and stride must have the same length, got "
            f"{count}, {len(lasts)} and {len(strides)}",
        )
    for position, value in enumerate(strides):
        if value == 0:
            raise SpecError("stride", f"stride[{position}] is 0: stride cannot contain zeros")
    bits = {name: _mask(name, tuple(masks.get(name, ())), count) for name in MASKS}
    if sum(bits["ellipsis_mask"]) > 1:
        raise SpecError(
            "ellipsis_mask",
            "ellipsis_mask can have up to one occurrence of the value 1, got "
            f"{sum(bits['ellipsis_mask'])} within the {count} slicing steps",
        )
    for position in range(count):
        set_here = [name for name in _RANK_MASKS if bits[name][position]]
        if len(set_here) > 1:
            raise SpecError(
                set_here[1],
                f"{' and '.join(set_here)} are both 1 at step {position}: a step inserts a new "
                "axis, shrinks one or is the ellipsis, not several",
            )
    rank = len(shape)
    new_axes = sum(bits["new_axis_mask"])
    skipped = rank - (count - new_axes - 1) if any(bits["ellipsis_mask"]) else 0
    consumed = count - new_axes - (1 if any(bits["ellipsis_mask"]) else 0) + skipped
    if skipped < 0 or consumed != rank:
        raise SpecError(
            "begin",
            f"begin has {count} slicing steps ({new_axes} of them new axes"
            + (", one the ellipsis" if any(bits["ellipsis_mask"]) else "")
            + f"), which slice {count - new_axes - (1 if any(bits['ellipsis_mask']) else 0)} "
            f"dimensions; data has {rank}: without an ellipsis the steps that are not new axes "
            "must be as many as data's dimensions",
        )
    index: list[Index] = []
    out_shape: list[int] = []
    axis = 0
    for position in range(count):
        if bits["new_axis_mask"][position]:
            index.append(None)
            out_shape.append(1)
            continue
        if bits["ellipsis_mask"][position]:
            index += [slice(None)] * skipped
            out_shape += shape[axis : axis + skipped]
            axis += skipped
            continue
        size = shape[axis]
        masked = (bits["begin_mask"][position], bits["end_mask"][position])
        first, last, pace = firsts[position], lasts[position], strides[position]
        if bits["shrink_axis_mask"][position]:
            index.append(_shrunk(position, first, last, size, masked))
        else:
            taken = (_forward if pace > 0 else _reverse)(first, last, pace, size, masked)
            index.append(taken)
            out_shape.append(len(range(*taken.indices(size))))
        axis += 1
    return tuple(index), tuple(out_shape)


def _shrunk(position: int, first: int, last: int, size: int, masked: tuple[int, int]) -> int:
    """The element a shrunk step keeps: begin, which must equal end (both after the masks and
    negative adjusting), clamped as slicing forward (the stride is ignored)."""
    begin = 0 if masked[0] else (first + size if first < 0 else first)
    end = size if masked[1] else (last + size if last < 0 else last)
    if begin != end:
        raise SpecError(
            "end",
            f"shrink_axis_mask[{position}] is 1: begin[{position}] must equal end[{position}], "
            f"got {begin} and {end} (after masks and negative values adjusting)",
        )
    kept = max(begin, 0)
    if kept >= size:
        raise SpecError(
            "begin",
            f"shrink_axis_mask[{position}] is 1 but begin[{position}] = {first} names no element "
            f"of a dimension of size {size}",
        )
    return kept


def strided_slice(
    data: npt.ArrayLike,
    begin: npt.ArrayLike,
    end: npt.ArrayLike,
    stride: npt.ArrayLike | None = None,
    out: npt.NDArray[Any] | None = None,
    **masks: Sequence[int],
) -> npt.NDArray[Any]:
    """StridedSlice-1 of ``data`` (masks by name: ``begin_mask=[0, 1]``...); into ``out`` if
    given."""
    data = np.asarray(data)
    given = None if stride is None else np.asarray(stride)
    index, shape = strided_slice_plan(data.shape, np.asarray(begin), np.asarray(end), given, masks)
    return _sliced(data, index, shape, out)


def _sliced(
    data: npt.NDArray[Any],
    index: tuple[Index, ...],
    shape: tuple[int, ...],
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(shape, data.dtype)
    np.copyto(as_raw(out), as_raw(data)[index], casting="equiv")
    return out


def plan(arrays: Arrays, attributes: Attributes) -> Plan:
    """StridedSlice-1's planner: every check made, the output's shape."""
    data = arrays["data"]
    index, shape = strided_slice_plan(
        data.shape, arrays["begin"], arrays["end"], arrays.get("stride"), attributes
    )
    return Plan(shape, lambda out: _sliced(data, index, shape, out))
