"""Unique-10: the unique elements (or slices along an axis) of a tensor, where each first
occurs, where each input element went, and how often each occurs."""

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops.errors import SpecError
from app.ops.raw import as_raw

ELEMENT_TYPES = ("i64", "i32")
_NUMPY_OF: dict[str, np.dtype[Any]] = {"i64": np.dtype(np.int64), "i32": np.dtype(np.int32)}
_INT32_MAX = 2**31 - 1
_BFLOAT16 = np.dtype("bfloat16")
_SIGN = np.uint64(1 << 63)


class UniquePlan(NamedTuple):
    """What the checks of one Unique found: the axis (None: the flattened tensor), how many
    elements or slices are compared (``compared``), and each output's largest shape (the first,
    second and fourth shrink to the number of unique ones once it is known)."""

    axis: int | None
    compared: int
    sorted: bool
    index_type: np.dtype[Any]
    count_type: np.dtype[Any]
    bounds: tuple[tuple[int, ...], ...]


def unique_plan(
    data: npt.NDArray[Any],
    axis: npt.NDArray[Any] | None = None,
    sort: bool = True,
    index_element_type: str = "i64",
    count_element_type: str = "i64",
) -> UniquePlan:
    """Check the inputs and attributes against the spec and bound the outputs, with nothing
    allocated: at most ``count`` unique elements (or slices), ``count`` indices, ``count``
    counts; the third output has exactly ``count`` indices."""
    for name, type_name in (
        ("index_element_type", index_element_type),
        ("count_element_type", count_element_type),
    ):
        if type_name not in ELEMENT_TYPES:
            raise SpecError(name, f'{name} must be "i64" or "i32", got {type_name!r}')
    if not isinstance(sort, bool | np.bool_):
        raise SpecError("sorted", f"sorted must be a boolean, got {sort!r}")
    normal: int | None = None
    if axis is None:
        count = int(data.size)
        first_bound: tuple[int, ...] = (count,)
    else:
        if axis.dtype.name not in ("int32", "int64"):
            raise SpecError(
                "axis", f"axis must be of type int64 or int32 (T_AXIS), got {axis.dtype}"
            )
        if axis.shape not in ((), (1,)):
            raise SpecError(
                "axis",
                f"axis must be 1D with a single element or a scalar, got shape {list(axis.shape)}",
            )
        rank = data.ndim
        value = int(axis.reshape(-1)[0])
        if not -rank <= value <= rank - 1:
            raise SpecError(
                "axis",
                f"axis must be in the range [-r; r-1] = [{-rank}; {rank - 1}] where r = {rank} is "
                f"the rank of the input tensor, got {value}",
            )
        normal = value % rank
        count = int(data.shape[normal])
        first_bound = tuple(data.shape)
    if index_element_type == "i32" and count > _INT32_MAX:
        raise SpecError(
            "index_element_type",
            f'index_element_type "i32" cannot hold the indices of {count} elements',
        )
    if count_element_type == "i32" and count > _INT32_MAX:
        raise SpecError(
            "count_element_type",
            f'count_element_type "i32" cannot hold a count of up to {count}',
        )
    return UniquePlan(
        normal,
        count,
        bool(sort),
        _NUMPY_OF[index_element_type],
        _NUMPY_OF[count_element_type],
        (first_bound, (count,), (count,), (count,)),
    )


def unique(
    data: npt.ArrayLike,
    axis: npt.ArrayLike | None = None,
    sort: bool = True,
    index_element_type: str = "i64",
    count_element_type: str = "i64",
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
    """Unique-10: ``(unique, first_indices, inverse, counts)``; ``sort`` is the spec's
    ``sorted`` attribute.

    Elements are compared by value, as IEEE comparison does: -0.0 and +0.0 are one element
    (given with the bits of its first occurrence), each NaN is an element of its own. Sorted
    ascending (NaNs last, in input order; unsigned values as unsigned), or in the order of first
    occurrence. With ``axis``, slices along it are compared element by element (row-major), and
    sorted lexicographically.
    """
    data = np.asarray(data)
    plan = unique_plan(
        data,
        None if axis is None else np.asarray(axis),
        sort,
        index_element_type,
        count_element_type,
    )
    return unique_planned(data, plan)


def sortable_keys(values: npt.NDArray[Any]) -> tuple[npt.NDArray[np.uint64], Any]:
    """uint64 keys whose order is the values' ascending order and whose equality is the values'
    equality (-0.0 is +0.0), and where the values are NaN (None for types without NaN)."""
    dtype = values.dtype
    if dtype.kind in "bu":
        return values.astype(np.uint64), None
    if dtype.kind == "i":
        return values.astype(np.int64).view(np.uint64) ^ _SIGN, None
    wide = values.astype(np.float64)
    nan = np.isnan(wide)
    wide[wide == 0] = 0.0  # -0.0 is +0.0
    bits = wide.view(np.uint64)
    negative = (bits & _SIGN) != 0
    keys = np.where(negative, ~bits, bits | _SIGN)
    keys[nan] = np.uint64(2**64 - 1)  # after +inf
    return keys, nan


def unique_planned(
    data: npt.NDArray[Any], plan: UniquePlan
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]:
    """``unique`` with the inputs already checked: one stable sort of the elements' (or the
    slices') keys; groups of equal keys are the unique ones, the first of each its first
    occurrence."""
    count = plan.compared
    if count == 0:
        empty_index = np.zeros(0, plan.index_type)
        return (
            np.array(data.reshape(0) if plan.axis is None else data),
            empty_index,
            empty_index.copy(),
            np.zeros(0, plan.count_type),
        )
    if plan.axis is None:
        rows = data.reshape(count, 1)
    else:
        rows = np.moveaxis(data, plan.axis, 0).reshape(count, -1)
    keys, nan = sortable_keys(rows)
    if keys.shape[1] == 1:
        order = np.argsort(keys[:, 0], kind="stable")
        ordered = keys[order, 0]
        new_group = np.empty(count, dtype=bool)
        new_group[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=new_group[1:])
    else:
        # np.lexsort sorts by its last key first: the slices' first element leads.
        order = np.lexsort(keys.T[::-1]) if keys.shape[1] else np.arange(count)
        ordered_rows = keys[order]
        new_group = np.empty(count, dtype=bool)
        new_group[0] = True
        np.any(ordered_rows[1:] != ordered_rows[:-1], axis=1, out=new_group[1:])
    if nan is not None:
        # A NaN equals nothing, itself included: each element (slice) with one starts a group.
        new_group |= nan.any(axis=1)[order]
    starts = np.flatnonzero(new_group)
    first = order[starts]
    counts = np.diff(np.append(starts, count))
    group = np.cumsum(new_group) - 1
    inverse = np.empty(count, dtype=np.int64)
    inverse[order] = group
    if not plan.sorted:
        # Unique ones in the order they first occur.
        by_occurrence = np.argsort(first, kind="stable")
        rank = np.empty_like(by_occurrence)
        rank[by_occurrence] = np.arange(by_occurrence.size)
        first, counts, inverse = first[by_occurrence], counts[by_occurrence], rank[inverse]
    if plan.axis is None:
        values = np.take(as_raw(data).reshape(-1), first).view(data.dtype)
    else:
        values = np.take(as_raw(data), first, axis=plan.axis).view(data.dtype)
    return (
        values,
        first.astype(plan.index_type),
        inverse.astype(plan.index_type),
        counts.astype(plan.count_type),
    )


def unique_workspace_bytes(data: npt.NDArray[Any], plan: UniquePlan) -> int:
    """The most bytes ``unique`` holds beyond its input and its outputs' bounds: 8-byte keys
    (float64 values, their bits and the NaN marks too) for every element, and a handful of
    8-byte arrays per compared element or slice (order, groups, inverse, firsts, counts)."""
    return 32 * int(data.size) + 8 * 8 * plan.compared
