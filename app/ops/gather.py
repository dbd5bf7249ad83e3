"""Gather-8: take slices of a tensor along one axis at the given indices, batch by batch."""

import functools
import math
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops import loops
from app.ops.declaration import (
    INTEGER_TYPES,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Plan,
    Planner,
    data_input,
    example,
)
from app.ops.errors import SpecError
from app.ops.index_rules import prefetch_line
from app.ops.raw import as_raw, into_c_ordered, is_integer_type

_BYTE, _WORD = np.dtype(np.uint8), np.dtype(np.uint64)
# The signed integer type of each width: unsigned indices are read through it.
_SIGNED = {size: np.dtype(f"i{size}") for size in (4, 8)}


class GatherPlan(NamedTuple):
    """The normalised attributes of one Gather and the shape of its output."""

    axis: int
    batch_dims: int
    output_shape: tuple[int, ...]


def gather_plan(
    data_shape: tuple[int, ...],
    indices_shape: tuple[int, ...],
    indices_dtype: np.dtype[Any],
    axis: npt.ArrayLike,
    batch_dims: int = 0,
) -> GatherPlan:
    """Check the inputs of a Gather against the spec, before any data is touched.

    Returns the normalised ``axis`` and ``batch_dims`` and the output shape
    ``data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis + 1:]``, so that a caller
    can size (or refuse) the output before it exists.
    """
    if not is_integer_type(indices_dtype):
        raise SpecError(
            "indices", f"indices must be of an integer type (T_IND), got {indices_dtype.name}"
        )
    axis = np.asarray(axis)
    if not is_integer_type(axis.dtype):
        raise SpecError("axis", f"axis must be of an integer type (T_AXIS), got {axis.dtype.name}")
    if axis.shape not in ((), (1,)):
        raise SpecError(
            "axis",
            f"axis must be a scalar or a 1D tensor with one element, got shape {axis.shape}",
        )
    if type(batch_dims) is not int:
        if isinstance(batch_dims, bool) or not isinstance(batch_dims, int | np.integer):
            raise SpecError("batch_dims", f"batch_dims must be an integer, got {batch_dims!r}")
        batch_dims = int(batch_dims)
    data_rank = len(data_shape)
    indices_rank = len(indices_shape)

    axis_value = int(axis.item())
    if not -data_rank <= axis_value < data_rank:
        allowed = (
            f"[{-data_rank}, {data_rank - 1}]" if data_rank else "none: data must not be a scalar"
        )
        raise SpecError(
            "axis",
            f"axis = {axis_value} is out of range for data of rank {data_rank} "
            f"(allowed values: {allowed})",
        )
    normal_axis = axis_value + data_rank if axis_value < 0 else axis_value

    limit = min(data_rank, indices_rank)
    if not -limit <= batch_dims <= limit:
        raise SpecError(
            "batch_dims",
            f"batch_dims = {batch_dims} is out of range [{-limit}, {limit}] "
            f"(min(data.rank, indices.rank) = min({data_rank}, {indices_rank}))",
        )
    normal_batch_dims = batch_dims + indices_rank if batch_dims < 0 else batch_dims
    if normal_batch_dims > normal_axis:
        raise SpecError(
            "batch_dims",
            f"batch_dims = {batch_dims} (normalised: {normal_batch_dims}) must not be greater "
            f"than axis = {axis_value} (normalised: {normal_axis})",
        )
    if normal_batch_dims and data_shape[:normal_batch_dims] != indices_shape[:normal_batch_dims]:
        raise SpecError(
            "indices",
            f"the first batch_dims = {normal_batch_dims} dimensions of data and indices must be "
            f"equal, got data of shape {data_shape} and indices of shape {indices_shape}",
        )
    output_shape = (
        data_shape[:normal_axis] + indices_shape[normal_batch_dims:] + data_shape[normal_axis + 1 :]
    )
    return GatherPlan(normal_axis, normal_batch_dims, output_shape)


def gather(
    data: npt.ArrayLike,
    indices: npt.ArrayLike,
    axis: npt.ArrayLike,
    batch_dims: int = 0,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """Gather-8: the slices of ``data`` along ``axis`` at ``indices``, per batch.

    ``indices`` may be of any integer type and shape (a scalar too); values in
    ``[-data.shape[axis], data.shape[axis] - 1]`` select a slice, negative ones counting from the
    end, and any value outside that range yields a slice of zeros. ``axis`` is a scalar or a
    one-element 1D tensor of any integer type. The first ``batch_dims`` dimensions of ``data`` and
    ``indices`` are batches gathered independently; a negative ``batch_dims`` counts from
    ``indices.rank``. ``out``, if given, is an array of the output's shape and ``data``'s item
    size that receives the output.
    """
    data = np.asarray(data)
    indices = np.asarray(indices)
    plan = gather_plan(data.shape, indices.shape, indices.dtype, axis, batch_dims)
    return gather_planned(data, indices, plan, out)


def gather_planned(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    plan: GatherPlan,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """``gather`` with the inputs already checked: ``plan`` is ``gather_plan``'s for them."""
    return into_c_ordered(
        out,
        plan.output_shape,
        data.dtype,
        lambda target: _gather_into(as_raw(data), indices, plan, as_raw(target)),
    )


def _gather_into(
    source: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    plan: GatherPlan,
    out: npt.NDArray[Any],
) -> None:
    """Gather into ``out`` (C-contiguous, not empty) by the compiled loop, which reads each index
    as it goes (negative ones from the end, out-of-range ones as zeros): no positions, no masks."""
    axis, batch = plan.axis, plan.batch_dims
    shape = source.shape
    length = shape[axis]
    if length == 0:
        # Every index is outside the empty range [0, -1], so every output element is a zero.
        out.fill(0)
        return
    batches = math.prod(shape[:batch]) if batch else 1
    outer = math.prod(shape[batch:axis])
    inner = math.prod(shape[axis + 1 :])
    count = indices.size // batches
    flat_indices, wrap = _signed_indices(indices, length)
    itemsize = source.dtype.itemsize
    # ravel: a view of a C-contiguous input, a C-ordered copy of a strided one.
    flat_source, flat_out = source.ravel(), out.ravel()
    if inner > 1:
        # Slices: moved as bytes (8-byte words when they are whole words).
        unit = _WORD if (inner * itemsize) % 8 == 0 else _BYTE
        loops.take_slices(
            flat_source.view(unit), flat_indices, flat_out.view(unit),
            batches, outer, length, count, inner * itemsize // unit.itemsize, wrap,
        )  # fmt: skip
        return
    loops.take(
        flat_source, flat_indices, flat_out,
        batches, outer, length, count, wrap, prefetch_line(length, count, itemsize),
    )  # fmt: skip


def _signed_indices(indices: npt.NDArray[Any], length: int) -> tuple[npt.NDArray[Any], int]:
    """The indices, flat, as int32 or int64 (in native byte order), and what a negative value of
    that view needs added to become the position it means.

    A signed type's negative index counts from the end: ``length``. A uint32 value with its top
    bit set reads as negative in the int32 view: adding ``2**32`` gives the value back (it is
    compared as unsigned: ``2**32 - 1`` is out of range, not -1); uint64 values of 2**63 and
    more, out of range of any tensor, stay negative in the int64 view, out of range: nothing is
    added. 8- and 16-bit indices, and indices in the other byte order, are first converted to
    int32 or int64 (a copy: ``gather_workspace`` counts it).
    """
    dtype = indices.dtype
    itemsize = dtype.itemsize
    if itemsize < 4:
        return indices.astype(np.int32).ravel(), length
    if not dtype.isnative:
        indices = indices.astype(dtype.newbyteorder("="))
    flat = indices.ravel()
    if dtype.kind == "i":
        return flat, length
    return flat.view(_SIGNED[itemsize]), (1 << 32 if itemsize == 4 else 0)


#: The indices the compiled loop reads into positions at a time for elements of 1 and 2 bytes
#: (``compiled.TAKE_CHUNK``, 4 bytes each; a test holds the two equal: the compiled module is not
#: imported here).
TAKE_CHUNK = 1 << 16
#: The longest row of bytes the compiled loop takes by a table of its rows' columns, 8 bytes an
#: element (``compiled._COLUMNS_LONGEST``, held equal by the same test).
COLUMNS_LONGEST = 1 << 17


def gather_workspace(
    indices_shape: tuple[int, ...],
    indices_dtype: np.dtype[Any],
    data_shape: tuple[int, ...] = (),
    itemsize: int = 0,
) -> int:
    """The most bytes ``gather`` holds beyond its inputs and output: a chunk of positions (the
    compiled loop's, for narrow elements), and a copy of the indices as int32 when they are of
    8 or 16 bits, or in native byte order when they come in the other; for data of bytes
    (``itemsize`` 1), the table of 8-byte columns of a row (the axis's length, at most data's
    longest dimension, and a zero word)."""
    count = math.prod(indices_shape)
    positions = 4 * min(count, TAKE_CHUNK)
    if itemsize == 1 and data_shape:
        positions += 8 * (min(max(data_shape), COLUMNS_LONGEST) + 1)
    if indices_dtype.itemsize < 4:
        return positions + count * 4
    if indices_dtype.isnative:
        return positions
    return positions + count * indices_dtype.itemsize


# ------------------------------------------------------------------------------------------------
# The declaration


_BATCHES = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
_FOUR_D = [
    [[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]]],
    [[[21, 22, 23, 24], [25, 26, 27, 28], [29, 30, 31, 32], [33, 34, 35, 36], [37, 38, 39, 40]]],
]


def _plan_gather(arrays: Arrays, attributes: Attributes) -> Plan:
    data, indices = arrays["data"], arrays["indices"]
    plan = gather_plan(
        data.shape, indices.shape, indices.dtype, arrays["axis"], attributes["batch_dims"]
    )
    return Plan(plan.output_shape, functools.partial(gather_planned, data, indices, plan))


def _gather_workspace(arrays: Arrays, attributes: Attributes) -> int:
    data, indices = arrays["data"], arrays["indices"]
    return gather_workspace(indices.shape, indices.dtype, data.shape, data.dtype.itemsize)


OP = Op(
    name="gather",
    position=1,
    spec="Gather-8",
    summary="Gather-8: take slices along an axis at given indices",
    description="Gather-8 over `data`: the output shape is "
    "`data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis + 1:]`; indices "
    "outside `[-data.shape[axis], data.shape[axis] - 1]` give zeros. Send JSON (tensors as "
    "nested arrays or base64 .npy) or an .npz archive.",
    request_doc="Gather-8: the slices of `data` along `axis` at `indices`, batch by batch.",
    inputs=(
        data_input("gather from"),
        Input(
            "indices",
            "Indices to gather (input 2, type T_IND).",
            "T_IND: any integer type, any shape (a scalar too). Values outside "
            "[-data.shape[axis], data.shape[axis] - 1] give zeros. JSON form is int64.",
            INTEGER_TYPES,
        ),
        Input(
            "axis",
            "The axis to gather along (input 3, type T_AXIS).",
            "T_AXIS: any integer type, a scalar or a 1D tensor of one element, in "
            "[-data.rank, data.rank - 1]. JSON form is int64.",
            INTEGER_TYPES,
            rank="0 or 1",
            limit="scalar",
        ),
    ),
    attributes=(
        Attribute(
            "batch_dims",
            0,
            "Leading dimensions of data and indices that are batches; "
            "in [-min(data.rank, indices.rank), min(data.rank, indices.rank)] and <= axis.",
        ),
    ),
    plan=_plan_gather,
    workspace=_gather_workspace,
    examples={
        "example_1": example(
            "Gather-8 Example 1: default batch_dims",
            {"data": [1, 2, 3, 4, 5], "indices": [0, 0, 4], "axis": 0, "batch_dims": 0},
            [1, 1, 5],
        ),
        "example_2": example(
            "Gather-8 Example 2: batch_dims = 1",
            {"data": _BATCHES, "indices": [[0, 0, 4], [4, 0, 0]], "axis": 1, "batch_dims": 1},
            [[1, 1, 5], [10, 6, 6]],
        ),
        "example_3": example(
            "Gather-8 Example 3: batch_dims = 2",
            {
                "data": [
                    [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]],
                    [[11, 12, 13, 14, 15], [16, 17, 18, 19, 20]],
                ],
                "indices": [[[0, 0, 4], [4, 0, 0]], [[1, 2, 4], [4, 3, 2]]],
                "axis": 2,
                "batch_dims": 2,
            },
            [[[1, 1, 5], [10, 6, 6]], [[12, 13, 15], [20, 19, 18]]],
        ),
        "example_4": example(
            "Gather-8 Example 4: axis > batch_dims",
            {"data": _FOUR_D, "indices": [[1, 2, 4], [4, 3, 2]], "axis": 2, "batch_dims": 1},
            [
                [[[5, 6, 7, 8], [9, 10, 11, 12], [17, 18, 19, 20]]],
                [[[37, 38, 39, 40], [33, 34, 35, 36], [29, 30, 31, 32]]],
            ],
        ),
        "example_5": example(
            "Gather-8 Example 5: negative batch_dims (-1 means indices.rank - 1 = 1)",
            {"data": _BATCHES, "indices": [[0, 0, 4], [4, 0, 0]], "axis": 1, "batch_dims": -1},
            [[1, 1, 5], [10, 6, 6]],
        ),
        "example_6": example(
            "Gather-8 Example 6: negative indices",
            {"data": [1, 2, 3, 4, 5], "indices": [0, -2, -1], "axis": 0, "batch_dims": 0},
            [1, 4, 5],
        ),
        "example_7": example(
            "Gather-8 Example 7: indices out of range give zeros",
            {"data": [1, 2, 3, 4, 5], "indices": [3, 10, -20], "axis": 0, "batch_dims": 0},
            [4, 0, 0],
        ),
        "example_7_float32": example(
            "Gather-8 Example 7 with float32 data (dtype given by name)",
            {
                "data": [1.5, 2.5, 3.5, 4.5, 5.5],
                "indices": [3, 10, -20],
                "axis": 0,
                "dtype": "float32",
            },
            [4.5, 0.0, 0.0],
        ),
    },
)


# ------------------------------------------------------------------------------------------------
# The older versions: Gather-7 (no negative indices) and Gather-1 (nor batch_dims)


def _require_in_range(spec: str, indices: npt.NDArray[Any], length: int) -> None:
    """Gather-1 and -7 take indices in ``[0, data.shape[axis] - 1]`` only ("the values for
    indices are in the range"): Gather-8's negative indices and zeros for the others are not
    theirs. The check reads the indices once and allocates nothing of their size."""
    if indices.size == 0:
        return
    low, high = int(indices.min()), int(indices.max())
    if low >= 0 and high < length:
        return
    bad = low if low < 0 else high
    allowed = f"[0, {length - 1}]" if length else "none: data.shape[axis] is 0"
    raise SpecError(
        "indices",
        f"{spec}: index {bad} is out of range for data.shape[axis] = {length} (allowed values: "
        f"{allowed}; negative indices are Gather-8's)",
    )


def _planner_in_range(spec: str) -> Planner:
    def plan(arrays: Arrays, attributes: Attributes) -> Plan:
        data, indices = arrays["data"], arrays["indices"]
        checked = gather_plan(
            data.shape,
            indices.shape,
            indices.dtype,
            arrays["axis"],
            attributes.get("batch_dims", 0),
        )
        _require_in_range(spec, indices, data.shape[checked.axis])
        return Plan(checked.output_shape, functools.partial(gather_planned, data, indices, checked))

    return plan


_IN_RANGE_INDICES = (
    "T_IND: any integer type, any shape (a scalar too). Values in [0, data.shape[axis] - 1] "
    "only: a negative or larger index is refused. JSON form is int64."
)

OP_7 = Op(
    name="gather",
    position=1,
    spec="Gather-7",
    summary="Gather-7: take slices along an axis at given indices (no negative indices)",
    description="Gather-7 over `data`: as Gather-8, but every index must be in "
    "`[0, data.shape[axis] - 1]` (a negative or larger one is refused, 422).",
    request_doc="Gather-7: the slices of `data` along `axis` at `indices`, batch by batch.",
    inputs=(
        data_input("gather from"),
        Input(
            "indices", "Indices to gather (input 2, type T_IND).", _IN_RANGE_INDICES, INTEGER_TYPES
        ),
        OP.inputs[2],
    ),
    attributes=OP.attributes,
    plan=_planner_in_range("Gather-7"),
    workspace=_gather_workspace,
    examples={
        "example_1": example(
            "Gather-7 Example 1: default batch_dims",
            {"data": [1, 2, 3, 4, 5], "indices": [0, 0, 4], "axis": 0, "batch_dims": 0},
            [1, 1, 5],
        ),
        "example_2": example(
            "Gather-7 Example 2: batch_dims = 1",
            {"data": _BATCHES, "indices": [[0, 0, 4], [4, 0, 0]], "axis": 1, "batch_dims": 1},
            [[1, 1, 5], [10, 6, 6]],
        ),
        "example_3": example(
            "Gather-7 Example 3: batch_dims = 2",
            {
                "data": [_BATCHES, [[11, 12, 13, 14, 15], [16, 17, 18, 19, 20]]],
                "indices": [[[0, 0, 4], [4, 0, 0]], [[1, 2, 4], [4, 3, 2]]],
                "axis": 2,
                "batch_dims": 2,
            },
            [[[1, 1, 5], [10, 6, 6]], [[12, 13, 15], [20, 19, 18]]],
        ),
        "example_4": example(
            "Gather-7 Example 4: axis > batch_dims",
            {"data": _FOUR_D, "indices": [[1, 2, 4], [4, 3, 2]], "axis": 2, "batch_dims": 1},
            [
                [[[5, 6, 7, 8], [9, 10, 11, 12], [17, 18, 19, 20]]],
                [[[37, 38, 39, 40], [33, 34, 35, 36], [29, 30, 31, 32]]],
            ],
        ),
        "example_5": example(
            "Gather-7 Example 5: negative batch_dims",
            {"data": _BATCHES, "indices": [[0, 0, 4], [4, 0, 0]], "axis": 1, "batch_dims": -1},
            [[1, 1, 5], [10, 6, 6]],
        ),
    },
    decisions=(
        "Gather-7, an index outside [0, data.shape[axis] - 1] (a negative one included): refused "
        "(422, naming indices), since the spec gives the indices' range and no meaning outside "
        "it; Gather-8's negative indices and zeros are not Gather-7's.",
    ),
    disagreements=(
        "Gather-7 on the CPU plugin: a negative index gives zeros (Gather-7 of [1, 2, 3] at [-1] "
        "along axis 0 gives [0]); the spec allows no negative index, and the service refuses it.",
    ),
)

OP_1 = Op(
    name="gather",
    position=1,
    spec="Gather-1",
    summary="Gather-1: take slices along an axis at given indices (no batch_dims)",
    description="Gather-1 over `data`: the output shape is "
    "`data.shape[:axis] + indices.shape + data.shape[axis + 1:]`; every index must be in "
    "`[0, data.shape[axis] - 1]` (a negative or larger one is refused, 422). No attributes.",
    request_doc="Gather-1: the slices of `data` along `axis` at `indices`.",
    inputs=OP_7.inputs,
    plan=_planner_in_range("Gather-1"),
    workspace=_gather_workspace,
    examples={
        "example_1": example(
            "Gather-1: the spec's example (axis 1) at a smaller size",
            {"data": [[1, 2, 3], [4, 5, 6]], "indices": [[2, 0], [1, 1]], "axis": 1},
            [[[3, 1], [2, 2]], [[6, 4], [5, 5]]],
        ),
        "example_2": example(
            "Gather-1 along axis 0 with a negative axis",
            {"data": [[1, 2], [3, 4], [5, 6]], "indices": [2, 0], "axis": -2},
            [[5, 6], [1, 2]],
        ),
    },
    decisions=(
        "Gather-1, an index outside [0, data.shape[axis] - 1] (a negative one included): refused "
        "(422, naming indices), since the spec gives the indices' range and no meaning outside it.",
        "Gather-1, the types of indices and axis: any integer type, as Gather-7 and -8 say (the "
        "spec names none).",
    ),
    disagreements=(
        "Gather-1 on the CPU plugin: a negative index gives zeros; the spec allows none, and the "
        "service refuses it.",
        "Gather-1 on the CPU plugin with `axis` given at run time (a Parameter, not a Constant): "
        "the process ends in a segmentation fault at its first inference (OpenVINO 2026.4, "
        "opset1.gather of a [3] float32 tensor at [1] along axis 0); the service answers it.",
    ),
)

#: The older versions served beside Gather-8 (the registry collects them).
OLDER: tuple[Op, ...] = (OP_7, OP_1)
