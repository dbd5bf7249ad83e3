"""Roll-7: shift the elements of a tensor along the given axes, wrapping around."""

import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops import loops
from app.ops.declaration import (
    Arrays,
    Attributes,
    Input,
    Op,
    Plan,
    data_input,
    example,
)
from app.ops.errors import SpecError
from app.ops.raw import as_raw, into_c_ordered
from tensor_ops_wire.npy import encode_npy_base64

#: T_IND_1 and T_IND_2 of the spec: the element types ``shift`` and ``axes`` may have.
ROLL_INDEX_TYPES = (np.dtype(np.int32), np.dtype(np.int64))
# Their type numbers, the same in either byte order: a cheap membership test.
_ROLL_INDEX_NUMBERS = frozenset(dtype.num for dtype in ROLL_INDEX_TYPES)

# Up to this many axes entries, shifts are summed in Python integers.
_SMALL = 64
# Beyond that, they are read this many at a time (a few MiB of temporaries at most).
_BLOCK = 1 << 16
# The table of a roll with no dimensions before its rows.
_NO_DIMENSIONS = np.zeros(0, np.int64)
_BYTE, _WORD = np.dtype(np.uint8), np.dtype(np.uint64)
# Outputs of at least this many bytes are rolled by a few large copies (_roll_in_blocks) when
# at most this many blocks make them: from 8 MiB when only the first axis rolls (two copies),
# else from 32 MiB (input and output then outgrow the L3 cache; below, the compiled loop's copy
# beats the flat copy's seams).
_LARGE_RUNS = 8 << 20
_LARGE = 32 << 20
_MAX_BLOCKS = 64


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
    # Many axes (the spec lets an axis repeat, its shifts adding up): read a block at a time,
    # so the temporaries are a few blocks' worth whatever the length (axes and shift are
    # tensors counted as tensors: 4 million of each cost their decoding, and no more).
    axes_flat = axes.reshape(-1)
    shifts_flat = shift.reshape(-1)
    lengths = np.asarray(data_shape if rank else (1,), dtype=np.int64)
    # Each block's shifts are reduced first: the sum of raw int64 shifts could overflow, the
    # sum of remainders (each below an axis length of a tensor that fits in memory) cannot.
    totals = np.zeros(axes_rank, dtype=np.int64)
    empty = 0 in data_shape
    for first in range(0, axes_flat.size, _BLOCK):
        block = axes_flat[first : first + _BLOCK].astype(np.int64)
        outside = np.flatnonzero((block < -axes_rank) | (block >= axes_rank))
        if outside.size:
            position = first + int(outside[0])
            _out_of_range(axes, position, int(axes_flat[position]), rank)
        if rank == 0 or empty:
            continue  # every axis checked; nothing moves
        block %= rank
        amounts = (
            np.int64(shifts_flat[0])
            if shift.ndim == 0
            else shifts_flat[first : first + _BLOCK].astype(np.int64)
        )
        np.add.at(totals, block, amounts % lengths[block])
        totals %= lengths
    if rank == 0 or empty:
        return {}
    return {axis: int(amount) for axis, amount in enumerate(totals.tolist()) if amount}


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
    axes_list = axes.tolist() if axes.ndim else [axes.item()]
    shifts_list = shift.tolist() if shift.ndim else [shift.item()] * len(axes_list)
    for position, axis in enumerate(axes_list):
        if not -axes_rank <= axis < axes_rank:
            _out_of_range(axes, position, axis, len(data_shape))
    rank = len(data_shape)
    if rank == 0 or 0 in data_shape:
        return {}
    if len(axes_list) == 1:  # one axis, one shift: the commonest roll, without the tally
        axis = axes_list[0]
        normal = axis + rank if axis < 0 else axis
        amount = shifts_list[0] % data_shape[normal]
        return {normal: amount} if amount else {}
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
    the shape and type of ``data``; ``out``, if given, is an array of that shape and item size
    that receives it (a response buffer, say).
    """
    data = np.asarray(data)
    return roll_planned(data, roll_shifts(data.shape, shift, axes), out)


def roll_planned(
    data: npt.NDArray[Any], net: dict[int, int], out: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any]:
    """``roll`` with the inputs already checked: ``net`` is ``roll_shifts``' for them."""
    if not net:
        target = np.empty(data.shape, dtype=data.dtype) if out is None else out
        np.copyto(as_raw(target), as_raw(data))
        return target
    if out is not None and out.size and out.flags.c_contiguous:
        _roll_into(data, net, out)  # what into_c_ordered does with it, without its closure
        return out
    return into_c_ordered(out, data.shape, data.dtype, lambda target: _roll_into(data, net, target))


def _roll_into(data: npt.NDArray[Any], net: dict[int, int], out: npt.NDArray[Any]) -> None:
    """Roll into ``out`` (C-contiguous, not empty) by the compiled loop, as bytes (or 8-byte
    words), whatever the element type.

    The dimensions from the last rolled axis on make rows, each rolled within by two run copies;
    each output row comes from the source row at its index less the shifts of the axes before
    (an odometer over them, so any number of rolled axes costs no index arrays).
    """
    shape = data.shape
    last = max(net)
    itemsize = data.dtype.itemsize
    inner = itemsize
    for length in shape[last + 1 :]:
        inner *= length
    row = shape[last] * inner
    split = net[last] * inner
    if last:
        lengths = shape[:last]
        strides = [1] * last
        for axis in range(last - 1, 0, -1):
            strides[axis - 1] = strides[axis] * lengths[axis]
        table = np.array([*lengths, *[net.get(axis, 0) for axis in range(last)], *strides])
    else:
        table = _NO_DIMENSIONS
    # ravel: a view of a C-contiguous input, a C-ordered copy of a strided one.
    source, target = data.ravel(), out.ravel()
    unit = _WORD if row % 8 == 0 and split % 8 == 0 else _BYTE
    source, target = source.view(unit), target.view(unit)
    row //= unit.itemsize
    split //= unit.itemsize
    large = _LARGE_RUNS if last == 0 else _LARGE
    if out.nbytes >= large and _roll_in_blocks(source, target, shape[:last], net, row, split):
        return
    # Whole 8-byte words are copied a word at a time, however long the runs.
    loops.roll_rows(source, target, table, row, split)


def _roll_in_blocks(
    source: npt.NDArray[Any],
    out: npt.NDArray[Any],
    lengths: tuple[int, ...],
    net: dict[int, int],
    row: int,
    split: int,
) -> bool:
    """Roll a large tensor by a few flat copies and the seams they leave; False if it would take
    more than ``_MAX_BLOCKS`` blocks (the compiled loop does it then).

    A flat copy of many megabytes is memcpy's: it writes large blocks without reading them into
    the cache first, which a loop of ordinary stores cannot do (a compiled copy of 64 MiB takes
    1.7 times as long). Output rows whose source rows are consecutive make a block: at most one
    dimension before the rows may be rolled, and each of its ``2 x`` (the dimensions before it)
    runs is one. One flat copy of a block, shifted by ``split``, is right but for
    ``min(split, row - split)`` elements a row (the seam), copied after.
    """
    rolled = [axis for axis in net if axis < len(lengths)]
    if len(rolled) > 1:
        return False
    if rolled:
        axis = rolled[0]
        before = math.prod(lengths[:axis])
        after = math.prod(lengths[axis + 1 :])
        length, amount = lengths[axis], net[axis]
        if 2 * before > _MAX_BLOCKS:
            return False
        blocks = []
        for index in range(before):
            first = index * length * after
            blocks.append((first + amount * after, first, (length - amount) * after))
            blocks.append((first, first + (length - amount) * after, amount * after))
    else:
        blocks = [(0, 0, math.prod(lengths))]
    tail = row - split
    for target_row, source_row, rows in blocks:
        begin, origin, size = target_row * row, source_row * row, rows * row
        into = out[begin : begin + size]
        taken = source[origin : origin + size]
        if split <= tail:
            np.copyto(into[split:], taken[: size - split])
            np.copyto(into.reshape(rows, row)[:, :split], taken.reshape(rows, row)[:, tail:])
        else:
            np.copyto(into[: size - tail], taken[tail:])
            np.copyto(into.reshape(rows, row)[:, split:], taken.reshape(rows, row)[:, :tail])
    return True


def roll_workspace(
    data_shape: tuple[int, ...], itemsize: int, shift: npt.ArrayLike, axes: npt.ArrayLike
) -> int:
    """The most bytes ``roll`` holds beyond its input and output: none (the compiled loop walks
    the rolled axes with an odometer of a few integers, however many there are)."""
    return 0


# ------------------------------------------------------------------------------------------------
# The declaration


_ROLL_INDEX = tuple(dtype.name for dtype in ROLL_INDEX_TYPES)
_MATRIX = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]


def _plan_roll(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    net = roll_shifts(data.shape, arrays["shift"], arrays["axes"])
    return Plan(data.shape, functools.partial(roll_planned, data, net))


def _roll_workspace(arrays: Arrays, attributes: Attributes) -> int:
    data = arrays["data"]
    return roll_workspace(data.shape, data.dtype.itemsize, arrays["shift"], arrays["axes"])


OP = Op(
    name="roll",
    position=0,
    spec="Roll-7",
    summary="Roll-7: shift elements along axes, wrapping around",
    description="Roll-7 over `data`: the output has the shape and type of `data`, its elements "
    "shifted by `shift` along `axes` (repeated axes add their shifts; negative axes count from "
    "the end). Send JSON (tensors as nested arrays or base64 .npy) or an .npz archive.",
    request_doc="Roll-7: shift the elements of `data` by `shift` along `axes`.",
    inputs=(
        data_input("roll"),
        Input(
            "shift",
            "Places to shift by (input 2, type T_IND_1).",
            "T_IND: int32 or int64, a scalar or a 1D tensor. JSON form is int64; npy form must be "
            "int32 or int64.",
            _ROLL_INDEX,
        ),
        Input(
            "axes",
            "Axes to shift along (input 3, type T_IND_2).",
            "T_IND: int32 or int64, a scalar or a 1D tensor. JSON form is int64; npy form must be "
            "int32 or int64.",
            _ROLL_INDEX,
        ),
    ),
    plan=_plan_roll,
    workspace=_roll_workspace,
    examples={
        "example_1": example(
            "Roll-7 Example 1: shift = 1, axes = 0",
            {"data": _MATRIX, "shift": 1, "axes": 0},
            [[10, 11, 12], [1, 2, 3], [4, 5, 6], [7, 8, 9]],
        ),
        "example_2": example(
            "Roll-7 Example 2: shift = [-1, 2], axes = [0, 1]",
            {"data": _MATRIX, "shift": [-1, 2], "axes": [0, 1]},
            [[5, 6, 4], [8, 9, 7], [11, 12, 10], [2, 3, 1]],
        ),
        "example_3": example(
            "Roll-7 Example 3: shift = [1, 2, 1], axes = [0, 1, 0] (axis 0 rolled by 1 + 1)",
            {"data": _MATRIX, "shift": [1, 2, 1], "axes": [0, 1, 0]},
            [[8, 9, 7], [11, 12, 10], [2, 3, 1], [5, 6, 4]],
        ),
        "example_1_npy": example(
            "Roll-7 Example 1 with data as base64 .npy (int64, shape (4, 3)); the output comes "
            "back so",
            {"data": encode_npy_base64(np.array(_MATRIX, dtype=np.int64)), "shift": 1, "axes": 0},
            [[10, 11, 12], [1, 2, 3], [4, 5, 6], [7, 8, 9]],
        ),
    },
)
