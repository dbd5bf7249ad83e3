"""ScatterNDUpdate-15: a copy of ``data`` with the elements or slices at index tuples updated
(replaced, or reduced with the update by sum, sub, prod, min or max).

Long (some 500 lines) because each of the six reductions is computed in the element type, in
the order the spec gives, with its own care for float16, bfloat16, bool and wrapping integers."""

import functools
import math
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    ALL_TYPES,
    INT32_OR_INT64,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Plan,
    data_input,
    example,
)
from app.ops.errors import SpecError
from app.ops.index_rules import (
    check_index_values,
    last_occurrences,
    row_positions,
    sort_by_position,
)
from app.ops.raw import as_raw

REDUCTIONS = ("none", "sum", "sub", "prod", "min", "max")
_INDEX_NUMBERS = frozenset(np.dtype(name).num for name in INT32_OR_INT64)
# Slices are put this many elements at a time (the bound of the selected updates held).
_CHUNK = 1 << 20
# Slices of at least this many bytes are moved whole; shorter ones as one element each of a
# type of their width.
_LARGE_SLICE = 256
_UNITS = {size: np.dtype(f"u{size}") for size in (1, 2, 4, 8)}
# Updates are reduced in rounds (one vectorised step per occurrence) while no position repeats
# more often than this; beyond, by ufunc.at, one update after the other.
_ROUNDS = 16
_BFLOAT16 = np.dtype("bfloat16")


class ScatterNDUpdatePlan(NamedTuple):
    """What the checks of one ScatterNDUpdate found; the output has the shape of data."""

    tuple_length: int
    reduction: str
    negative: bool
    output_shape: tuple[int, ...]


def scatter_nd_update_plan(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    reduction: str = "none",
) -> ScatterNDUpdatePlan:
    """Check the inputs of a ScatterNDUpdate against the spec, before any data is touched."""
    if reduction not in REDUCTIONS:
        raise SpecError(
            "reduction", f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}"
        )
    if indices.dtype.num not in _INDEX_NUMBERS:
        raise SpecError(
            "indices", f"indices must be of type int32 or int64 (T_IND), got {indices.dtype.name}"
        )
    if updates.dtype.newbyteorder("=") != data.dtype.newbyteorder("="):
        raise SpecError(
            "updates",
            f"updates must be of the type of data (T), got {updates.dtype.name} for data of "
            f"{data.dtype.name}",
        )
    rank = data.ndim
    if rank < 1:
        raise SpecError("data", "data must be a tensor of rank r >= 1, got a scalar")
    if indices.ndim < 1:
        raise SpecError("indices", "indices must be a tensor of rank q >= 1, got a scalar")
    k = indices.shape[-1]
    if k > rank:
        raise SpecError(
            "indices",
            f"k = indices.shape[-1] = {k} must be at most r = data.rank = {rank}",
        )
    expected = indices.shape[:-1] + data.shape[k:]
    if updates.shape != expected and not (expected == () and updates.size == 1):
        raise SpecError(
            "updates",
            f"updates must be a tensor of rank r - indices.shape[-1] + q - 1 = {len(expected)} "
            f"and shape indices.shape[:-1] + data.shape[indices.shape[-1]:] = {expected}, got "
            f"shape {updates.shape}",
        )
    negative = check_index_values(
        "indices",
        indices,
        data.shape[:k],
        "all index values i_j must be within bounds",
    )
    return ScatterNDUpdatePlan(k, reduction, negative, data.shape)


def scatter_nd_update(
    data: npt.ArrayLike,
    indices: npt.ArrayLike,
    updates: npt.ArrayLike,
    reduction: str = "none",
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """ScatterNDUpdate-15: a copy of ``data`` with ``out[indices[i]] = f(out[indices[i]],
    updates[i])`` for every tuple ``i`` of ``indices`` (its last dimension), in row-major order.

    ``f`` is the ``reduction``: ``none`` replaces, ``sum``/``sub``/``prod`` compute ``x + y``,
    ``x - y``, ``x * y`` in the element type (for bool: OR, XOR, AND), ``max``/``min`` keep ``y``
    when it is greater/less than ``x`` (so a NaN already there stays, a NaN update is ignored,
    and of two equal zeros the one there stays). ``indices`` (int32 or int64) must be within
    ``[-s_j, s_j - 1]`` (negative values count from the end); anything else is refused.
    """
    data, indices, updates = np.asarray(data), np.asarray(indices), np.asarray(updates)
    plan = scatter_nd_update_plan(data, indices, updates, reduction)
    return scatter_nd_update_planned(data, indices, updates, plan, out)


def scatter_nd_update_planned(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    plan: ScatterNDUpdatePlan,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """``scatter_nd_update`` with the inputs already checked (``plan`` is their plan)."""
    if out is None:
        out = np.empty(plan.output_shape, dtype=data.dtype)
    # A reduction computes in native byte order; none moves the bits as data holds them.
    work = data.dtype if plan.reduction == "none" else data.dtype.newbyteorder("=")
    if not out.flags.c_contiguous or out.dtype != work:
        result = scatter_nd_update_planned(
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
    tuples = math.prod(indices.shape[:-1])
    slice_size = math.prod(data.shape[plan.tuple_length :])
    if tuples == 0 or slice_size == 0:
        return out
    k = plan.tuple_length
    positions = (
        row_positions(indices, data.shape[:k], plan.negative)
        if k
        else np.zeros(tuples, dtype=np.int64)
    )
    slots = math.prod(data.shape[:k])
    if plan.reduction == "none":
        source = as_raw(updates)
        if data.dtype.itemsize > 1 and updates.dtype.isnative != out.dtype.isnative:
            source = source.byteswap()
        _put(as_raw(out).reshape(slots, slice_size), positions, source, tuples, slice_size)
    else:
        values = np.ascontiguousarray(updates, dtype=work).reshape(tuples, slice_size)
        _reduce(out.reshape(slots, slice_size), positions, values, plan.reduction)
    return out


def _put(
    target: npt.NDArray[Any],
    positions: npt.NDArray[np.int64],
    source: npt.NDArray[Any],
    tuples: int,
    slice_size: int,
) -> None:
    """``target[positions[i]] = source[i]`` (raw bits), the last of repeated positions kept."""
    targets, keep = last_occurrences(positions, target.shape[0])
    rows = np.ascontiguousarray(source).reshape(tuples, slice_size)
    unit_bytes = slice_size * target.dtype.itemsize
    if unit_bytes < _LARGE_SLICE:
        unit = _UNITS.get(unit_bytes) or np.dtype(f"V{unit_bytes}")
        into = target.reshape(-1).view(unit)
        taken = rows.reshape(-1).view(unit)
        into[targets] = taken if keep is None else taken[keep]
        return
    step = max(1, _CHUNK // slice_size)
    for first in range(0, targets.size, step):
        chosen = slice(first, first + step)
        target[targets[chosen]] = rows[chosen] if keep is None else rows[keep[chosen]]


def _reduce(
    target: npt.NDArray[Any],
    positions: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    reduction: str,
) -> None:
    """Reduce ``values[i]`` into ``target[positions[i]]`` in the element type, in the order of
    ``i``.

    The updates are taken in rounds: the first update of every position, then the second, and
    so on (a stable sort by position finds them; marks tell first, without a sort, when no
    position repeats), each round one vectorised ``func(x, y)`` over distinct positions. With
    positions repeated more than ``_ROUNDS`` times, sum, sub and prod (and integer min and max)
    go through ``ufunc.at``, which applies the updates one after the other, in order; float min
    and max through ``_reduce_float_extreme``.
    """
    extreme = (target.dtype.kind == "f" or target.dtype == _BFLOAT16) and reduction in (
        "max",
        "min",
    )
    step = (
        _float_step(reduction == "max")
        if extreme
        else _function(reduction, target.dtype.kind == "b")
    )
    with np.errstate(all="ignore"):  # overflow wraps, NaN compares false (bfloat16's warn)
        if _distinct(positions, target.shape[0]):
            # One step, the updates in their own order (no sort, no reordering copy).
            there = target[positions]
            target[positions] = step(there, values, out=there)
            return
        ordered, order = sort_by_position(positions)
        first = np.empty(ordered.size, dtype=bool)
        first[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        rank = np.arange(ordered.size, dtype=np.int64)
        rank -= np.repeat(starts, np.diff(np.append(starts, ordered.size)))
        rounds = int(rank.max()) + 1
        if rounds > _ROUNDS:
            if extreme:
                _reduce_float_extreme(target, positions, values, reduction == "max")
            else:
                _function(reduction, target.dtype.kind == "b").at(target, positions, values)
            return
        for round_number in range(rounds):
            chosen = rank == round_number
            places, which = ordered[chosen], order[chosen]
            there = target[places]
            target[places] = step(there, values[which], out=there)


def _distinct(positions: npt.NDArray[np.int64], slots: int) -> bool:
    """Whether no position repeats, told by one mark a slot (when there are at most 16 slots a
    position; else False, and the sort tells)."""
    if positions.size < 2:
        return True
    if slots > 16 * positions.size:
        return False
    marks = np.zeros(slots, dtype=bool)
    marks[positions] = True
    return int(np.count_nonzero(marks)) == positions.size


def _float_step(greatest: bool) -> Any:
    """The spec's ``max(x, y)`` / ``min(x, y)`` (Python's): ``y`` only when strictly greater /
    less than ``x``: a NaN there stays, a NaN update is ignored, of two zeros the one there
    stays."""

    def step(x: npt.NDArray[Any], y: npt.NDArray[Any], out: npt.NDArray[Any]) -> Any:
        return np.where(y > x if greatest else y < x, y, x)

    return step


def _function(reduction: str, boolean: bool) -> np.ufunc:
    """The ufunc of ``func(x, y)``: for bool, sum, sub and prod are OR, XOR and AND, and min and
    max are AND and OR (False < True), which NumPy's add, multiply, minimum and maximum are."""
    if reduction == "sub":
        return np.logical_xor if boolean else np.subtract
    return {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]


def _reduce_float_extreme(
    target: npt.NDArray[Any],
    positions: npt.NDArray[np.int64],
    values: npt.NDArray[Any],
    greatest: bool,
) -> None:
    """``x = y if y > x else x`` (``<`` for min) over the updates in order, as the spec's
    ``max``/``min`` do, without a loop over them.

    The fold keeps ``x`` when it is NaN (no comparison with NaN holds) and ignores NaN updates;
    otherwise it ends on the extreme of the updates if that beats ``x``, and of several updates
    equal to it on the first one (only +0.0 and -0.0 are equal with other bits).
    """
    places, which = np.unique(positions, return_inverse=True)
    neutral = np.array(-np.inf if greatest else np.inf).astype(target.dtype)
    extreme = np.full((places.size, target.shape[1]), neutral)
    # NaN updates are ignored: they become the neutral infinity (never greater, or less, than
    # anything). (np.fmax.at and np.fmin.at themselves mishandle NaN in NumPy 2.4.)
    candidates = np.where(np.isnan(values), neutral, values)
    (np.maximum if greatest else np.minimum).at(extreme, which, candidates)
    current = target[places]
    better = extreme > current if greatest else extreme < current
    result = np.where(better, extreme, current)
    zeros = better & (extreme == 0)
    if zeros.any():
        # The first update equal to zero, in order, at each such element: its sign is kept.
        hits = (values == 0) & zeros[which]
        flat = np.flatnonzero(hits)
        keys = which[flat // target.shape[1]] * target.shape[1] + flat % target.shape[1]
        _, first = np.unique(keys, return_index=True)
        result.reshape(-1)[keys[first]] = values.reshape(-1)[flat[first]]
    target[places] = result


def scatter_nd_update_workspace(arrays: Arrays, attributes: Attributes) -> int:
    """The most bytes ``scatter_nd_update`` holds beyond inputs and output: the indices as int64
    with their checks and positions (about 40 bytes an index value), and for a reduction the
    updates in native order with, for min and max, three arrays of the updates' size (the
    extremes, the elements there, the result); for none, the updates byte-swapped when they
    come in the other order."""
    indices, updates = arrays["indices"], arrays["updates"]
    base = indices.size * 40 + 16 * math.prod(indices.shape[:-1])
    if attributes.get("reduction", "none") == "none":
        return base + (0 if updates.dtype.isnative else updates.nbytes)
    return base + updates.nbytes * 4 + updates.size * 2


# ------------------------------------------------------------------------------------------------
# The declaration


def _plan_scatter_nd_update(arrays: Arrays, attributes: Attributes) -> Plan:
    data, indices, updates = arrays["data"], arrays["indices"], arrays["updates"]
    plan = scatter_nd_update_plan(data, indices, updates, attributes["reduction"])
    return Plan(
        plan.output_shape,
        functools.partial(scatter_nd_update_planned, data, indices, updates, plan),
    )


_FOUR = [1, 2, 3, 4]
_REPEATED = [[0], [2], [-3], [-3], [0]]
_TENS = [10, 20, 30, 40, 50]
_SLABS_DATA = [
    [[1, 2, 3, 4], [5, 6, 7, 8], [8, 7, 6, 5], [4, 3, 2, 1]],
    [[1, 2, 3, 4], [5, 6, 7, 8], [8, 7, 6, 5], [4, 3, 2, 1]],
    [[8, 7, 6, 5], [4, 3, 2, 1], [1, 2, 3, 4], [5, 6, 7, 8]],
    [[8, 7, 6, 5], [4, 3, 2, 1], [1, 2, 3, 4], [5, 6, 7, 8]],
]
_SLABS_UPDATES = [
    [[5, 5, 5, 5], [6, 6, 6, 6], [7, 7, 7, 7], [8, 8, 8, 8]],
    [[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3], [4, 4, 4, 4]],
]

OP = Op(
    name="scatter_nd_update",
    spec="ScatterNDUpdate-15",
    summary="ScatterNDUpdate-15: a copy of data with elements or slices at index tuples updated",
    description="ScatterNDUpdate-15 over `data`: a copy of `data` where, for each index tuple "
    "along the last dimension of `indices` (in row-major order), the element or slice it names "
    "becomes `f(x, update)` by `reduction`: none (the update), sum, sub, prod (for bool: OR, "
    "XOR, AND), min, max. `updates` has the shape `indices.shape[:-1] + "
    "data.shape[indices.shape[-1]:]`. Indices must be within [-s_j, s_j - 1]. Send JSON (tensors "
    "as nested arrays or base64 .npy) or an .npz archive.",
    request_doc="ScatterNDUpdate-15: a copy of `data` with `updates` applied at `indices` by "
    "`reduction`.",
    inputs=(
        data_input("copy and update"),
        Input(
            "indices",
            "Index tuples along the last dimension (input 2, type T_IND).",
            "T_IND: int32 or int64, rank q >= 1, k = indices.shape[-1] at most r; every value "
            "i_j within bounds [-s_j, s_j - 1] where s_j = data.shape[j] (negative values count "
            "from the end). JSON form is int64.",
            INT32_OR_INT64,
            rank=">= 1",
        ),
        Input(
            "updates",
            "The updates (input 3, type T, the type of data).",
            "T: the type of data, rank r - indices.shape[-1] + q - 1, shape indices.shape[:-1] + "
            "data.shape[indices.shape[-1]:] (a tensor of one element where that rank is 0). "
            "JSON form takes its type from `dtype`, like data.",
            ALL_TYPES,
        ),
    ),
    attributes=(
        Attribute(
            "reduction",
            "none",
            "The operation between the element of data and the update: none (overwrite), sum, "
            "sub, prod (for bool: OR, XOR, AND), min or max.",
            choices=REDUCTIONS,
        ),
    ),
    plan=_plan_scatter_nd_update,
    workspace=scatter_nd_update_workspace,
    examples={
        "example_1_snippet": example(
            "ScatterNDUpdate-15 first text example, reduction none. The spec prints [1, 11, 3, "
            "10, 4, 6, 13, 12]; by its text and formula data[4] is set to 9 by [4] and then to "
            "14 by [-4] (= 4): the 5th element is 14",
            {
                "data": [1, 2, 3, 4, 5, 6, 7, 8],
                "indices": [[4], [3], [1], [7], [-2], [-4]],
                "updates": [9, 10, 11, 12, 13, 14],
            },
            [1, 11, 3, 10, 14, 6, 13, 12],
        ),
        "example_2_slices": example(
            "ScatterNDUpdate-15 second text example: two 4x4 slices, reduction none",
            {"data": _SLABS_DATA, "indices": [[0], [2]], "updates": _SLABS_UPDATES},
            [_SLABS_UPDATES[0], _SLABS_DATA[1], _SLABS_UPDATES[1], _SLABS_DATA[3]],
        ),
        "example_1": example(
            "ScatterNDUpdate-15 Example 1 (float32, reduction none; indices as the 5x1 tensor "
            "the values mean). The spec prints [50, 20, 20, 4]; by its formula data[1] is set "
            "to 30 then 40 by the two [-3]: [50, 40, 20, 4]",
            {"data": _FOUR, "indices": _REPEATED, "updates": _TENS, "dtype": "float32"},
            [50.0, 40.0, 20.0, 4.0],
        ),
        "example_2": example(
            "ScatterNDUpdate-15 Example 2 (float16, reduction sum)",
            {
                "data": _FOUR,
                "indices": _REPEATED,
                "updates": _TENS,
                "reduction": "sum",
                "dtype": "float16",
            },
            [61.0, 72.0, 23.0, 4.0],
        ),
        "example_3": example(
            "ScatterNDUpdate-15 Example 3 (int32, reduction sub)",
            {
                "data": _FOUR,
                "indices": _REPEATED,
                "updates": _TENS,
                "reduction": "sub",
                "dtype": "int32",
            },
            [-59, -68, -17, 4],
        ),
        "example_4": example(
            "ScatterNDUpdate-15 Example 4 (float32, reduction prod). The spec prints [500, 3600, "
            "40, 4]; by its formula data[1] = 2 * 30 * 40 = 2400 and data[2] = 3 * 20 = 60",
            {
                "data": _FOUR,
                "indices": _REPEATED,
                "updates": _TENS,
                "reduction": "prod",
                "dtype": "float32",
            },
            [500.0, 2400.0, 60.0, 4.0],
        ),
        "bool_sub_is_xor": example(
            "ScatterNDUpdate-15 on bool data, reduction sub: logical XOR (sum is OR, prod AND)",
            {
                "data": [False, True, False, True],
                "indices": [[0], [1], [2], [2]],
                "updates": [True, True, True, True],
                "reduction": "sub",
            },
            [True, False, False, True],
        ),
    },
    decisions=(
        "ScatterNDUpdate-15 repeated indices: the spec leaves the order undefined; updates are "
        "applied in the row-major order of indices' tuples, as its NumPy snippet iterates "
        "(np.ndindex): with none the last one wins, reductions fold in that order.",
        "ScatterNDUpdate-15 reductions compute in the element type, one step at a time, as the "
        "snippet's func(x, y): float16/bfloat16 sums round to the type after each addition; "
        "integers wrap around; a NaN result carries whatever payload the CPU's arithmetic "
        "gives.",
        "ScatterNDUpdate-15 min/max are the snippet's Python min/max(x, y): y replaces x only "
        "when strictly less/greater, so a NaN already in data stays, a NaN update is ignored, "
        "and of +0.0 and -0.0 the one first there stays.",
        "ScatterNDUpdate-15 bool: sum, sub, prod are OR, XOR, AND (as the spec says); min and "
        "max are AND and OR (False < True).",
        "ScatterNDUpdate-15 Example 1 (XML) gives indices as a 5-element 1D tensor, which "
        "would make k = 5 > r = 1; it is read as the 5x1 tensor its values mean.",
        "ScatterNDUpdate-15 examples that contradict the text: the first snippet example (5th "
        "element 14, not 4), Example 1 ([50, 40, 20, 4], not [50, 20, 20, 4]) and Example 4 "
        "([500, 2400, 60, 4], not [500, 3600, 40, 4]); the text's answers are served and "
        "tested.",
        "ScatterNDUpdate-15 out-of-bounds indices: the spec raises an exception; they are "
        "refused with a 422 naming `indices`, before anything is copied.",
    ),
    disagreements=(
        "ScatterNDUpdate-15 float16 sums: the CPU plugin accumulates in float32 and rounds "
        "once: data float16 [1], indices [[0], [0], [0]], updates [0.0004] * 3, sum gives "
        "[1.001]; computed in float16 as the spec's snippet does, 1 + 0.0004 rounds back to 1 "
        "each time: [1]. bfloat16 likewise.",
        "ScatterNDUpdate-15 float64 goes through float32: data [0.1], indices [[0]], updates "
        "[1e-17], sum gives 0.10000000149011612 (0.1 rounded to float32) instead of 0.1.",
        "ScatterNDUpdate-15 int64/uint64 (and uint32 min/max) are narrowed to 32 bits: data "
        "int64 [2**40], indices [[0]], updates [3], prod gives [0] instead of [3298534883328].",
        "ScatterNDUpdate-15 bool sub is not XOR: data [False, True, False, True], indices "
        "[[0], [1], [2], [2]], updates [True] * 4, sub gives [True, False, True, True] instead "
        "of [True, False, False, True].",
    ),
)


# ------------------------------------------------------------------------------------------------
# The older version: ScatterNDUpdate-3 (no reduction, no negative indices)


def _plan_scatter_nd_update_3(arrays: Arrays, attributes: Attributes) -> Plan:
    data, indices, updates = arrays["data"], arrays["indices"], arrays["updates"]
    plan = scatter_nd_update_plan(data, indices, updates, "none")
    if plan.negative:
        raise SpecError(
            "indices",
            "ScatterNDUpdate-3: every index value i_j must be within [0, s_j - 1] where s_j = "
            "data.shape[j]; a negative index is ScatterNDUpdate-15's",
        )
    return Plan(
        plan.output_shape,
        functools.partial(scatter_nd_update_planned, data, indices, updates, plan),
    )


OP_3 = Op(
    name="scatter_nd_update",
    spec="ScatterNDUpdate-3",
    summary="ScatterNDUpdate-3: a copy of data with elements or slices at index tuples replaced",
    description="ScatterNDUpdate-3 over `data`: a copy of `data` where the element or slice each "
    "index tuple (along the last dimension of `indices`) names becomes its update; `updates` has "
    "the shape `indices.shape[:-1] + data.shape[indices.shape[-1]:]`. Indices must be within "
    "[0, s_j - 1] (a negative one is refused, 422); no reduction.",
    request_doc="ScatterNDUpdate-3: a copy of `data` with `updates` written at `indices`.",
    inputs=(
        data_input("copy and update"),
        Input(
            "indices",
            "Index tuples along the last dimension (input 2, type T_IND).",
            "T_IND: int32 or int64, rank q >= 1, k = indices.shape[-1] at most r; every value "
            "i_j within bounds [0, s_j - 1] where s_j = data.shape[j]. JSON form is int64.",
            INT32_OR_INT64,
            rank=">= 1",
        ),
        OP.inputs[2],
    ),
    plan=_plan_scatter_nd_update_3,
    workspace=scatter_nd_update_workspace,
    examples={
        "example_1": example(
            "ScatterNDUpdate-3 Example 1: four single elements",
            {
                "data": [1, 2, 3, 4, 5, 6, 7, 8],
                "indices": [[4], [3], [1], [7]],
                "updates": _TENS[:4],
            },
            [1, 30, 3, 20, 10, 6, 7, 40],
        ),
        "example_1_spec_values": example(
            "ScatterNDUpdate-3 Example 1 with the spec's updates [9, 10, 11, 12]",
            {
                "data": [1, 2, 3, 4, 5, 6, 7, 8],
                "indices": [[4], [3], [1], [7]],
                "updates": [9, 10, 11, 12],
            },
            [1, 11, 3, 10, 9, 6, 7, 12],
        ),
        "example_2": example(
            "ScatterNDUpdate-3 Example 2: two 4x4 slices",
            {"data": _SLABS_DATA, "indices": [[0], [2]], "updates": _SLABS_UPDATES},
            [_SLABS_UPDATES[0], _SLABS_DATA[1], _SLABS_UPDATES[1], _SLABS_DATA[3]],
        ),
    },
    decisions=(
        "ScatterNDUpdate-3, duplicate index tuples (the spec: the result is undefined): the "
        "updates apply in row-major order of indices, the last one stays, as ScatterNDUpdate-15 "
        "with reduction none; the answer is the same on every way in.",
        "ScatterNDUpdate-3, a negative index: refused (422, naming indices); the spec's bounds "
        "are [0, s_j - 1].",
    ),
    disagreements=(
        "ScatterNDUpdate-3 on the CPU plugin: a negative index counts from the end (as "
        "ScatterNDUpdate-15's); the spec allows none, and the service refuses it.",
    ),
)

#: The older version served beside ScatterNDUpdate-15 (the registry collects it).
OLDER: tuple[Op, ...] = (OP_3,)
