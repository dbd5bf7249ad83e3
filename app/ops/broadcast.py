"""Broadcast-3 and Broadcast-1: a tensor replicated to the shape ``target_shape`` gives, by numpy,
explicit or (version 3) bidirectional rules."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops import raw
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
    narrowed_by_the_cpu_plugin,
)
from app.ops.errors import SpecError
from app.ops.raw import as_raw, is_integer_type

#: The modes of each version: Broadcast-1 has no bidirectional mode.
MODES = {3: ("numpy", "explicit", "bidirectional"), 1: ("numpy", "explicit")}


def _vector(name: str, array: npt.NDArray[Any]) -> list[int]:
    if not is_integer_type(array.dtype):
        raise SpecError(
            name, f"{name} must be of an integer type (T_SHAPE), got {array.dtype.name}"
        )
    if array.ndim != 1:
        raise SpecError(
            name, f"{name} must be a 1D tensor, got a tensor of shape {list(array.shape)}"
        )
    return [int(value) for value in array.tolist()]


def broadcast_shapes(
    data_shape: tuple[int, ...],
    target_shape: npt.NDArray[Any],
    axes_mapping: npt.NDArray[Any] | None,
    mode: str,
    version: int = 3,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Check the inputs against the spec; the output's shape, and data's shape with ones
    inserted where data has no axis (the shape data is viewed as, to broadcast it). Python
    integers: an output no array could hold is admission's to refuse, before anything exists."""
    if mode not in MODES[version]:
        choices = ", ".join(f'"{choice}"' for choice in MODES[version])
        raise SpecError("mode", f"mode of Broadcast-{version} must be one of {choices}")
    target = _vector("target_shape", target_shape)
    for position, size in enumerate(target):
        if size < 0:
            raise SpecError(
                "target_shape",
                f"target_shape[{position}] = {size}: a dimension cannot be negative",
            )
    rank = len(data_shape)
    if mode != "explicit":
        if axes_mapping is not None:
            raise SpecError(
                "axes_mapping",
                f"axes_mapping must not be provided with mode {mode}: it is needed for mode "
                "explicit only",
            )
        if mode == "numpy":
            return _numpy_shapes(data_shape, target), (1,) * (len(target) - rank) + data_shape
        aligned = (1,) * (len(target) - rank) + data_shape
        return _bidirectional_shape(aligned, target), aligned
    if axes_mapping is None:
        raise SpecError("axes_mapping", "axes_mapping is required with mode explicit")
    axes = _vector("axes_mapping", axes_mapping)
    return tuple(target), _explicit_alignment(data_shape, target, axes)


def _numpy_shapes(data_shape: tuple[int, ...], target: list[int]) -> tuple[int, ...]:
    rank = len(data_shape)
    if rank > len(target):
        raise SpecError(
            "target_shape",
            f"target_shape has {len(target)} elements, fewer than data has dimensions ({rank}): "
            "numpy mode broadcasts data to target_shape, not the other way",
        )
    offset = len(target) - rank
    for axis, size in enumerate(data_shape):
        wanted = target[offset + axis]
        if size not in (1, wanted):
            raise SpecError(
                "target_shape",
                f"target_shape[{offset + axis}] = {wanted} does not match data's dimension "
                f"{axis} ({size}): in numpy mode a dimension of data must equal the target's "
                "or be 1",
            )
    return tuple(target)


def _bidirectional_shape(aligned: tuple[int, ...], target: list[int]) -> tuple[int, ...]:
    target = [1] * (len(aligned) - len(target)) + target
    shape = []
    for axis, (size, wanted) in enumerate(zip(aligned, target, strict=True)):
        if size != wanted and 1 not in (size, wanted):
            raise SpecError(
                "target_shape",
                f"target_shape's dimension {wanted} and data's {size} (output axis {axis}, "
                "right-aligned) must be equal, or one of them 1",
            )
        # As numpy.array(input) * numpy.ones(target_shape): 1 against 0 is 0.
        shape.append(wanted if size == 1 else size)
    return tuple(shape)


def _explicit_alignment(
    data_shape: tuple[int, ...], target: list[int], axes: list[int]
) -> tuple[int, ...]:
    rank = len(data_shape)
    if len(axes) != rank:
        raise SpecError(
            "axes_mapping",
            f"axes_mapping must have one element per dimension of data ({rank}), got {len(axes)}",
        )
    aligned = [1] * len(target)
    for position, axis in enumerate(axes):
        if not 0 <= axis < len(target):
            raise SpecError(
                "axes_mapping",
                f"axes_mapping[{position}] = {axis} is not an axis of the output (rank "
                f"{len(target)}): it must be in [0, {len(target) - 1}]",
            )
        if position and axis <= axes[position - 1]:
            raise SpecError(
                "axes_mapping",
                f"axes_mapping must be sorted, each axis once: axes_mapping[{position}] = {axis} "
                f"follows {axes[position - 1]}",
            )
        if data_shape[position] not in (1, target[axis]):
            raise SpecError(
                "axes_mapping",
                f"data's dimension {position} ({data_shape[position]}) is mapped to output axis "
                f"{axis} of target_shape {target[axis]}: it must equal it or be 1",
            )
        aligned[axis] = data_shape[position]
    return tuple(aligned)


def broadcast(
    data: npt.ArrayLike,
    target_shape: npt.ArrayLike,
    axes_mapping: npt.ArrayLike | None = None,
    mode: str = "numpy",
    out: npt.NDArray[Any] | None = None,
    version: int = 3,
) -> npt.NDArray[Any]:
    """Broadcast-3 (or -1): ``data`` replicated to ``target_shape``; into ``out`` if given."""
    data = np.asarray(data)
    mapping = None if axes_mapping is None else np.asarray(axes_mapping)
    shape, aligned = broadcast_shapes(data.shape, np.asarray(target_shape), mapping, mode, version)
    return _broadcast(data, aligned, shape, out)


def _broadcast(
    data: npt.NDArray[Any],
    aligned: tuple[int, ...],
    shape: tuple[int, ...],
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(shape, data.dtype)
    source = np.broadcast_to(as_raw(data).reshape(aligned), shape)
    target = as_raw(out)
    if raw.streams_runs(aligned, shape, out):
        raw.copy_view(target, target, as_raw(data), source)
    else:
        np.copyto(target, source, casting="equiv")
    return out


def _planner(version: int) -> Any:
    def plan(arrays: Arrays, attributes: Attributes) -> Plan:
        data = arrays["data"]
        shape, aligned = broadcast_shapes(
            data.shape,
            arrays["target_shape"],
            arrays.get("axes_mapping"),
            attributes.get("mode", "numpy"),
            version,
        )
        return Plan(shape, lambda out: _broadcast(data, aligned, shape, out))

    return plan


plan_3 = _planner(3)
plan_1 = _planner(1)


def _inputs(version: int) -> tuple[Input, ...]:
    return (
        data_input("broadcast"),
        Input(
            "target_shape",
            "The output's shape (input 2, type T_SHAPE).",
            "T_SHAPE: any integer type, a 1D tensor of dimensions of 0 or more. JSON form is "
            "int64.",
            INTEGER_TYPES,
            rank="1",
            limit="rank",  # the output's rank: counted on its shape before it is read
        ),
        Input(
            "axes_mapping",
            "The output axis of each axis of data, sorted (input 3, type T_SHAPE; explicit mode "
            "only, where it is required).",
            "T_SHAPE: any integer type, a 1D tensor of rank(data) increasing axes in "
            "[0, len(target_shape) - 1]. JSON form is int64.",
            INTEGER_TYPES,
            rank="1",
            limit="rank",
            optional=True,
        ),
    )


def _mode(version: int) -> Attribute:
    words = "`numpy` (data to target_shape), `explicit` (axes_mapping gives each data axis's "
    words += "place)" + (
        ", `bidirectional` (as data * ones(target_shape))." if version == 3 else "."
    )
    return Attribute("mode", "numpy", "The broadcasting rule: " + words, choices=MODES[version])


# fmt: off
#: The spec's examples, their 50s as 3s (the spec's 40,000-element outputs are the tests' own,
#: tests/ops/test_broadcast.py), and the rules' edges.
_COLUMN = [[[1]], [[2]], [[3]], [[4]]]
_EXAMPLES: list[tuple[str, str, dict[str, Any], Any, int]] = [
    ("example_numpy", "numpy: (4, 1, 1) to [1, 4, 3, 3]",
     {"data": _COLUMN, "target_shape": [1, 4, 3, 3], "mode": "numpy"},
     [[[[v] * 3] * 3 for v in (1, 2, 3, 4)]], 1),
    ("example_explicit_1", "explicit: (4,) to [1, 4, 3, 3], axes_mapping [1]",
     {"data": [1, 2, 3, 4], "target_shape": [1, 4, 3, 3], "axes_mapping": [1],
      "mode": "explicit"},
     [[[[v] * 3] * 3 for v in (1, 2, 3, 4)]], 1),
    ("example_explicit_2", "explicit: (3, 3) to [1, 3, 3, 2], axes_mapping [1, 2]",
     {"data": [[1, 2, 3], [4, 5, 6], [7, 8, 9]], "target_shape": [1, 3, 3, 2],
      "axes_mapping": [1, 2], "mode": "explicit"},
     [[[[v, v] for v in row] for row in ([1, 2, 3], [4, 5, 6], [7, 8, 9])]], 1),
    ("example_bidirectional", "bidirectional: (4, 1, 1) against [1, 1, 3, 3]",
     {"data": _COLUMN, "target_shape": [1, 1, 3, 3], "mode": "bidirectional"},
     [[[[v] * 3] * 3 for v in (1, 2, 3, 4)]], 3),
    ("example_bidirectional_zero", "bidirectional: a 1 against a 0 is 0",
     {"data": [[1, 2]], "target_shape": [0, 1], "mode": "bidirectional"}, [], 3),
]
# fmt: on


def _examples(version: int) -> dict[str, dict[str, Any]]:
    return {name: example(f"Broadcast-{version}, {summary}", request, output)
            for name, summary, request, output, since in _EXAMPLES if version >= since}  # fmt: skip


_DECISIONS = (
    "explicit mode, a data dimension of 1 mapped to a larger output dimension: replicated, as in "
    "numpy mode (the spec maps axes and says nothing of their sizes; OpenVINO does the same).",
    'explicit mode, axes_mapping "should be sorted": taken as strictly increasing (an axis '
    "mapped twice is refused), each in [0, len(target_shape) - 1]; a negative axis is refused "
    "(the spec gives none a meaning).",
    'numpy and bidirectional modes with axes_mapping given (it "shouldn\'t be provided"): '
    "refused naming axes_mapping.",
    "numpy mode, target_shape shorter than data's rank, or a data dimension that is neither 1 "
    "nor the target's (0 against 1 included): refused naming target_shape (data is broadcast to "
    "target_shape, not the other way).",
    "the spec's examples broadcast to 50 x 50: /docs shows them with 3 x 3 (the tests run the "
    "spec's own shapes).",
)

OP = Op(
    name="broadcast",
    spec="Broadcast-3",
    summary="Broadcast-3: replicate a tensor to a shape (numpy, explicit or bidirectional)",
    description="Broadcast-3 of `data` to the shape `target_shape` gives: in `numpy` mode data "
    "is right-aligned and each of its dimensions must be 1 or the target's; in `explicit` mode "
    "`axes_mapping` places each axis of data; in `bidirectional` mode the output is the shape "
    "of data * ones(target_shape) (right-aligned, a 1 on either side takes the other's size, 0 "
    "included). The output's size is checked before anything is allocated.",
    request_doc="Broadcast-3: `data` replicated to `target_shape` by `mode`'s rule.",
    inputs=_inputs(3),
    attributes=(_mode(3),),
    plan=plan_3,
    examples=_examples(3),
    decisions=(
        *(f"Broadcast-3, {line}" for line in _DECISIONS),
        'Broadcast-3, T is "any numeric type": every supported type is taken, bool included '
        "(the op only copies elements).",
        "Broadcast-3, bidirectional mode: a dimension of 1 against 0 (either side) gives 0, as "
        "numpy.array(input) * numpy.ones(target_shape) does.",
    ),
    disagreements=(
        *narrowed_by_the_cpu_plugin("Broadcast-3"),
        "Broadcast-3 bidirectional, data of shape (1,) against target_shape [0]: the spec's rule "
        "gives shape (0,); the CPU plugin gives (1,).",
        "Broadcast-3 bidirectional, data of shape (0,) against target_shape [1]: the spec's rule "
        "gives shape (0,); the CPU plugin refuses to compile the model (ConvertBroadcast3).",
    ),
)

OP_1 = Op(
    name="broadcast",
    spec="Broadcast-1",
    summary="Broadcast-1: replicate a tensor to a shape (numpy or explicit)",
    description="Broadcast-1 of `data` to the shape `target_shape` gives: in `numpy` mode data "
    "is right-aligned and each of its dimensions must be 1 or the target's; in `explicit` mode "
    "`axes_mapping` places each axis of data. No bidirectional mode (Broadcast-3 has it).",
    request_doc="Broadcast-1: `data` replicated to `target_shape` by `mode`'s rule.",
    inputs=_inputs(1),
    attributes=(_mode(1),),
    plan=plan_1,
    examples=_examples(1),
    decisions=(
        *(f"Broadcast-1, {line}" for line in _DECISIONS),
        "Broadcast-1, the spec's second input is spelled `taget_shape`: named target_shape.",
    ),
    disagreements=narrowed_by_the_cpu_plugin("Broadcast-1"),
)

OLDER: tuple[Op, ...] = (OP_1,)
