"""Broadcast-3 and Broadcast-1: a tensor replicated to the shape ``target_shape`` gives, by numpy,
explicit or (version 3) bidirectional rules."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import Arrays, Attributes, Plan
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
    np.copyto(as_raw(out), source, casting="equiv")
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
