"""GatherElements-6: take, for each element of ``indices``, the element of ``data`` it names
along one axis."""

import functools
import math
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops import loops
from app.ops.declaration import (
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
from app.ops.index_rules import check_in_bounds, prefetch_line
from app.ops.raw import as_raw, into_c_ordered

_INDEX_NUMBERS = frozenset(np.dtype(name).num for name in INT32_OR_INT64)
# Positions are computed this many output elements at a time (their workspace's bound).
_CHUNK = 1 << 20
#: Indices of this many bytes or more, along the last axis (or one whose later dimensions are
#: all 1), have their bounds checked by the kernel as it reads them, not by the plan: one read
#: of the indices where the plan's pass and the gather made two.
_KERNEL_CHECKS_BYTES = 1 << 20


class GatherElementsPlan(NamedTuple):
    """The normalised axis of one GatherElements; the output has the shape of indices.
    ``in_kernel``: the indices' bounds are left to the kernel (``_gather_elements_into``)."""

    axis: int
    output_shape: tuple[int, ...]
    in_kernel: bool = False


def gather_elements_plan(
    data_shape: tuple[int, ...],
    indices: npt.NDArray[Any],
    axis: int,
    *,
    large_to_kernel: bool = False,
) -> GatherElementsPlan:
    """Check the inputs of a GatherElements against the spec, before any data is touched;
    ``large_to_kernel``: the bounds of large indices along the inner axis are left to the
    kernel, which refuses them as this would (``_refuse_out_of_bounds``)."""
    if indices.dtype.num not in _INDEX_NUMBERS:
        raise SpecError(
            "indices", f"indices must be of type int32 or int64 (T_IND), got {indices.dtype.name}"
        )
    rank = len(data_shape)
    if rank < 1:
        raise SpecError("data", "data must be a tensor of a rank >= 1, got a scalar")
    if indices.ndim != rank:
        raise SpecError(
            "indices",
            f"indices must have the same rank as data ({rank}), got rank {indices.ndim}",
        )
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise SpecError("axis", f"axis must be an integer, got {axis!r}")
    axis = int(axis)
    if not -rank <= axis < rank:
        raise SpecError(
            "axis", f"axis = {axis} is out of range [-r, r-1] = [{-rank}, {rank - 1}] (r = rank)"
        )
    normal = axis + rank if axis < 0 else axis
    for dimension in range(rank):
        if dimension != normal and data_shape[dimension] != indices.shape[dimension]:
            raise SpecError(
                "indices",
                "indices must have the same shape as data except for the axis dimension; got "
                f"data of shape {data_shape}, indices of shape {indices.shape}, axis {axis}",
            )
    length = data_shape[normal]
    if (
        large_to_kernel
        and indices.nbytes >= _KERNEL_CHECKS_BYTES
        and math.prod(data_shape[normal + 1 :]) == 1
    ):
        return GatherElementsPlan(normal, indices.shape, in_kernel=True)
    _refuse_out_of_bounds(indices, length)
    return GatherElementsPlan(normal, indices.shape)


def _refuse_out_of_bounds(indices: npt.NDArray[Any], length: int) -> None:
    """Refuse the first index value outside [0, ``length`` - 1], naming its place."""
    check_in_bounds(
        indices,
        length,
        lambda place, value: SpecError(
            "indices",
            f"indices{place} = {value} is out of bounds for a dimension of length {length}: all "
            f"index values are expected to be within bounds [0, s-1] (s = {length})",
        ),
    )


def gather_elements(
    data: npt.ArrayLike,
    indices: npt.ArrayLike,
    axis: int,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """GatherElements-6: ``out[i][j][k] = data[i][indices[i][j][k]][k]`` (for axis 1), and so on.

    ``indices`` (int32 or int64) has data's rank and shape but along ``axis`` (negative axes
    count from the back); every value must be in ``[0, s - 1]`` for the length ``s`` of data's
    axis, and any other is refused. The output has the shape of ``indices``.
    """
    data = np.asarray(data)
    indices = np.asarray(indices)
    plan = gather_elements_plan(data.shape, indices, axis)
    return gather_elements_planned(data, indices, plan, out)


def gather_elements_planned(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    plan: GatherElementsPlan,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """``gather_elements`` with the inputs already checked (``plan`` is their plan)."""
    return into_c_ordered(
        out,
        plan.output_shape,
        data.dtype,
        lambda target: _gather_elements_into(
            as_raw(data), indices, plan.axis, as_raw(target), plan.in_kernel
        ),
    )


def _native(indices: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The indices flat, C-ordered, in native byte order (a view when they already are)."""
    if not indices.dtype.isnative:
        indices = indices.astype(indices.dtype.newbyteorder("="))
    return indices.ravel()


def _gather_elements_into(
    source: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    axis: int,
    out: npt.NDArray[Any],
    in_kernel: bool = False,
) -> None:
    """Gather into ``out`` (C-contiguous, not empty; ``indices`` in bounds, or ``in_kernel``:
    checked here, along the inner axis, by the loop as it reads them: an index out of bounds
    is refused as the plan refuses it).

    Along the last axis every row of indices reads one row of data: Gather's compiled loop
    does it with the indices as they are. Along another axis an element's flat position in data
    is its index times the inner size plus its place in the inner block and its outer block's
    start: those positions are made ``_CHUNK`` elements at a time, each chunk copied by the
    same compiled loop.
    """
    shape = source.shape
    length = shape[axis]
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1 :])
    count = indices.shape[axis]
    flat_source, flat_out, flat_indices = source.ravel(), out.ravel(), _native(indices)
    if inner == 1:
        # The next row prefetched as Gather's (64 MiB of int8, reversed rows: 1.2x faster).
        line = prefetch_line(length, count, source.dtype.itemsize)
        # No wrap: a negative index is outside [0, length), as the spec's bounds say.
        outside = loops.take(flat_source, flat_indices, flat_out, outer, 1, length, count, 0, line)
        if outside and in_kernel:
            _refuse_out_of_bounds(indices, length)
        return
    block = count * inner  # output elements of one outer index
    rows = max(1, _CHUNK // block)
    places = np.arange(inner, dtype=np.int64)
    total = flat_source.size
    for first in range(0, outer, rows):
        last = min(outer, first + rows)
        chunk = flat_indices[first * block : last * block].reshape(last - first, count, inner)
        positions = chunk.astype(np.int64) * np.int64(inner)
        positions += places
        starts = np.arange(first, last, dtype=np.int64) * np.int64(length * inner)
        positions += starts[:, None, None]
        loops.take(
            flat_source, positions.reshape(-1), flat_out[first * block : last * block],
            1, 1, total, positions.size, 0, 0,
        )  # fmt: skip


def gather_elements_workspace(indices: npt.NDArray[Any], axis: int) -> int:
    """The most bytes ``gather_elements`` holds beyond its inputs and output: a chunk of int64
    positions (at most one outer block or ``_CHUNK`` elements, whichever is larger), and the
    indices in native byte order when they come in the other."""
    copy = 0 if indices.dtype.isnative else indices.nbytes
    if indices.ndim == 0:
        return copy
    normal = axis + indices.ndim if -indices.ndim <= axis < 0 else axis
    block = math.prod(indices.shape[normal:]) if 0 <= normal < indices.ndim else 0
    return copy + 8 * min(indices.size, max(block, _CHUNK))


# ------------------------------------------------------------------------------------------------
# The declaration


def _plan_gather_elements(arrays: Arrays, attributes: Attributes) -> Plan:
    data, indices = arrays["data"], arrays["indices"]
    plan = gather_elements_plan(data.shape, indices, attributes["axis"], large_to_kernel=True)
    run = functools.partial(gather_elements_planned, data, indices, plan)
    if not plan.in_kernel:
        return Plan(plan.output_shape, run)
    length = data.shape[plan.axis]
    return Plan(plan.output_shape, run, check=lambda: _refuse_out_of_bounds(indices, length))


def _gather_elements_workspace(arrays: Arrays, attributes: Attributes) -> int:
    return gather_elements_workspace(arrays["indices"], attributes["axis"])


OP = Op(
    name="gather_elements",
    spec="GatherElements-6",
    summary="GatherElements-6: take elements at per-element indices along an axis",
    description="GatherElements-6 over `data`: for each element of `indices` (same rank as "
    "`data`, same shape except along `axis`) the element of `data` at that index along `axis`; "
    "the output has the shape of `indices`. Every index must be within [0, s-1]. Send JSON "
    "(tensors as nested arrays or base64 .npy) or an .npz archive.",
    request_doc="GatherElements-6: the elements of `data` at `indices` along `axis`.",
    inputs=(
        data_input("gather from"),
        Input(
            "indices",
            "Indices along axis, one per output element (input 2, type T_IND).",
            "T_IND: int32 or int64, the same rank as data and the same shape except for the "
            "axis dimension; all index values within bounds [0, s-1], s the size of data along "
            "axis. JSON form is int64.",
            INT32_OR_INT64,
            rank=">= 1",
        ),
    ),
    attributes=(
        Attribute(
            "axis",
            None,
            "Which axis to gather on (required); negative values count from the back; in "
            "[-r, r-1], r = rank(data).",
        ),
    ),
    plan=_plan_gather_elements,
    workspace=_gather_elements_workspace,
    examples={
        "example_1": example(
            "GatherElements-6 Example 1: axis = 0",
            {"data": [[1, 2], [3, 4]], "indices": [[0, 1], [0, 0]], "axis": 0},
            [[1, 4], [1, 2]],
        ),
        "example_2": example(
            "GatherElements-6 Example 2: axis = 1, indices longer than data along it",
            {"data": [[1, 7], [4, 3]], "indices": [[1, 1, 0], [1, 0, 1]], "axis": 1},
            [[7, 7, 1], [3, 4, 3]],
        ),
        "example_3": example(
            "GatherElements-6 Example 3: indices shorter than data along axis",
            {
                "data": [[1, 2, 3], [4, 5, 6], [7, 8, 9]],
                "indices": [[1, 0, 1], [1, 2, 0]],
                "axis": 0,
            },
            [[4, 2, 6], [4, 8, 3]],
        ),
        "negative_axis_float32": example(
            "GatherElements-6 with axis = -1 (counting from the back) on float32 data",
            {
                "data": [[1.5, -0.0], [2.5, 3.5]],
                "indices": [[1, 0, 1], [0, 0, 1]],
                "axis": -1,
                "dtype": "float32",
            },
            [[-0.0, 1.5, -0.0], [2.5, 2.5, 3.5]],
        ),
    },
    decisions=(
        "GatherElements-6 indices outside [0, s-1] (negative ones included): the spec expects "
        "every index value within bounds [0, s-1]; any other is refused with a 422 naming "
        "`indices` (the first out of bounds, in C order), and no output is given.",
        "GatherElements-6 with an empty data axis (s = 0): only an indices tensor with no "
        "elements is accepted (its output is empty); any index value would be out of bounds.",
    ),
    disagreements=(
        "GatherElements-6 negative indices: OpenVINO's CPU plugin reads them counting from the "
        "end (data [[1, 2, 3]], indices [[-1]], axis 1 gives [[3]]), where the spec's bounds "
        "are [0, s-1]; the service refuses them.",
    ),
)
