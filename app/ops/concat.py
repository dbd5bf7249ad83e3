"""Concat-1: any number of tensors joined along one axis."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    ALL_TYPES,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Plan,
    example,
    narrowed_by_the_cpu_plugin,
)
from app.ops.errors import SpecError
from app.ops.raw import as_raw


def inputs_of(arrays: Arrays) -> list[npt.NDArray[Any]]:
    """``data_0``, ``data_1``, ... in order."""
    return [arrays[f"data_{index}"] for index in range(len(arrays))]


def concat_shape(
    shapes: Sequence[tuple[int, ...]], dtypes: Sequence[np.dtype[Any]], axis: int
) -> tuple[int, tuple[int, ...]]:
    """Check the inputs against the spec and give the normalised axis and the output's shape."""
    if not shapes:
        raise SpecError("data_0", "at least one input is required")
    rank = len(shapes[0])
    if rank == 0:
        raise SpecError(
            "data_0", "the rank of the inputs must be positive: scalars are not allowed"
        )
    first = dtypes[0].newbyteorder("=")
    for index, (shape, dtype) in enumerate(zip(shapes, dtypes, strict=True)):
        if dtype.newbyteorder("=") != first:
            raise SpecError(
                f"data_{index}",
                f"the types of all inputs must match: data_{index} is {dtype.name}, "
                f"data_0 {dtypes[0].name}",
            )
        if len(shape) != rank:
            raise SpecError(
                f"data_{index}",
                f"the ranks of all inputs must match: data_{index} has rank {len(shape)}, "
                f"data_0 {rank}",
            )
    if not -rank <= axis < rank:
        raise SpecError("axis", f"axis {axis} is out of range [{-rank}, {rank - 1}]")
    axis %= rank
    for index, shape in enumerate(shapes):
        if shape[:axis] != shapes[0][:axis] or shape[axis + 1 :] != shapes[0][axis + 1 :]:
            raise SpecError(
                f"data_{index}",
                f"the shapes of all inputs must match except along axis {axis}: data_{index} "
                f"is {list(shape)}, data_0 {list(shapes[0])}",
            )
    total = sum(shape[axis] for shape in shapes)
    return axis, (*shapes[0][:axis], total, *shapes[0][axis + 1 :])


def concat(
    inputs: Sequence[npt.ArrayLike], axis: int, out: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any]:
    """Concat-1: ``inputs`` joined along ``axis``; into ``out`` if given."""
    arrays = [np.asarray(item) for item in inputs]
    normal, shape = concat_shape([a.shape for a in arrays], [a.dtype for a in arrays], axis)
    return _joined(arrays, normal, shape, out)


def _joined(
    arrays: list[npt.NDArray[Any]],
    axis: int,
    shape: tuple[int, ...],
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    dtype = arrays[0].dtype
    if out is None:
        out = np.empty(shape, dtype)
    # One byte order for all (the first's): their bits are then joined as they are.
    same = [item if item.dtype == dtype else item.astype(dtype) for item in arrays]
    np.concatenate([as_raw(item) for item in same], axis=axis, out=as_raw(out))
    return out


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    inputs = inputs_of(arrays)
    axis, shape = concat_shape(
        [item.shape for item in inputs], [item.dtype for item in inputs], attributes["axis"]
    )
    return Plan(shape, lambda out: _joined(inputs, axis, shape, out))


OP = Op(
    name="concat",
    spec="Concat-1",
    summary="Concat-1: join tensors along an axis",
    description="Concat-1 over `data_0`, `data_1`, ... (at least one): tensors of one type and "
    "one positive rank, whose shapes match but along `axis`, joined along it; the output's "
    "`axis` dimension is the sum of theirs.",
    request_doc="Concat-1: `data_0`, `data_1`, ... joined along `axis`.",
    inputs=(
        Input(
            "data",
            "The tensors to join (inputs 1..N, type T), sent as data_0, data_1, ...",
            "T: any supported type, the same for all, of one positive rank. JSON form takes its "
            "type from `dtype`, or as NumPy infers it; npy form from its header.",
            ALL_TYPES,
            variadic=True,
        ),
    ),
    attributes=(
        Attribute(
            "axis",
            None,
            "The dimension to join along, in [-R, R - 1], R the rank of the inputs (required).",
        ),
    ),
    plan=_plan,
    output_type_from="data_0",
    examples={
        "example_1": example(
            "Concat-1 along axis 1 (the spec's example, small): 1 + 2 + 3 columns",
            {
                "data_0": [[1], [2]],
                "data_1": [[3, 4], [5, 6]],
                "data_2": [[7, 8, 9], [10, 11, 12]],
                "axis": 1,
            },
            [[1, 3, 4, 7, 8, 9], [2, 5, 6, 10, 11, 12]],
        ),
        "example_2": example(
            "Concat-1 along axis -2 (counted from the end)",
            {"data_0": [[1, 2]], "data_1": [[3, 4], [5, 6]], "axis": -2},
            [[1, 2], [3, 4], [5, 6]],
        ),
    },
    decisions=(
        'Concat-1, T is "any numeric type": every supported type is taken, bool included, as '
        "OpenVINO does.",
        "Concat-1, inputs of one type in different byte orders (npy form): the same type; the "
        "output has data_0's.",
        "Concat-1, the spec's example comments say 8 + 16 + 32 = 48 beside an output of 56: the "
        "sum, 56, is taken.",
    ),
    disagreements=narrowed_by_the_cpu_plugin("Concat-1"),
)
