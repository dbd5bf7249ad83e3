"""A toy op for scripts/toy_op_check, which copies it to app/ops/mirror.py: ``data`` reversed
along the ``axes`` given (all of them when left out), or kept as it is in ``keep`` mode."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    ALL_TYPES,
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


def mirror_plan(arrays: Arrays, attributes: Attributes) -> Plan:
    """Check ``axes`` against ``data``'s rank; the output has ``data``'s shape."""
    data = arrays["data"]
    given = arrays.get("axes")
    axes = list(range(data.ndim)) if given is None else [int(a) for a in given.reshape(-1)]
    for axis in axes:
        if not -data.ndim <= axis < max(data.ndim, 1):
            raise SpecError("axes", f"axis {axis} is out of range for data of rank {data.ndim}")
    flipped = data if attributes["mode"] == "keep" or not data.ndim else np.flip(data, axes)

    def run(out: npt.NDArray[Any] | None) -> npt.NDArray[Any]:
        if out is None:
            return flipped.copy()
        np.copyto(out, flipped, casting="equiv")
        return out

    return Plan(data.shape, run)


OP = Op(
    name="mirror",
    spec="Reverse-1",
    summary="Mirror: data reversed along axes",
    description="`data` reversed along `axes` (every axis when left out).",
    request_doc="Mirror: `data` reversed along `axes`.",
    inputs=(
        data_input("mirror"),
        Input(
            "axes", "Axes to reverse.", "T_AXIS: any integer type.", INTEGER_TYPES, optional=True
        ),
    ),
    attributes=(Attribute("mode", "flip", "flip, or keep as it is", choices=("flip", "keep")),),
    plan=mirror_plan,
    examples={
        "example_1": example("Every axis", {"data": [[1, 2], [3, 4]]}, [[4, 3], [2, 1]]),
        "example_2": example("Axis 1", {"data": [[1, 2], [3, 4]], "axes": [1]}, [[2, 1], [4, 3]]),
    },
    decisions=("Mirror with no `axes`: every axis, as the toy op's text says.",),
)
assert ALL_TYPES  # the declaration's vocabulary, as a real op module imports it
