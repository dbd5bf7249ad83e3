"""GatherND-8: gather elements or slices of a tensor at index tuples, batch by batch."""

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
    data_input,
    example,
)
from app.ops.errors import SpecError
from app.ops.index_rules import check_index_values, row_positions
from app.ops.raw import as_raw, into_c_ordered, is_integer_type

_BYTE, _WORD = np.dtype(np.uint8), np.dtype(np.uint64)
# A refusal looks for the first index out of range this many tuples at a time.


class GatherNDPlan(NamedTuple):
    """What the checks of one GatherND found: the batch shape (data's and indices' first
    ``batch_dims`` dimensions broadcast), the length of the index tuples and the output shape."""

    batch_dims: int
    batch_shape: tuple[int, ...]
    tuple_length: int
    output_shape: tuple[int, ...]
    #: Whether any index is negative (else the kernel skips counting from the end).
    negative: bool


def gather_nd_plan(
    data_shape: tuple[int, ...],
    indices: npt.NDArray[Any],
    batch_dims: int = 0,
) -> GatherNDPlan:
    """Check the inputs of a GatherND against the spec, before any data is touched."""
    if not is_integer_type(indices.dtype):
        raise SpecError(
            "indices", f"indices must be of an integer type (T_IND), got {indices.dtype.name}"
        )
    data_rank, indices_rank = len(data_shape), indices.ndim
    if data_rank < 1:
        raise SpecError("data", "data must be a tensor of a rank not less than 1, got a scalar")
    if indices_rank < 1:
        raise SpecError(
            "indices", "indices must be a tensor of a rank not less than 1, got a scalar"
        )
    if isinstance(batch_dims, bool) or not isinstance(batch_dims, int | np.integer):
        raise SpecError("batch_dims", f"batch_dims must be an integer, got {batch_dims!r}")
    batch_dims = int(batch_dims)
    limit = min(data_rank, indices_rank)
    if not 0 <= batch_dims < limit:
        raise SpecError(
            "batch_dims",
            f"batch_dims = {batch_dims} is out of range [0; min(data.rank, indices.rank)) = "
            f"[0; {limit})",
        )
    batch_shape = []
    for axis in range(batch_dims):
        left, right = data_shape[axis], indices.shape[axis]
        if left not in (right, 1) and right != 1:
            raise SpecError(
                "indices",
                f"the first batch_dims = {batch_dims} dimensions of data and indices must be "
                f"broadcastable (equal, or one of them 1); dimension {axis} is {left} in data "
                f"and {right} in indices",
            )
        batch_shape.append(right if left == 1 else left)
    tuple_length = indices.shape[-1]
    if tuple_length > data_rank - batch_dims:
        raise SpecError(
            "indices",
            f"indices.shape[-1] = {tuple_length} must not be greater than data.rank - "
            f"batch_dims = {data_rank - batch_dims} (the last dimension of indices must be not "
            "greater than a rank of data)",
        )
    negative = check_index_values(
        "indices",
        indices,
        data_shape[batch_dims : batch_dims + tuple_length],
        "all indices must be in the range",
    )
    output_shape = (
        tuple(batch_shape) + indices.shape[batch_dims:-1] + data_shape[batch_dims + tuple_length :]
    )
    return GatherNDPlan(batch_dims, tuple(batch_shape), tuple_length, output_shape, negative)


def gather_nd(
    data: npt.ArrayLike,
    indices: npt.ArrayLike,
    batch_dims: int = 0,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """GatherND-8: ``output[b..., i...] = data[b..., indices[b..., i...], ...]``.

    ``indices`` (any integer type, rank >= 1) holds tuples along its last dimension, each value in
    ``[-s, s - 1]`` for the dimension ``s`` of data it indexes (negative values count from the
    end; anything else is refused). The first ``batch_dims`` dimensions of both are batches,
    broadcast where one of them is 1. ``out``, if given, receives the output.
    """
    data = np.asarray(data)
    indices = np.asarray(indices)
    return gather_nd_planned(data, indices, gather_nd_plan(data.shape, indices, batch_dims), out)


def gather_nd_planned(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    plan: GatherNDPlan,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """``gather_nd`` with the inputs already checked: ``plan`` is ``gather_nd_plan``'s."""
    return into_c_ordered(
        out,
        plan.output_shape,
        data.dtype,
        lambda target: _gather_nd_into(as_raw(data), indices, plan, as_raw(target)),
    )


def _gather_nd_into(
    source: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    plan: GatherNDPlan,
    out: npt.NDArray[Any],
) -> None:
    """Gather into ``out`` (C-contiguous, not empty): every index tuple becomes the flat position
    of a slice of data (its batch's first slice plus the tuple's offset), and the compiled
    loop of Gather copies the slices."""
    batch, count = plan.batch_dims, plan.tuple_length
    shape = source.shape
    lengths = shape[batch : batch + count]
    slice_size = math.prod(shape[batch + count :])
    per_batch = math.prod(lengths)
    batches = math.prod(plan.batch_shape)
    # Each batch's first slice: data's batch index (broadcast where its dimension is 1) times
    # the slices of a batch.
    data_batches = np.arange(math.prod(shape[:batch]), dtype=np.int64).reshape(shape[:batch])
    first = np.broadcast_to(data_batches, plan.batch_shape).reshape(-1) * np.int64(per_batch)
    index_batches = indices.shape[:batch]
    if index_batches != plan.batch_shape:
        indices = np.broadcast_to(indices, plan.batch_shape + indices.shape[batch:])
    if count:
        table = row_positions(indices, lengths, plan.negative).reshape(batches, -1)
        table += first[:, None]
    else:
        tuples = math.prod(indices.shape[batch:-1])
        table = np.repeat(first[:, None], tuples, axis=1)
    positions = table.reshape(-1)
    total = source.size // slice_size
    flat_source, flat_out = source.ravel(), out.ravel()
    itemsize = source.dtype.itemsize
    if slice_size == 1:
        loops.take(flat_source, positions, flat_out, 1, 1, total, positions.size, 0, 0)
        return
    unit = _WORD if (slice_size * itemsize) % 8 == 0 else _BYTE
    width = slice_size * itemsize // unit.itemsize
    loops.take_slices(
        flat_source.view(unit), positions, flat_out.view(unit),
        1, 1, total, positions.size, width, 0,
    )  # fmt: skip


def gather_nd_workspace(data: npt.NDArray[Any], indices: npt.NDArray[Any], batch_dims: int) -> int:
    """The most bytes ``gather_nd`` holds beyond its inputs and output: the index values as
    int64 with their range masks (checks), the positions (one int64 per tuple, per broadcast
    batch), and a C-ordered copy of data when it comes strided."""
    tuples = indices.size // max(indices.shape[-1], 1) if indices.ndim else 1
    batches = 1
    for axis in range(min(batch_dims, data.ndim, indices.ndim)):
        batches = max(batches, data.shape[axis])
    copy = 0 if data.flags.c_contiguous else data.nbytes
    return indices.size * 17 + tuples * batches * 16 + copy


# ------------------------------------------------------------------------------------------------
# The declaration


def _plan_gather_nd(arrays: Arrays, attributes: Attributes) -> Plan:
    data, indices = arrays["data"], arrays["indices"]
    plan = gather_nd_plan(data.shape, indices, attributes["batch_dims"])
    return Plan(plan.output_shape, functools.partial(gather_nd_planned, data, indices, plan))


def _gather_nd_workspace(arrays: Arrays, attributes: Attributes) -> int:
    return gather_nd_workspace(arrays["data"], arrays["indices"], attributes["batch_dims"])


_SQUARE = [[1, 2], [3, 4]]
_TWO_BATCHES = [
    [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]],
    [[13, 14, 15, 16], [17, 18, 19, 20], [21, 22, 23, 24]],
]

OP = Op(
    name="gather_nd",
    spec="GatherND-8",
    summary="GatherND-8: gather elements or slices at index tuples",
    description="GatherND-8 over `data`: each tuple along the last dimension of `indices` picks "
    "an element or a slice of `data` (after the first `batch_dims` batch dimensions); the output "
    "shape is `indices.shape[:batch_dims] + indices.shape[batch_dims:-1] + "
    "data.shape[batch_dims + indices.shape[-1]:]`. Every index must be in `[-s, s-1]`. Send JSON "
    "(tensors as nested arrays or base64 .npy) or an .npz archive.",
    request_doc="GatherND-8: the elements or slices of `data` at the index tuples of `indices`.",
    inputs=(
        data_input("gather from"),
        Input(
            "indices",
            "Index tuples along the last dimension (input 2, type T_IND).",
            "T_IND: any integer type, a tensor of a rank not less than 1, indices.shape[-1] <= "
            "data.rank - batch_dims; all indices in the range [-s, s-1] where s is the "
            "corresponding dimension. JSON form is int64.",
            INTEGER_TYPES,
            rank=">= 1",
        ),
    ),
    attributes=(
        Attribute(
            "batch_dims",
            0,
            "Leading dimensions of data and indices that are batches (broadcastable: equal, or "
            "one of them 1); in [0; min(data.rank, indices.rank)).",
        ),
    ),
    plan=_plan_gather_nd,
    workspace=_gather_nd_workspace,
    examples={
        "example_1": example(
            "GatherND-8 Example 1: elements",
            {"data": _SQUARE, "indices": [[0, 0], [1, 0]]},
            [1, 3],
        ),
        "example_2": example(
            "GatherND-8 Example 2: slices",
            {"data": _SQUARE, "indices": [[1], [0]]},
            [[3, 4], [1, 2]],
        ),
        "example_3": example(
            "GatherND-8 Example 3: indices with leading dimensions",
            {"data": _SQUARE, "indices": [[[1]], [[0]]]},
            [[[3, 4]], [[1, 2]]],
        ),
        "example_4": example(
            "GatherND-8 Example 4: elements, batch_dims = 1",
            {"data": _SQUARE, "indices": [[1], [0]], "batch_dims": 1},
            [2, 3],
        ),
        "example_5": example(
            "GatherND-8 Example 5: slices, batch_dims = 1",
            {"data": _TWO_BATCHES, "indices": [[1], [0]], "batch_dims": 1},
            [[5, 6, 7, 8], [13, 14, 15, 16]],
        ),
        "example_6": example(
            "GatherND-8 Example 6: slices with leading dimensions, batch_dims = 2",
            {
                "data": _TWO_BATCHES,
                "indices": [[[[1]], [[0]], [[2]]], [[[0]], [[2]], [[2]]]],
                "batch_dims": 2,
            },
            [[[2], [5], [11]], [[13], [19], [23]]],
        ),
        "example_7": example(
            "GatherND-8 Example 7: batch_dims = 3",
            {
                "data": [[[[1, 2, 3, 4], [5, 6, 7, 8]], [[9, 10, 11, 12], [13, 14, 15, 16]]]],
                "indices": [[[[1], [0]], [[3], [2]]]],
                "batch_dims": 3,
            },
            [[[2, 5], [12, 15]]],
        ),
        "negative_indices": example(
            "GatherND-8 with negative indices (counting from the end, since OpenVINO 2025.3)",
            {"data": _SQUARE, "indices": [[-1, -2], [0, -1]], "dtype": "float32"},
            [3.0, 2.0],
        ),
    },
    decisions=(
        "GatherND-8 batch dimensions: the spec's text allows data's and indices' first "
        "batch_dims dimensions to be broadcastable (equal, or one of them 1); they are "
        "broadcast, and the output's batch dimensions are the broadcast ones (which are "
        "indices.shape[:batch_dims] of the formula whenever data's dimension is the 1).",
        "GatherND-8 index tuples: indices.shape[-1] must not exceed data.rank - batch_dims (the "
        "spec says data.rank; beyond data.rank - batch_dims the tuple would index past data).",
        "GatherND-8 out-of-range indices: the spec requires every index in [-s, s-1]; any other "
        "value (uint64 values of 2**63 and more included) is refused with a 422 naming "
        "`indices`, before anything is gathered.",
        "GatherND-8 with indices.shape[-1] = 0: each empty tuple selects its batch's whole data "
        "slice.",
    ),
    disagreements=(
        "GatherND-8 broadcast batch dimensions: OpenVINO refuses to build the node when data's "
        "and indices' batch dimensions differ (`Batch dimensions of data and indices must be "
        "the same`), e.g. data (1, 3), indices (2, 1), batch_dims 1; the spec allows it.",
        "GatherND-8 out-of-range indices: OpenVINO's `evaluate` returns False and the CPU "
        "plugin does not refuse: data (3,) int32 [1, 2, 3], indices [[5], [-7]] gives [0, "
        "<garbage read outside data>]; the spec requires indices in range and the service "
        "refuses them.",
        "GatherND-8 with indices.shape[-1] = 0 (empty tuples): the CPU plugin returns "
        "uninitialised memory, e.g. data [1, 2, 3], indices of shape (0,) gives [1330926913, 0, "
        "0]; by the formula each empty tuple selects the whole slice: [1, 2, 3].",
    ),
)


# ------------------------------------------------------------------------------------------------
# The older version: GatherND-5 (batches flattened into one dimension, no negative indices)


def _plan_gather_nd_5(arrays: Arrays, attributes: Attributes) -> Plan:
    data, indices = arrays["data"], arrays["indices"]
    plan = gather_nd_plan(data.shape, indices, attributes["batch_dims"])
    if plan.negative:
        raise SpecError(
            "indices",
            "GatherND-5: every index must be in [0, s-1] where s is the dimension it is applied "
            "to; a negative index is GatherND-8's",
        )
    batches = plan.batch_dims
    shape = plan.output_shape
    if batches:
        # (multiplication of the batch dimensions) + indices.shape[b:-1] + data.shape[b + n:]
        shape = (math.prod(plan.batch_shape), *plan.output_shape[batches:])

    def run(out: npt.NDArray[Any] | None) -> npt.NDArray[Any]:
        target = None if out is None else out.reshape(plan.output_shape)
        return gather_nd_planned(data, indices, plan, target).reshape(shape)

    return Plan(shape, run)


OP_5 = Op(
    name="gather_nd",
    spec="GatherND-5",
    summary="GatherND-5: gather elements or slices at index tuples (batches flattened)",
    description="GatherND-5 over `data`: as GatherND-8, but with `batch_dims` > 0 the batch "
    "dimensions become one, their product: the output shape is `(product of the batch "
    "dimensions) + indices.shape[batch_dims:-1] + data.shape[batch_dims + indices.shape[-1]:]`; "
    "every index must be in `[0, s-1]` (a negative one is refused, 422).",
    request_doc="GatherND-5: the elements or slices of `data` at the index tuples of `indices`.",
    inputs=(
        data_input("gather from"),
        Input(
            "indices",
            "Index tuples along the last dimension (input 2, type T_IND).",
            "T_IND: any integer type, a tensor of a rank not less than 1, indices.shape[-1] <= "
            "data.rank - batch_dims; all indices in the range [0, s-1] where s is the "
            "corresponding dimension. JSON form is int64.",
            INTEGER_TYPES,
            rank=">= 1",
        ),
    ),
    attributes=OP.attributes,
    plan=_plan_gather_nd_5,
    workspace=_gather_nd_workspace,
    examples={
        "example_1": example(
            "GatherND-5 Example 1: elements",
            {"data": _SQUARE, "indices": [[0, 0], [1, 0]]},
            [1, 3],
        ),
        "example_2": example(
            "GatherND-5 Example 2: slices",
            {"data": _SQUARE, "indices": [[1], [0]]},
            [[3, 4], [1, 2]],
        ),
        "example_3": example(
            "GatherND-5 Example 3: indices with leading dimensions",
            {"data": _SQUARE, "indices": [[[1]], [[0]]]},
            [[[3, 4]], [[1, 2]]],
        ),
        "example_4": example(
            "GatherND-5 Example 4: elements, batch_dims = 1",
            {"data": _SQUARE, "indices": [[1], [0]], "batch_dims": 1},
            [2, 3],
        ),
        "example_5": example(
            "GatherND-5 Example 5: slices, batch_dims = 1",
            {"data": _TWO_BATCHES, "indices": [[1], [0]], "batch_dims": 1},
            [[5, 6, 7, 8], [13, 14, 15, 16]],
        ),
        "example_6": example(
            "GatherND-5 Example 6: batch_dims = 2, the six batches flattened",
            {
                "data": _TWO_BATCHES,
                "indices": [[[[1]], [[0]], [[2]]], [[[0]], [[2]], [[2]]]],
                "batch_dims": 2,
            },
            [[2], [5], [11], [13], [19], [23]],
        ),
    },
    decisions=(
        "GatherND-5, the output's first dimension with batch_dims > 0: the product of the batch "
        "dimensions as data and indices broadcast them (the number of batches gathered); the "
        "spec's formula names indices.shape[:b], which is the same where indices' batch "
        "dimensions are not 1 broadcast against data's.",
        "GatherND-5, a negative index: refused (422, naming indices); the spec says [0, s-1].",
    ),
    disagreements=(
        "GatherND-5 on the CPU plugin: a negative index counts from the end (as GatherND-8's); "
        "the spec allows none, and the service refuses it.",
    ),
)

#: The older version served beside GatherND-8 (the registry collects it).
OLDER: tuple[Op, ...] = (OP_5,)
