"""ScatterElementsUpdate-12 (and -3): a copy of ``data`` with each element of ``updates`` put,
or reduced, at its own position with the index along ``axis`` taken from ``indices``."""

import math
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops.errors import SpecError
from app.ops.raw import as_raw, is_integer_type

REDUCTIONS = ("none", "sum", "prod", "min", "max", "mean")
_BFLOAT16 = np.dtype("bfloat16")


class ScatterElementsPlan(NamedTuple):
    """What the checks of one ScatterElementsUpdate found; the output has the shape of data."""

    axis: int
    reduction: str
    use_init_val: bool
    output_shape: tuple[int, ...]


def _is_float(dtype: np.dtype[Any]) -> bool:
    return dtype.kind == "f" or dtype == _BFLOAT16


def scatter_elements_axis(rank: int, axis: npt.NDArray[Any]) -> int:
    """The axis the ``axis`` input names: a scalar or a 1D tensor of one element, of any integer
    type, in ``[-r, r - 1]``; normalised to ``axis + r`` when negative."""
    if not is_integer_type(axis.dtype):
        raise SpecError("axis", f"axis must be of an integer type (T_AXIS), got {axis.dtype.name}")
    if axis.shape not in ((), (1,)):
        raise SpecError(
            "axis",
            f"axis must be a scalar or a 1D tensor with one element, got shape {list(axis.shape)}",
        )
    value = int(axis.reshape(-1)[0])
    if not -rank <= value <= rank - 1:
        raise SpecError(
            "axis",
            f"axis must be in range [-r, r - 1] = [{-rank}, {rank - 1}] where r = {rank} is the "
            f"rank of data, got {value}",
        )
    return value % rank


def scatter_elements_update_plan(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    axis: npt.NDArray[Any],
    reduction: str = "none",
    use_init_val: bool = True,
    version: int = 12,
) -> ScatterElementsPlan:
    """Check the inputs of a ScatterElementsUpdate-12 (or, with ``version=3``, -3) against the
    spec, before anything is copied; index values included."""
    if version == 3 and (reduction != "none" or not use_init_val):
        raise SpecError("reduction", "ScatterElementsUpdate-3 does not have attributes")
    if reduction not in REDUCTIONS:
        raise SpecError(
            "reduction",
            f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}",
        )
    if version == 3 and data.dtype.kind == "b":
        raise SpecError("data", "data must be of a numeric type (T), got bool")
    if reduction == "mean" and data.dtype.kind == "b":
        raise SpecError(
            "reduction",
            "there is no implementation for boolean data type and reduction mean",
        )
    if not is_integer_type(indices.dtype):
        raise SpecError(
            "indices",
            f"indices must be of an integer type (T_IND), got {indices.dtype.name}",
        )
    if updates.dtype.newbyteorder("=") != data.dtype.newbyteorder("="):
        raise SpecError(
            "updates",
            f"updates must be of the type of data (T), got {updates.dtype.name} for data of "
            f"{data.dtype.name}",
        )
    rank = data.ndim
    normal = scatter_elements_axis(rank, axis)
    if indices.ndim != rank:
        raise SpecError(
            "indices",
            f"the rank of indices must be equal to the rank of data ({rank}), got {indices.ndim}",
        )
    if updates.shape != indices.shape:
        raise SpecError(
            "updates",
            f"updates must have the shape of indices {list(indices.shape)}, got "
            f"{list(updates.shape)}",
        )
    for dim, (have, limit) in enumerate(zip(indices.shape, data.shape, strict=True)):
        if have > limit and (version == 3 or dim != normal):
            which = "" if version == 3 else " other than axis"
            raise SpecError(
                "updates",
                f"the dimensions of updates{which} must be less or equal to the corresponding "
                f"dimensions of data: dimension {dim} is {have}, data's is {limit}",
            )
    _check_index_values(indices, data.shape[normal], version)
    return ScatterElementsPlan(normal, reduction, use_init_val, data.shape)


def _check_index_values(indices: npt.NDArray[Any], size: int, version: int) -> None:
    """Every index within ``[-d, d - 1]`` (-12) or ``[0, s - 1]`` (-3), checked on the values
    as they are typed (a uint64 above the int64 maximum is out of range, not negative)."""
    if indices.size == 0:
        return
    low, high = int(indices.min()), int(indices.max())
    lowest = 0 if version == 3 else -size
    if low >= lowest and high <= size - 1:
        return
    bad = low if low < lowest else high
    if version == 3:
        rule = f"all index values must be within bounds [0, s - 1] = [0, {size - 1}] (s = {size})"
        if bad < 0:
            rule = "an index must not be negative (ScatterElementsUpdate-3)"
    else:
        rule = (
            f"all index values must be within bounds [-d, d - 1] = [{-size}, {size - 1}] along "
            f"the dimension d = {size} pointed by axis"
        )
    raise SpecError("indices", f"{rule}; got index {bad}")


def scatter_elements_update(
    data: npt.ArrayLike,
    indices: npt.ArrayLike,
    updates: npt.ArrayLike,
    axis: npt.ArrayLike,
    reduction: str = "none",
    use_init_val: bool = True,
    out: npt.NDArray[Any] | None = None,
    version: int = 12,
) -> npt.NDArray[Any]:
    """ScatterElementsUpdate-12: a copy of ``data`` where, for each element of ``updates`` (in
    row-major order), the element of the output at the update's own index, with the index
    along ``axis`` taken from ``indices`` (negative counts from the end), becomes
    ``reduction(update, there)``.

    ``none`` puts the update (the last one wins); ``sum``/``prod`` add and multiply in the
    element type (bool: OR, AND); ``min``/``max`` are C++'s ``std::min(update, there)`` and
    ``std::max(update, there)`` (``there`` stays only when strictly less / greater); ``mean`` is
    the sum in the element type divided by the count, rounded down for integers. With
    ``use_init_val`` false, data's elements an update reaches do not take part (the first
    update starts the reduction); the others keep data's values.
    """
    data, indices, updates = np.asarray(data), np.asarray(indices), np.asarray(updates)
    plan = scatter_elements_update_plan(
        data, indices, updates, np.asarray(axis), reduction, use_init_val, version
    )
    return scatter_elements_update_planned(data, indices, updates, plan, out)


def target_positions(
    indices: npt.NDArray[Any], shape: tuple[int, ...], axis: int
) -> npt.NDArray[np.int64]:
    """Each update's flat position in an array of ``shape`` (C order), in the updates'
    row-major order: its own index, with the index along ``axis`` from ``indices``."""
    rank = len(shape)
    strides = [math.prod(shape[dim + 1 :]) for dim in range(rank)]
    along = indices.astype(np.int64)
    if along.size and int(along.min()) < 0:
        along = np.where(along < 0, along + shape[axis], along)
    positions = along * strides[axis] if strides[axis] != 1 else along.copy()
    for dim in range(rank):
        if dim == axis or indices.shape[dim] == 1:
            continue
        span = np.arange(indices.shape[dim], dtype=np.int64) * strides[dim]
        positions += span.reshape((-1,) + (1,) * (rank - dim - 1))
    return positions.reshape(-1)


def scatter_elements_update_planned(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    plan: ScatterElementsPlan,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """``scatter_elements_update`` with the inputs already checked (``plan`` is their plan)."""
    if out is None:
        out = np.empty(plan.output_shape, dtype=data.dtype)
    work = data.dtype if plan.reduction == "none" else data.dtype.newbyteorder("=")
    if not out.flags.c_contiguous or out.dtype != work:
        result = scatter_elements_update_planned(
            data, indices, updates, plan, np.empty(plan.output_shape, dtype=work)
        )
        if out.dtype == work:
            np.copyto(as_raw(out), as_raw(result))
        else:
            np.copyto(out, result)  # the other byte order: each value swapped, bits kept
        return out
    if data.dtype == out.dtype:
        np.copyto(as_raw(out), as_raw(data))
    else:
        np.copyto(out, data)
    if updates.size == 0:
        return out
    positions = target_positions(indices, data.shape, plan.axis)
    flat = out.reshape(-1)
    if plan.reduction == "none":
        source = as_raw(np.ascontiguousarray(updates, dtype=out.dtype)).reshape(-1)
        _put_last(as_raw(flat), positions, source)
        return out
    values = np.ascontiguousarray(updates, dtype=work).reshape(-1)
    with np.errstate(all="ignore"):  # integers wrap, NaNs and infinities are values here
        if plan.reduction in ("sum", "prod", "mean"):
            _accumulate(flat, positions, values, plan)
        else:
            _extreme(flat, positions, values, plan)
    return out


def _put_last(target: npt.NDArray[Any], positions: npt.NDArray[np.int64], source: Any) -> None:
    """``target[positions[i]] = source[i]`` in order: of repeated positions the last one wins
    (chosen explicitly: NumPy does not promise an order for repeated fancy assignment). The
    cost follows the updates, not data: a stable sort of the positions finds each one's last."""
    order = np.argsort(positions, kind="stable")
    ordered = positions[order]
    last = np.empty(ordered.size, dtype=bool)
    last[-1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=last[:-1])
    target[ordered[last]] = source[order[last]]


def _accumulate(
    flat: npt.NDArray[Any],
    positions: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    plan: ScatterElementsPlan,
) -> None:
    """sum, prod and mean: the updates folded in, in order, in the element type (``ufunc.at``
    applies them one after the other)."""
    function = np.multiply if plan.reduction == "prod" else np.add
    reached, first = np.unique(positions, return_index=True)
    if plan.use_init_val:
        function.at(flat, positions, values)
    else:
        # data's element takes no part: each position starts from its first update (an
        # identity such as 0 would turn a first -0.0 into +0.0), the others fold into it.
        flat[reached] = values[first]
        rest = np.ones(positions.size, dtype=bool)
        rest[first] = False
        function.at(flat, positions[rest], values[rest])
    if plan.reduction != "mean":
        return
    counts = np.bincount(positions, minlength=flat.size)[reached]
    if plan.use_init_val:
        counts += 1
    sums = flat[reached]
    if _is_float(flat.dtype):
        flat[reached] = (sums.astype(np.float64) / counts).astype(flat.dtype)
    else:
        wide = np.uint64 if flat.dtype.kind == "u" else np.int64
        flat[reached] = np.floor_divide(sums.astype(wide), counts.astype(wide)).astype(flat.dtype)


def _extreme(
    flat: npt.NDArray[Any],
    positions: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    plan: ScatterElementsPlan,
) -> None:
    """min and max: ``x = std::min(u, x)`` (``x`` stays only when ``x < u``; max: ``u < x``)
    folded over each position's updates in order, without a loop over them.

    The fold ends on the last NaN when it is the last value; else it restarts after the last
    NaN (the value after a NaN replaces it), and ends on the extreme of what follows, the latest
    of equal ones (only +0.0 and -0.0 are equal with other bits).
    """
    greatest = plan.reduction == "max"
    order = np.argsort(positions, kind="stable")
    ordered = positions[order]
    chosen = values[order]
    starts_mask = np.empty(ordered.size, dtype=bool)
    starts_mask[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts_mask[1:])
    places = ordered[starts_mask]
    if plan.use_init_val:
        # data's element is the first value of each position's sequence.
        group = np.cumsum(starts_mask) - 1
        counts = np.bincount(group)
        sequence = np.empty(ordered.size + places.size, dtype=flat.dtype)
        first = np.flatnonzero(starts_mask) + np.arange(places.size)
        keep = np.ones(sequence.size, dtype=bool)
        keep[first] = False
        sequence[first] = flat[places]
        sequence[keep] = chosen
        starts = first
        lengths = counts + 1
    else:
        sequence = chosen
        starts = np.flatnonzero(starts_mask)
        lengths = np.diff(np.append(starts, ordered.size))
    group = np.repeat(np.arange(places.size), lengths)
    index = np.arange(sequence.size, dtype=np.int64)
    ends = starts + lengths - 1
    if _is_float(flat.dtype):
        nan = np.isnan(sequence)
        last_nan = np.maximum.reduceat(np.where(nan, index, -1), starts)
    else:
        last_nan = np.full(places.size, -1, dtype=np.int64)
    tail = index > last_nan[group]
    if flat.dtype.kind == "b":
        neutral = np.array(not greatest)
    elif flat.dtype.kind in "iu":
        info = np.iinfo(flat.dtype)
        neutral = np.array(info.min if greatest else info.max, dtype=flat.dtype)
    else:
        neutral = np.array(-np.inf if greatest else np.inf).astype(flat.dtype)
    candidates = np.where(tail, sequence, neutral)
    best = (np.maximum if greatest else np.minimum).reduceat(candidates, starts)
    latest = np.maximum.reduceat(np.where(tail & (sequence == best[group]), index, -1), starts)
    # A position whose last value is a NaN ends on it.
    pick = np.where(last_nan == ends, last_nan, latest)
    flat[places] = sequence[pick]
