"""ScatterElementsUpdate-12 (and -3): a copy of ``data`` with each element of ``updates`` put,
or reduced, at its own position with the index along ``axis`` taken from ``indices``."""

import functools
import math
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    ALL_TYPES,
    BOOL,
    INTEGER_TYPES,
    JSON_LIKE_DATA,
    LIMIT_SCALAR,
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


def scatter_elements_update_workspace(arrays: Arrays, attributes: Attributes) -> int:
    """The most bytes the kernel holds beyond inputs and output: indices as int64 and each
    update's position (16 bytes an update), the sort of the positions (16 more), and for a
    reduction the updates in native order with, for min and max, the sequences the fold
    builds (four arrays of the updates' size and their marks)."""
    updates = arrays["updates"]
    base = 40 * updates.size
    if attributes.get("reduction", "none") == "none":
        return base + updates.nbytes
    return base + 5 * updates.nbytes + 40 * updates.size + arrays["data"].nbytes // 8


# ------------------------------------------------------------------------------------------------
# The declarations: ScatterElementsUpdate-12 (OP) and -3 (OLDER)


def _planner(version: int) -> Any:
    def plan(arrays: Arrays, attributes: Attributes) -> Plan:
        data, indices, updates = arrays["data"], arrays["indices"], arrays["updates"]
        checked = scatter_elements_update_plan(
            data,
            indices,
            updates,
            arrays["axis"],
            attributes.get("reduction", "none"),
            attributes.get("use_init_val", True),
            version,
        )
        return Plan(
            checked.output_shape,
            functools.partial(scatter_elements_update_planned, data, indices, updates, checked),
        )

    return plan


def _inputs(version: int) -> tuple[Input, ...]:
    bounds = "[-d, d - 1] (negative values count from the end)" if version == 12 else "[0, s - 1]"
    dims = (
        "less or equal to data's, except along axis (which may be greater)"
        if version == 12
        else "less or equal to data's"
    )
    data = data_input("copy and update")
    if version == 3:
        data = Input(
            "data",
            "The tensor to copy and update (input 1, type T: any numeric type).",
            "T: any numeric type (bool is not one). JSON form takes its type from `dtype`.",
            tuple(name for name in ALL_TYPES if name != "bool"),
            json_form=JSON_LIKE_DATA,
        )
    return (
        data,
        Input(
            "indices",
            "The index along axis of each update (input 2, type T_IND).",
            f"T_IND: any integer type; the rank of data; each value within {bounds} along "
            "axis. JSON form is int64.",
            INTEGER_TYPES,
        ),
        Input(
            "updates",
            "The updates (input 3, type T, the type of data).",
            f"T: the type of data; the shape of indices, each dimension {dims}. JSON form "
            "takes its type from `dtype`, like data.",
            data.element_types,
            json_form=JSON_LIKE_DATA,
        ),
        Input(
            "axis",
            "The axis to scatter along (input 4, type T_AXIS).",
            "T_AXIS: any integer type; a scalar or a 1D tensor of one element in [-r, r - 1]. "
            "JSON form is int64.",
            INTEGER_TYPES,
            rank="0 or 1",
            limit=LIMIT_SCALAR,
        ),
    )


# fmt: off
_EXAMPLES_12: list[tuple[str, str, dict[str, Any], Any]] = [
    ("example_1", "ScatterElementsUpdate-12 Example 1: sum with data's values, negative indices",
     {"data": [2, 3, 4, 6], "indices": [1, 0, 0, -2, -1, 2], "updates": [10, 20, 30, 40, 70, 60],
      "axis": [0], "reduction": "sum", "use_init_val": True, "dtype": "float32"},
     [52.0, 13.0, 104.0, 76.0]),
    ("example_2", "ScatterElementsUpdate-12 Example 2: sum without data's values",
     {"data": [2, 3, 4, 6], "indices": [1, 0, 0, 2, 3, 2], "updates": [10, 20, 30, 40, 70, 60],
      "axis": [0], "reduction": "sum", "use_init_val": False, "dtype": "float32"},
     [50.0, 10.0, 100.0, 70.0]),
    ("example_3", "ScatterElementsUpdate-12 Example 3: none along axis 1",
     {"data": [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], "indices": [[1, 2], [0, 3]],
      "updates": [[11, 12], [13, 14]], "axis": [1], "reduction": "none", "dtype": "int32"},
     [[0, 11, 12, 0], [13, 0, 0, 14], [0, 0, 0, 0]]),
    ("example_4", "ScatterElementsUpdate-12 Example 4: sum along axis 1, a repeated index",
     {"data": [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]], "indices": [[1, 1], [0, 3]],
      "updates": [[11, 12], [13, 14]], "axis": [1], "reduction": "sum", "dtype": "int32"},
     [[1, 24, 1, 1], [14, 1, 1, 15], [1, 1, 1, 1]]),
    ("example_5", "ScatterElementsUpdate-12 Example 5: prod along axis 1",
     {"data": [[2, 2, 2, 2], [2, 2, 2, 2], [2, 2, 2, 2]], "indices": [[1, 1], [0, 3]],
      "updates": [[11, 12], [13, 14]], "axis": [1], "reduction": "prod", "dtype": "int32"},
     [[2, 264, 2, 2], [26, 2, 2, 28], [2, 2, 2, 2]]),
    ("mean_rounds_down", "ScatterElementsUpdate-12 integer mean by the text (not a spec "
     "example): (-3 + 0) / 2 rounds down to -2",
     {"data": [-3, 5], "indices": [0], "updates": [0], "axis": 0, "reduction": "mean",
      "dtype": "int32"},
     [-2, 5]),
]
_EXAMPLES_3: list[tuple[str, str, dict[str, Any], Any]] = [
    ("axis_1", "ScatterElementsUpdate-3 by its 3D formula along axis 1 (its only example gives "
     "shapes, 1000x256x7x7, without values)",
     {"data": [[[0, 0], [0, 0], [0, 0]]], "indices": [[[2, 0]]], "updates": [[[5, 6]]],
      "axis": 1, "dtype": "int32"},
     [[[0, 6], [0, 0], [5, 0]]]),
]
# fmt: on

_DECISIONS = (
    "ScatterElementsUpdate-12 repeated indices: the spec leaves the order undefined; updates "
    "are applied in their row-major order: with none the last one wins, reductions fold in "
    "that order.",
    "ScatterElementsUpdate-12 reductions compute in the element type, one update at a time: "
    "float16/bfloat16 round after each step, integers wrap; bool sum and prod are OR and AND "
    "(as the spec says), min and max are AND and OR. A NaN result of arithmetic carries the "
    "payload the CPU's arithmetic gives.",
    "ScatterElementsUpdate-12 min and max are the spec's C++ min(updates[i], output[...]) and "
    "max(...): std::min(a, b) is a unless b < a, so the element there stays only when strictly "
    "less (max: greater) than the update: a NaN update is taken, a NaN there is replaced by the "
    "next update, and of +0.0 and -0.0 the update is taken.",
    "ScatterElementsUpdate-12 mean: the sum (in the element type, in order, from data's element "
    "when use_init_val) divided by the count of the values summed; floats rounded once to the "
    "element type, integers rounded down (towards negative infinity) as the spec says.",
    "ScatterElementsUpdate-12 use_init_val false: data's element takes no part in the "
    "reduction at a position an update reaches (the first update starts it, so a -0.0 update "
    "stays -0.0); elements no update reaches keep data's values.",
    "ScatterElementsUpdate-12 mean on bool data: refused (422 naming reduction): the spec has "
    "no implementation of it.",
    "ScatterElementsUpdate-12 out-of-bounds indices (outside [-d, d - 1]) and -3's negative "
    "ones: the spec raises an exception; they are refused 422 naming indices, before anything "
    "is copied.",
    "ScatterElementsUpdate-12 Example 6 gives shapes (1000x256x7x7 data) without values: it is "
    "tested as a plan, not served as an example.",
)
_DISAGREEMENTS = (
    "ScatterElementsUpdate-12 integer mean: the CPU plugin rounds toward zero where the spec "
    "says down: data int32 [-3], indices [0], updates [0], axis 0, reduction mean gives [-1]; "
    "the spec's floor((-3 + 0) / 2) is -2.",
)


_DECISIONS_3 = (
    "ScatterElementsUpdate-3 repeated indices: the spec leaves the order undefined; updates are "
    "applied in their row-major order, the last one wins.",
    "ScatterElementsUpdate-3 negative or out-of-bounds indices (outside [0, s - 1]): the spec "
    "raises an exception; they are refused 422 naming indices, before anything is copied.",
    "ScatterElementsUpdate-3 T is 'any numeric type': bool data is refused (422 naming data).",
    "ScatterElementsUpdate-3 updates: every dimension less or equal to data's (along axis too, "
    "unlike -12).",
    "ScatterElementsUpdate-3's only example gives shapes (1000x256x7x7 data) without values: it "
    "is tested as a plan; /docs shows a small example by the spec's 3D formula instead.",
)


def _declare(version: int, examples: list[tuple[str, str, dict[str, Any], Any]]) -> Op:
    spec = f"ScatterElementsUpdate-{version}"
    attributes = (
        (
            Attribute(
                "reduction",
                "none",
                "The operation between the element there and the update: none (overwrite), "
                "sum, prod (bool: OR, AND), min, max or mean (integers rounded down; not for "
                "bool).",
                choices=REDUCTIONS,
            ),
            Attribute(
                "use_init_val",
                True,
                "Whether data's elements are the initial values of the reductions (no effect "
                "for none).",
                kind=BOOL,
            ),
        )
        if version == 12
        else ()
    )
    what = "reduced into by `reduction`" if version == 12 else "replaced"
    return Op(
        name="scatter_elements_update",
        spec=spec,
        summary=f"{spec}: a copy of data with elements at indices along an axis updated",
        description=f"{spec} over `data`: a copy of `data` where each element of `updates` is "
        f"{what} at its own index, with the index along `axis` taken from `indices` (of the "
        "same shape as `updates`). Send JSON (tensors as nested arrays or base64 .npy) or an "
        ".npz archive.",
        request_doc=f"{spec}: a copy of `data` with `updates` applied at `indices` along `axis`.",
        inputs=_inputs(version),
        attributes=attributes,
        plan=_planner(version),
        workspace=scatter_elements_update_workspace,
        examples={
            name: example(summary, request, output) for name, summary, request, output in examples
        },
        decisions=_DECISIONS if version == 12 else _DECISIONS_3,
        disagreements=_DISAGREEMENTS if version == 12 else (),
    )


OP_3 = _declare(3, _EXAMPLES_3)
#: What app/registry.py collects: the newest version, and the older one it serves.
OP = _declare(12, _EXAMPLES_12)
OLDER: tuple[Op, ...] = (OP_3,)
