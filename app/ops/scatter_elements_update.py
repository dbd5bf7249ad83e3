"""ScatterElementsUpdate-12 (and -3): a copy of ``data`` with each element of ``updates`` put,
or reduced, at its own position with the index along ``axis`` taken from ``indices``."""

import functools
import math
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops import loops, numpy_loops
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


class ScatterElementsPlan(NamedTuple):
    """What the checks of one ScatterElementsUpdate found; the output has the shape of data."""

    axis: int
    reduction: str
    use_init_val: bool
    output_shape: tuple[int, ...]


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


def scatter_table(indices_shape: tuple[int, ...], shape: tuple[int, ...]) -> npt.NDArray[np.int64]:
    """The loops' table: the updates' shape (indices'), then the output's strides (elements,
    C order)."""
    strides = [math.prod(shape[dim + 1 :]) for dim in range(len(shape))]
    return np.array([*indices_shape, *strides], dtype=np.int64)


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
    # The loops read the indices as int64 (the checks let no value past int64's range through).
    along = np.ascontiguousarray(indices, dtype=np.int64).reshape(-1)
    table = scatter_table(indices.shape, data.shape)
    size = data.shape[plan.axis]
    flat = out.reshape(-1)
    if plan.reduction == "none":
        source = as_raw(np.ascontiguousarray(updates, dtype=out.dtype)).reshape(-1)
        loops.scatter_put(as_raw(flat), along, source, table, plan.axis, size)
        return out
    values = np.ascontiguousarray(updates, dtype=work).reshape(-1)
    kind = _kind(work)
    code = numpy_loops.SCATTER_REDUCTIONS.index(plan.reduction)
    if kind:  # float16 and bfloat16 as their bits
        flat, values = as_raw(flat), as_raw(values)
    arguments = (along, values, table, plan.axis, size, code, int(plan.use_init_val), kind)
    if _numpy_only(updates.size):
        nothing = np.zeros(0, dtype=np.uint8)
        numpy_loops.scatter_reduce(flat, *arguments, nothing, nothing.view(np.uint32))
        return out
    fresh = not plan.use_init_val and plan.reduction != "mean"
    # A mark a position (use_init_val false) and a count a position (mean): the loop's, sized
    # to the output (the stand-ins sort the positions instead and read neither).
    seen = np.zeros((flat.size + 7) // 8 if fresh else 0, dtype=np.uint8)
    counts = np.zeros(flat.size if plan.reduction == "mean" else 0, dtype=np.uint32)
    loops.scatter_reduce(flat, *arguments, seen, counts)
    return out


def _kind(dtype: np.dtype[Any]) -> int:
    """``loops.scatter_reduce``'s kind of ``dtype``: 1 float16, 2 bfloat16, else 0."""
    return {"float16": 1, "bfloat16": 2}.get(dtype.name, 0)


def _numpy_only(updates: int) -> bool:
    """Whether a reduction takes NumPy's way whether or not the loops are compiled: with more
    updates than the compiled loop's uint32 count holds."""
    return updates >= _MOST_COUNTED


#: The compiled loop counts a position's updates in a uint32.
_MOST_COUNTED = 2**32 - 1
#: The compiled loops' positions of a chunk of updates (compiled.SCATTER_CHUNK, 8 bytes each)
#: and their multi-index (a dimension at most 64).
_CHUNK_BYTES = 8 * 4096 + 8 * 65


def scatter_elements_update_workspace(arrays: Arrays, attributes: Attributes) -> int:
    """The most bytes the kernel holds beyond inputs and output: indices as int64 (8 bytes an
    update), updates in native order, C-ordered (their size), a mark a position of the output
    when use_init_val is false (a bit) and a count a position for mean (4 bytes), and the
    loop's chunk of positions. NumPy's way (the stand-ins while numba compiles, at most
    CHEAP_SCATTER_UPDATES updates; always past 2**32 - 2 of them) holds more an update: each
    one's position and the sort of the positions (32 bytes), and for a reduction the arrays of
    ``np.unique`` and, for min and max, the sequences the fold builds (four arrays of the
    updates' size and their marks)."""
    updates, data = arrays["updates"], arrays["data"]
    reduction = attributes.get("reduction", "none")
    positions = data.size
    marks = 0
    if reduction == "mean":
        marks = 4 * positions
    elif reduction != "none" and not attributes.get("use_init_val", True):
        marks = positions // 8 + 1
    compiled_way = 8 * updates.size + updates.nbytes + marks + _CHUNK_BYTES
    numpy_way = compiled_way + 32 * updates.size
    if reduction != "none":
        numpy_way += 4 * updates.nbytes + 56 * updates.size
    if numpy_loops.scatter_is_cheap(updates) or _numpy_only(updates.size):
        return numpy_way
    return compiled_way


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
    "payload the CPU's arithmetic gives: one NaN operand, its payload (quieted); two, the "
    "update's for sum, and for prod the element's (float32, float64) or the update's (float16, "
    "bfloat16); an invalid operation (inf - inf, 0 * inf), the CPU's default NaN.",
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
