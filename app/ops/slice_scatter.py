"""SliceScatter-15: a copy of a tensor whose slice ``data[start:stop:step]`` along ``axes`` is
replaced by ``updates``."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import Arrays, Attributes, Plan
from app.ops.errors import SpecError
from app.ops.raw import as_raw, is_integer_type


def _vector(name: str, array: npt.NDArray[Any], kind: str) -> list[int]:
    if not is_integer_type(array.dtype):
        raise SpecError(name, f"{name} must be of an integer type ({kind}), got {array.dtype.name}")
    if array.ndim != 1:
        raise SpecError(
            name, f"{name} must be a 1D tensor, got a tensor of shape {list(array.shape)}"
        )
    return [int(value) for value in array.tolist()]


def slice_scatter_plan(
    data: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    start: npt.NDArray[Any],
    stop: npt.NDArray[Any],
    step: npt.NDArray[Any],
    axes: npt.NDArray[Any] | None,
) -> tuple[slice, ...]:
    """Check the inputs against the spec; the slice of data that updates replaces (each axis
    clamped as Python clamps, on Python integers: any int64 or uint64 value). The output has
    data's shape."""
    shape = data.shape
    rank = len(shape)
    if rank == 0:
        raise SpecError("data", "data must have rank 1 or more, got a scalar")
    if updates.dtype != data.dtype:
        raise SpecError(
            "updates",
            f"updates must be of the type of data (T), got {updates.dtype.name} and "
            f"{data.dtype.name}",
        )
    starts = _vector("start", start, "T_IND")
    stops = _vector("stop", stop, "T_IND")
    steps = _vector("step", step, "T_IND")
    if not len(starts) == len(stops) == len(steps):
        raise SpecError(
            "stop",
            "start, stop and step must have the same number of elements, got "
            f"{len(starts)}, {len(stops)} and {len(steps)}",
        )
    if axes is None:
        if len(starts) > rank:
            raise SpecError(
                "start",
                f"start has {len(starts)} elements, more than data has dimensions ({rank}), "
                "and no axes says which they apply to",
            )
        chosen = list(range(len(starts)))
    else:
        chosen = _vector("axes", axes, "T_AXIS")
        if len(chosen) != len(starts):
            raise SpecError(
                "axes",
                f"axes must have as many elements as start, stop and step ({len(starts)}), "
                f"got {len(chosen)}",
            )
    slices = [slice(None)] * rank
    seen: set[int] = set()
    for position, (axis, first, last, stride) in enumerate(
        zip(chosen, starts, stops, steps, strict=True)
    ):
        if not -rank <= axis < rank:
            raise SpecError(
                "axes", f"axes[{position}] = {axis} is out of range [{-rank}, {rank - 1}]"
            )
        if axis % rank in seen:
            raise SpecError("axes", f"axes must be unique: axis {axis % rank} is given twice")
        seen.add(axis % rank)
        if stride == 0:
            raise SpecError("step", f"step[{position}] is 0: a step cannot be 0")
        taken = range(*slice(first, last, stride).indices(shape[axis % rank]))
        # As a slice of non-negative bounds: ``indices`` gives -1 for "before the first element",
        # which a slice would read as the last one.
        slices[axis % rank] = (
            slice(taken.start, taken.stop if taken.stop >= 0 else None, taken.step)
            if taken
            else slice(0, 0)
        )
    wanted = tuple(
        len(range(*item.indices(size))) for item, size in zip(slices, shape, strict=True)
    )
    if updates.shape != wanted:
        raise SpecError(
            "updates",
            f"updates must have the shape of the slice it replaces, {list(wanted)} (data's "
            f"{list(shape)} with each sliced axis as long as its slice), got "
            f"{list(updates.shape)}",
        )
    return tuple(slices)


def slice_scatter(
    data: npt.ArrayLike,
    updates: npt.ArrayLike,
    start: npt.ArrayLike,
    stop: npt.ArrayLike,
    step: npt.ArrayLike,
    axes: npt.ArrayLike | None = None,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """SliceScatter-15: ``data`` with ``data[start:stop:step]`` along ``axes`` (by default the
    first ones) replaced by ``updates``; into ``out`` if given."""
    data, updates = np.asarray(data), np.asarray(updates)
    given = None if axes is None else np.asarray(axes)
    slices = slice_scatter_plan(
        data, updates, np.asarray(start), np.asarray(stop), np.asarray(step), given
    )
    return _scattered(data, updates, slices, out)


def _scattered(
    data: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    slices: tuple[slice, ...],
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(data.shape, data.dtype)
    raw = as_raw(out)
    np.copyto(raw, as_raw(data), casting="equiv")
    np.copyto(raw[slices], as_raw(updates), casting="equiv")
    return out


def plan(arrays: Arrays, attributes: Attributes) -> Plan:
    """SliceScatter-15's planner: every check made, the output's shape (data's)."""
    data, updates = arrays["data"], arrays["updates"]
    slices = slice_scatter_plan(
        data, updates, arrays["start"], arrays["stop"], arrays["step"], arrays.get("axes")
    )
    return Plan(data.shape, lambda out: _scattered(data, updates, slices, out))
