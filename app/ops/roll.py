"""Roll-7: shift the elements of a tensor along the given axes, wrapping around."""

import itertools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.errors import SpecError
from app.ops.raw import as_raw

#: T_IND_1 and T_IND_2 of the spec: the element types ``shift`` and ``axes`` may have.
ROLL_INDEX_TYPES = (np.dtype(np.int32), np.dtype(np.int64))
# Their type numbers, the same in either byte order: a cheap membership test.
_ROLL_INDEX_NUMBERS = frozenset(dtype.num for dtype in ROLL_INDEX_TYPES)

# Rolling k axes by slices copies 2**k blocks; past this many rolled axes an index mesh is cheaper.
_MAX_SLICED_AXES = 6
# Up to this many axes entries, shifts are summed in Python integers.
_SMALL = 64
# Up to this many runs, a shifted flat copy is done run by run (each a memmove).
_FEW_RUNS = 256
# Tensors up to this many elements take the plain path: per-call overhead dominates there.
_SMALL_TENSOR = 1 << 16


def _describe(name: str, array: npt.NDArray[Any], position: int) -> str:
    return name if array.ndim == 0 else f"{name}[{position}]"


def _check_index_input(name: str, array: npt.NDArray[Any]) -> None:
    if array.dtype.num not in _ROLL_INDEX_NUMBERS:
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
    if axes.size <= _SMALL:
        return _net_shifts_small(data_shape, shift, axes, axes_rank)
    axes_flat = axes.astype(np.int64).reshape(-1)
    outside = np.flatnonzero((axes_flat < -axes_rank) | (axes_flat >= axes_rank))
    if outside.size:
        position = int(outside[0])
        _out_of_range(axes, position, int(axes_flat[position]), rank)
    if rank == 0:
        return {}
    axes_flat = np.where(axes_flat < 0, axes_flat + rank, axes_flat)
    shifts_flat = np.broadcast_to(shift.astype(np.int64).reshape(-1), axes_flat.shape)
    if 0 in data_shape:
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


def _out_of_range(axes: npt.NDArray[Any], position: int, value: int, rank: int) -> None:
    axes_rank = max(rank, 1)
    raise SpecError(
        "axes",
        f"{_describe('axes', axes, position)} = {value} is out of range "
        f"for data of rank {rank} (allowed values: [{-axes_rank}, {axes_rank - 1}])",
    )


def _net_shifts_small(
    data_shape: tuple[int, ...],
    shift: npt.NDArray[Any],
    axes: npt.NDArray[Any],
    axes_rank: int,
) -> dict[int, int]:
    # Few axes: Python integers, exact at any size and cheaper than array calls.
    axes_list = axes.reshape(-1).tolist()
    shifts_list = shift.reshape(-1).tolist() if shift.ndim else [shift.item()] * len(axes_list)
    for position, axis in enumerate(axes_list):
        if not -axes_rank <= axis < axes_rank:
            _out_of_range(axes, position, axis, len(data_shape))
    rank = len(data_shape)
    if rank == 0 or 0 in data_shape:
        return {}
    totals: dict[int, int] = {}
    for axis, amount in zip(axes_list, shifts_list, strict=True):
        normal = axis + rank if axis < 0 else axis
        totals[normal] = (totals.get(normal, 0) + amount) % data_shape[normal]
    return {axis: amount for axis, amount in totals.items() if amount}


def roll(
    data: npt.ArrayLike,
    shift: npt.ArrayLike,
    axes: npt.ArrayLike,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """Roll-7: ``data`` with its elements shifted by ``shift`` along ``axes``.

    ``shift`` and ``axes`` are scalars or 1D tensors of int32 or int64. A scalar shift applies to
    every axis given; a 1D shift pairs with a 1D ``axes`` of the same size. Negative axes count
    from the end; an axis given several times is rolled by the sum of its shifts. The output has
    the shape and type of ``data``; ``out``, if given, is a C-contiguous array of that shape and
    item size that receives it (a response buffer, say).
    """
    data = np.asarray(data)
    net = roll_shifts(data.shape, shift, axes)
    source = as_raw(data)
    if out is None:
        out = np.empty(data.shape, dtype=data.dtype)
    target = as_raw(out)
    if not net:
        np.copyto(target, source)
    elif len(net) > _MAX_SLICED_AXES:
        _roll_by_mesh(source, target, net)
    else:
        _roll_by_blocks(source, target, net)
    return out


def roll_workspace(
    data_shape: tuple[int, ...], itemsize: int, shift: npt.ArrayLike, axes: npt.ArrayLike
) -> int:
    """The most bytes ``roll`` holds beyond its input and output: none when it copies blocks,
    a whole output's worth when more axes roll than blocks pay for (an index mesh's gather)."""
    # Fewer axes entries than blocks pay for cannot roll more axes than that: no second check.
    if np.size(axes) <= _MAX_SLICED_AXES:
        return 0
    if len(roll_shifts(data_shape, shift, axes)) <= _MAX_SLICED_AXES:
        return 0
    return math.prod(data_shape) * itemsize


def _roll_by_blocks(source: npt.NDArray[Any], out: npt.NDArray[Any], net: dict[int, int]) -> None:
    # Along one axis of length n rolled by s, out[s:] = source[:n-s] and out[:s] = source[n-s:].
    # The outer rolled axes split the tensor into 2**(k-1) such blocks; within each, the innermost
    # rolled axis is rolled by _roll_innermost. Every element is written once (a single pass),
    # but for a small seam.
    *outer, innermost = sorted(net)
    halves = []
    for axis in outer:
        length, amount = source.shape[axis], net[axis]
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
        _roll_innermost(source[tuple(origin)], out[tuple(target)], innermost, net[innermost])


def _roll_innermost(
    source: npt.NDArray[Any], out: npt.NDArray[Any], axis: int, amount: int
) -> None:
    """Roll ``source`` into ``out`` along ``axis``, the last rolled one, by ``amount`` > 0.

    Two block copies would each run in pieces of (length - amount) x inner elements, and NumPy
    copies such strided pieces slowly when they are misaligned. Instead, where the dimensions
    from ``axis - 1`` on are contiguous, the whole stretch is copied as one flat run shifted by
    ``amount x inner`` elements, which is right everywhere but in the seam of ``min(amount,
    length - amount)`` rows per step of ``axis``, copied again after.
    """
    length = source.shape[axis]
    inner = math.prod(source.shape[axis + 1 :])
    lead = source.shape[: max(axis - 1, 0)]
    steps = source.shape[axis - 1] if axis > 0 else 1
    flat_shape = (*lead, steps * length * inner)
    seam_shape = (*lead, steps, length, inner)
    try:
        if source.size <= _SMALL_TENSOR:
            raise ValueError  # small: two plain block copies cost fewer calls
        source_flat = source.reshape(flat_shape, copy=False)
        out_flat = out.reshape(flat_shape, copy=False)
    except ValueError:
        # A small or strided input: two block copies along the axis.
        index = [slice(None)] * source.ndim
        for out_part, source_part in (
            (slice(amount, None), slice(None, length - amount)),
            (slice(None, amount), slice(length - amount, None)),
        ):
            index[axis] = out_part
            target = tuple(index)
            index[axis] = source_part
            out[target] = source[tuple(index)]
        return
    total = flat_shape[-1]
    source_seam = source.reshape(seam_shape)
    out_seam = out.reshape(seam_shape)
    if amount <= length - amount:
        offset = amount * inner
        _copy_runs(out_flat[..., offset:], source_flat[..., : total - offset])
        out_seam[..., :amount, :] = source_seam[..., length - amount :, :]
    else:
        offset = (length - amount) * inner
        _copy_runs(out_flat[..., : total - offset], source_flat[..., offset:])
        out_seam[..., amount:, :] = source_seam[..., : length - amount, :]


def _copy_runs(out: npt.NDArray[Any], source: npt.NDArray[Any]) -> None:
    # A 1D copy is a memmove; NumPy's 2D copies of misaligned runs are several times slower,
    # so a few long runs are copied one by one.
    if out.ndim > 1 and math.prod(out.shape[:-1]) <= _FEW_RUNS:
        for index in np.ndindex(out.shape[:-1]):
            out[index] = source[index]
    else:
        out[...] = source


def _roll_by_mesh(source: npt.NDArray[Any], out: npt.NDArray[Any], net: dict[int, int]) -> None:
    positions = []
    for axis, length in enumerate(source.shape):
        index = np.arange(length, dtype=np.intp)
        if axis in net:
            index = (index - net[axis]) % length
        positions.append(index)
    out[...] = source[np.ix_(*positions)]
