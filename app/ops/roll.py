"""Roll-7: shift the elements of a tensor along the given axes, wrapping around."""

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.errors import SpecError
from app.ops.raw import as_raw

#: T_IND_1 and T_IND_2 of the spec: the element types ``shift`` and ``axes`` may have.
ROLL_INDEX_TYPES = (np.dtype(np.int32), np.dtype(np.int64))

# Rolling k axes by slices copies 2**k blocks; past this many rolled axes an index mesh is cheaper.
_MAX_SLICED_AXES = 6


def _describe(name: str, array: npt.NDArray[Any], position: int) -> str:
    return name if array.ndim == 0 else f"{name}[{position}]"


def _check_index_input(name: str, array: npt.NDArray[Any]) -> None:
    if array.dtype.newbyteorder("=") not in ROLL_INDEX_TYPES:
        raise SpecError(name, f"{name} must be of type int32 or int64, got {array.dtype.name}")
    if array.ndim > 1:
        raise SpecError(
            name, f"{name} must be a scalar or a 1D tensor, got a tensor of shape {array.shape}"
        )


def roll_shifts(
    data_shape: tuple[int, ...], shift: npt.ArrayLike, axes: npt.ArrayLike
) -> dict[int, int]:
    """Check ``shift`` and ``axes`` against the spec and return the net shift of each axis.

    The result maps each normalised axis to its total shift, reduced modulo the axis length:
    repeated axes add their shifts up, and axes whose net shift is zero are left out.
    """
    shift = np.asarray(shift)
    axes = np.asarray(axes)
    _check_index_input("shift", shift)
    _check_index_input("axes", axes)
    if shift.ndim == 1 and (axes.ndim != 1 or axes.shape[0] != shift.shape[0]):
        raise SpecError(
            "shift",
            "if shift is a 1D tensor, axes must be a 1D tensor of the same size, "
            f"got shift of shape {shift.shape} and axes of shape {axes.shape}",
        )
    rank = len(data_shape)
    # The spec gives no axes range for a scalar; OpenVINO's validation takes a scalar as rank 1
    # (axes 0 and -1 allowed, the output being the input), and so does this kernel.
    axes_rank = max(rank, 1)
    axes_flat = axes.astype(np.int64).reshape(-1)
    outside = np.flatnonzero((axes_flat < -axes_rank) | (axes_flat >= axes_rank))
    if outside.size:
        position = int(outside[0])
        raise SpecError(
            "axes",
            f"{_describe('axes', axes, position)} = {int(axes_flat[position])} is out of range "
            f"for data of rank {rank} (allowed values: [{-axes_rank}, {axes_rank - 1}])",
        )
    if rank == 0:
        return {}
    axes_flat = np.where(axes_flat < 0, axes_flat + rank, axes_flat)
    shifts_flat = np.broadcast_to(shift.astype(np.int64).reshape(-1), axes_flat.shape)
    if not axes_flat.size or 0 in data_shape:
        return {}
    lengths = np.asarray(data_shape, dtype=np.int64)[axes_flat]
    # Reduce each shift first: the sum of raw int64 shifts could overflow, the sum of remainders
    # (each below an axis length of a tensor that fits in memory) cannot.
    totals = np.zeros(rank, dtype=np.int64)
    np.add.at(totals, axes_flat, shifts_flat % lengths)
    net: dict[int, int] = {}
    for axis in np.unique(axes_flat).tolist():
        amount = int(totals[axis]) % data_shape[axis]
        if amount:
            net[axis] = amount
    return net


def roll(data: npt.ArrayLike, shift: npt.ArrayLike, axes: npt.ArrayLike) -> npt.NDArray[Any]:
    """Roll-7: ``data`` with its elements shifted by ``shift`` along ``axes``.

    ``shift`` and ``axes`` are scalars or 1D tensors of int32 or int64. A scalar shift applies to
    every axis given; a 1D shift pairs with a 1D ``axes`` of the same size. Negative axes count
    from the end; an axis given several times is rolled by the sum of its shifts. The output has
    the shape and type of ``data``.
    """
    data = np.asarray(data)
    net = roll_shifts(data.shape, shift, axes)
    source = as_raw(data)
    out = np.empty(data.shape, dtype=source.dtype)
    if not net:
        np.copyto(out, source)
    elif len(net) <= _MAX_SLICED_AXES:
        _roll_by_blocks(source, out, net)
    else:
        _roll_by_mesh(source, out, net)
    return out.view(data.dtype)


def _roll_by_blocks(source: npt.NDArray[Any], out: npt.NDArray[Any], net: dict[int, int]) -> None:
    # Along one axis of length n rolled by s, out[s:] = source[:n-s] and out[:s] = source[n-s:].
    # Over k axes that is 2**k block copies, each written once: a single pass over the data.
    halves = []
    for axis, amount in net.items():
        length = source.shape[axis]
        halves.append(
            [
                (axis, slice(amount, None), slice(None, length - amount)),
                (axis, slice(None, amount), slice(length - amount, None)),
            ]
        )
    for combination in itertools.product(*halves):
        target = [slice(None)] * source.ndim
        origin = [slice(None)] * source.ndim
        for axis, target_slice, origin_slice in combination:
            target[axis] = target_slice
            origin[axis] = origin_slice
        out[tuple(target)] = source[tuple(origin)]


def _roll_by_mesh(source: npt.NDArray[Any], out: npt.NDArray[Any], net: dict[int, int]) -> None:
    positions = []
    for axis, length in enumerate(source.shape):
        index = np.arange(length, dtype=np.intp)
        if axis in net:
            index = (index - net[axis]) % length
        positions.append(index)
    out[...] = source[np.ix_(*positions)]
