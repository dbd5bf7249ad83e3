"""VariadicSplit-1: a tensor cut along one axis into pieces of the lengths given (one may be -1:
what the others leave)."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    INTEGER_TYPES,
    Arrays,
    Attributes,
    Input,
    Op,
    SplitPlan,
    data_input,
    example,
    narrowed_by_the_cpu_plugin,
)
from app.ops.errors import SpecError
from app.ops.raw import is_integer_type
from app.ops.split_rules import pieces, pieces_into, split_axis, split_shapes


def variadic_lengths(
    shape: tuple[int, ...], axis_input: npt.NDArray[Any], split_lengths: npt.NDArray[Any]
) -> tuple[int, list[int]]:
    """Check the inputs against the spec and give the axis and each piece's length (a -1
    resolved to what the others leave)."""
    if not shape:
        raise SpecError("data", "data must have rank 1 or more to be split along an axis")
    axis = split_axis(len(shape), axis_input, scalar_only=False)
    if not is_integer_type(split_lengths.dtype):
        raise SpecError(
            "split_lengths",
            f"split_lengths must be of an integer type, got {split_lengths.dtype.name}",
        )
    if split_lengths.ndim != 1 or split_lengths.shape[0] == 0:
        raise SpecError(
            "split_lengths",
            "split_lengths must be a 1D tensor of one length per output (at least one), got "
            f"a tensor of shape {list(split_lengths.shape)}",
        )
    lengths = [int(value) for value in split_lengths.tolist()]
    size = shape[axis]
    free = [position for position, length in enumerate(lengths) if length == -1]
    if len(free) > 1:
        raise SpecError(
            "split_lengths", f"split_lengths may hold a single -1, got {len(free)} of them"
        )
    for position, length in enumerate(lengths):
        if length < -1:
            raise SpecError(
                "split_lengths",
                f"split_lengths[{position}] = {length}: a length is 0 or more (or a single -1)",
            )
    taken = sum(length for length in lengths if length != -1)
    if free:
        if taken > size:
            raise SpecError(
                "split_lengths",
                f"the lengths other than -1 add up to {taken}, more than data.shape[axis] = {size}",
            )
        lengths[free[0]] = size - taken
    elif taken != size:
        raise SpecError(
            "split_lengths",
            f"the sum of split_lengths ({taken}) must match data.shape[axis] = {size}",
        )
    return axis, lengths


def variadic_split(
    data: npt.ArrayLike, axis: npt.ArrayLike, split_lengths: npt.ArrayLike
) -> list[npt.NDArray[Any]]:
    """VariadicSplit-1: ``data`` cut along ``axis`` into pieces of ``split_lengths``."""
    data = np.asarray(data)
    normal, lengths = variadic_lengths(data.shape, np.asarray(axis), np.asarray(split_lengths))
    return [piece.copy() for piece in pieces(data, normal, lengths)]


def _plan(arrays: Arrays, attributes: Attributes) -> SplitPlan:
    data = arrays["data"]
    axis, lengths = variadic_lengths(data.shape, arrays["axis"], arrays["split_lengths"])
    return SplitPlan(
        split_shapes(data.shape, axis, lengths),
        lambda: pieces(data, axis, lengths),
        into=lambda ready: pieces_into(data, axis, lengths, ready),
    )


_DATA = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12], [13, 14, 15], [16, 17, 18]]

OP = Op(
    name="variadic_split",
    spec="VariadicSplit-1",
    summary="VariadicSplit-1: cut a tensor into pieces of given lengths along an axis",
    description="VariadicSplit-1 over `data`: one output a length of `split_lengths`, "
    "`output_0`, `output_1`, ..., each data's shape but for that length along `axis`; the "
    "lengths add up to `data.shape[axis]`, a single -1 taking what the others leave.",
    request_doc="VariadicSplit-1: `data` cut along `axis` into pieces of `split_lengths`.",
    inputs=(
        data_input("split"),
        Input(
            "axis",
            "The axis to split along (input 2, type T2).",
            "T2: any integer type, a scalar or a tensor of shape [1], in [-rank(data), "
            "rank(data) - 1]. JSON form is int64.",
            INTEGER_TYPES,
            rank="0 or 1",
            limit="scalar",
        ),
        Input(
            "split_lengths",
            "Each output's length along axis (input 3, type T2); a single -1: the rest.",
            "T2: any integer type, a 1D tensor of lengths of 0 or more (and at most one -1) "
            "adding up to data.shape[axis]. JSON form is int64.",
            INTEGER_TYPES,
            rank="1",
            limit="outputs",
        ),
    ),
    plan=_plan,
    several_outputs=True,
    examples={
        "example_1": example(
            "VariadicSplit-1: lengths [1, 2, 3] along axis 0",
            {"data": _DATA, "axis": 0, "split_lengths": [1, 2, 3]},
            [_DATA[:1], _DATA[1:3], _DATA[3:]],
        ),
        "example_2": example(
            "VariadicSplit-1: lengths [-1, 2]: the first takes 6 - 2 = 4",
            {"data": _DATA, "axis": 0, "split_lengths": [-1, 2]},
            [_DATA[:4], _DATA[4:]],
        ),
    },
    decisions=(
        "VariadicSplit-1, more than 1,024 outputs: refused (413), as each output costs the "
        "answer a head of its own beyond its elements.",
        "VariadicSplit-1, an empty split_lengths: refused (an op of no output); the spec's sum "
        "rule alone would allow it on an empty axis.",
        "VariadicSplit-1, axis and split_lengths of two integer types: allowed; the spec's T2 "
        'is read as "any integer type" for each.',
        "VariadicSplit-1, a length below -1: refused; lengths are dimension values.",
    ),
    disagreements=(
        *narrowed_by_the_cpu_plugin("VariadicSplit-1"),
        "VariadicSplit-1, lengths [7, -1] on an axis of length 6: OpenVINO builds the node; the "
        "lengths cannot add up, and the service refuses them naming split_lengths.",
    ),
)
