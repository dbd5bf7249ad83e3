"""Split-1: a tensor cut along one axis into ``num_splits`` pieces of one length."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    INTEGER_TYPES,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    SplitPlan,
    data_input,
    example,
    narrowed_by_the_cpu_plugin,
)
from app.ops.errors import SpecError
from app.ops.split_rules import pieces, pieces_into, split_axis, split_shapes


def split_lengths(
    shape: tuple[int, ...], axis_input: npt.NDArray[Any], num_splits: int
) -> tuple[int, list[int]]:
    """Check Split-1's inputs and give the axis and each piece's length."""
    if not shape:
        raise SpecError("data", "data must have rank 1 or more to be split along an axis")
    axis = split_axis(len(shape), axis_input)
    size = shape[axis]
    if not 1 <= num_splits <= size:
        raise SpecError(
            "num_splits",
            f"num_splits must be within [1, data.shape[axis]] = [1, {size}], got {num_splits}",
        )
    if size % num_splits:
        raise SpecError(
            "num_splits",
            f"data.shape[axis] = {size} must be evenly divisible by num_splits = {num_splits}",
        )
    return axis, [size // num_splits] * num_splits


def split(data: npt.ArrayLike, axis: npt.ArrayLike, num_splits: int) -> list[npt.NDArray[Any]]:
    """Split-1: ``data`` cut into ``num_splits`` pieces along ``axis`` (copies, in order)."""
    data = np.asarray(data)
    normal, lengths = split_lengths(data.shape, np.asarray(axis), num_splits)
    return [piece.copy() for piece in pieces(data, normal, lengths)]


def _plan(arrays: Arrays, attributes: Attributes) -> SplitPlan:
    data = arrays["data"]
    axis, lengths = split_lengths(data.shape, arrays["axis"], attributes["num_splits"])
    return SplitPlan(
        split_shapes(data.shape, axis, lengths),
        lambda: pieces(data, axis, lengths),
        into=lambda ready: pieces_into(data, axis, lengths, ready),
    )


OP = Op(
    name="split",
    spec="Split-1",
    summary="Split-1: cut a tensor into pieces of one length along an axis",
    description="Split-1 over `data`: `num_splits` outputs, `output_0`, `output_1`, ..., each "
    "data's shape but for `data.shape[axis] / num_splits` along `axis`, which must divide "
    "evenly. Every output has the type of `data`.",
    request_doc="Split-1: `data` cut into `num_splits` equal pieces along `axis`.",
    inputs=(
        data_input("split"),
        Input(
            "axis",
            "The axis to split along (input 2, type T_AXIS).",
            "T_AXIS: any integer type, a scalar in [-rank(data), rank(data) - 1]. JSON form is "
            "int64.",
            INTEGER_TYPES,
            rank="0",
            limit="scalar",
        ),
    ),
    attributes=(
        Attribute(
            "num_splits",
            None,
            "How many outputs: within [1, data.shape[axis]], dividing it evenly (required).",
            limit="outputs",
        ),
    ),
    plan=_plan,
    several_outputs=True,
    examples={
        "example_1": example(
            "Split-1: a (2, 6) tensor in 3 along axis 1",
            {"data": [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]], "axis": 1, "num_splits": 3},
            [[[1, 2], [7, 8]], [[3, 4], [9, 10]], [[5, 6], [11, 12]]],
        ),
        "example_negative_axis": example(
            "Split-1 along axis -2 (counted from the end)",
            {"data": [[1, 2], [3, 4]], "axis": -2, "num_splits": 2},
            [[[1, 2]], [[3, 4]]],
        ),
    },
    decisions=(
        "Split-1, more than 1,024 outputs: refused (413), as each output costs the answer a head "
        "of its own beyond its elements.",
        "Split-1, axis as a tensor of shape [1]: refused; the spec asks for a scalar (Variadic"
        "Split-1 allows both).",
        "Split-1 along an empty dimension: refused, as num_splits must lie in [1, 0], which "
        "holds no value.",
        "Split-1 on rank-0 data: refused; there is no axis to split along.",
    ),
    disagreements=(
        *narrowed_by_the_cpu_plugin("Split-1"),
        "Split-1 along an axis of length 0: OpenVINO accepts it; the spec's range for num_splits, "
        "[1, 0], is empty, and the service refuses it.",
    ),
)
