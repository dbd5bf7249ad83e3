"""SliceScatter-15: a copy of a tensor whose slice ``data[start:stop:step]`` along ``axes`` is
replaced by ``updates``."""

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops import loops
from app.ops.declaration import (
    ALL_TYPES,
    DATA_CONSTRAINT,
    INTEGER_TYPES,
    Arrays,
    Attributes,
    Input,
    Op,
    Plan,
    data_input,
    example,
    narrowed_by_the_cpu_plugin,
)
from app.ops.errors import SpecError
from app.ops.raw import STREAM_BYTES, as_raw, is_integer_type


def _vector(name: str, array: npt.NDArray[Any], kind: str) -> list[int]:
    if not is_integer_type(array.dtype):
        raise SpecError(name, f"{name} must be of an integer type ({kind}), got {array.dtype.name}")
    if array.ndim != 1:
        raise SpecError(
            name, f"{name} must be a 1D tensor, got a tensor of shape {list(array.shape)}"
        )
    return [int(value) for value in array.tolist()]


def slice_scatter_plan(
    data: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    start: npt.NDArray[Any],
    stop: npt.NDArray[Any],
    step: npt.NDArray[Any],
    axes: npt.NDArray[Any] | None,
) -> tuple[slice, ...]:
    """Check the inputs against the spec; the slice of data that updates replaces (each axis
    clamped as Python clamps, on Python integers: any int64 or uint64 value). The output has
    data's shape."""
    shape = data.shape
    rank = len(shape)
    if rank == 0:
        raise SpecError("data", "data must have rank 1 or more, got a scalar")
    if updates.dtype != data.dtype:
        raise SpecError(
            "updates",
            f"updates must be of the type of data (T), got {updates.dtype.name} and "
            f"{data.dtype.name}",
        )
    starts = _vector("start", start, "T_IND")
    stops = _vector("stop", stop, "T_IND")
    steps = _vector("step", step, "T_IND")
    if not len(starts) == len(stops) == len(steps):
        raise SpecError(
            "stop",
            "start, stop and step must have the same number of elements, got "
            f"{len(starts)}, {len(stops)} and {len(steps)}",
        )
    if axes is None:
        if len(starts) > rank:
            raise SpecError(
                "start",
                f"start has {len(starts)} elements, more than data has dimensions ({rank}), "
                "and no axes says which they apply to",
            )
        chosen = list(range(len(starts)))
    else:
        chosen = _vector("axes", axes, "T_AXIS")
        if len(chosen) != len(starts):
            raise SpecError(
                "axes",
                f"axes must have as many elements as start, stop and step ({len(starts)}), "
                f"got {len(chosen)}",
            )
    slices = [slice(None)] * rank
    seen: set[int] = set()
    for position, (axis, first, last, stride) in enumerate(
        zip(chosen, starts, stops, steps, strict=True)
    ):
        if not -rank <= axis < rank:
            raise SpecError(
                "axes", f"axes[{position}] = {axis} is out of range [{-rank}, {rank - 1}]"
            )
        if axis % rank in seen:
            raise SpecError("axes", f"axes must be unique: axis {axis % rank} is given twice")
        seen.add(axis % rank)
        if stride == 0:
            raise SpecError("step", f"step[{position}] is 0: a step cannot be 0")
        taken = range(*slice(first, last, stride).indices(shape[axis % rank]))
        # As a slice of non-negative bounds: ``indices`` gives -1 for "before the first element",
        # which a slice would read as the last one.
        slices[axis % rank] = (
            slice(taken.start, taken.stop if taken.stop >= 0 else None, taken.step)
            if taken
            else slice(0, 0)
        )
    wanted = tuple(
        len(range(*item.indices(size))) for item, size in zip(slices, shape, strict=True)
    )
    if updates.shape != wanted:
        raise SpecError(
            "updates",
            f"updates must have the shape of the slice it replaces, {list(wanted)} (data's "
            f"{list(shape)} with each sliced axis as long as its slice), got "
            f"{list(updates.shape)}",
        )
    return tuple(slices)


def slice_scatter(
    data: npt.ArrayLike,
    updates: npt.ArrayLike,
    start: npt.ArrayLike,
    stop: npt.ArrayLike,
    step: npt.ArrayLike,
    axes: npt.ArrayLike | None = None,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """SliceScatter-15: ``data`` with ``data[start:stop:step]`` along ``axes`` (by default the
    first ones) replaced by ``updates``; into ``out`` if given."""
    data, updates = np.asarray(data), np.asarray(updates)
    given = None if axes is None else np.asarray(axes)
    slices = slice_scatter_plan(
        data, updates, np.asarray(start), np.asarray(stop), np.asarray(step), given
    )
    return _scattered(data, updates, slices, out)


#: An output of at least this many bytes whose first axis is not sliced is made in pieces of
#: about _PIECE_BYTES along that axis, each copied from data, then given its updates while it
#: is in the cache: made whole, the output was read back in from memory for the updates (about
#: 15% off float32's every-other-column at 64 MiB; timed in turns, docs/benchmarks.md).
_PIECES_FROM = 8 << 20
_PIECE_BYTES = 1 << 20


#: The smallest output (bytes) the compiled loop makes: below it NumPy's two copies are the
#: quicker (the loop's call and the checks before it cost about 3.5 us). Every other column,
#: NumPy's time -> the loop's: 4 KiB 2.4 -> 4.6 us (float32 and int8), 64 KiB float32 5.8 ->
#: 6.4 us, int8 12.1 -> 6.3 us; 1 MiB float32 82 -> 73 us, int8 176 -> 75 us.
_LOOP_FROM = 64 << 10
#: The shortest row (bytes) the compiled loop is given, unless the slots run on from one row to
#: the next (``_one_axis``): below it the loop's setup a row costs more than NumPy's two copies.
#: A 64 MiB int8 matrix, its middle half of each row replaced at steps 2, 3, 5, -2 and 1, the
#: loop's time over NumPy's: rows of 257 bytes 1.0, 1.27, 1.27, 0.77, 1.12; 513 bytes 0.73,
#: 0.91, 0.96, 0.87, 0.89; 4097 bytes 0.60-0.84. Every other column at 65 bytes: 1.8.
_LOOP_ROW_BYTES = 512

#: The unsigned type of each unit width the compiled loop takes.
_UNITS: dict[int, np.dtype[Any]] = {width: np.dtype(f"u{width}") for width in (1, 2, 4, 8)}


def _one_axis(
    shape: tuple[int, ...], itemsize: int, slices: tuple[slice, ...]
) -> tuple[int, int, int, int, int, int, int] | None:
    """The compiled loop's view of a slice along one axis, every other axis whole: (unit bytes,
    rows, length, first, step, count, backward), the elements after the axis one unit of 1,
    2, 4 or 8 bytes; None for any other slice. Slots at a fixed step through the whole of
    each row (every other column of an even width) are one long row."""
    cut = [
        axis
        for axis, item in enumerate(slices)
        if range(*item.indices(shape[axis])) != range(shape[axis])
    ]
    if len(cut) != 1:
        return None
    axis = cut[0]
    unit = math.prod(shape[axis + 1 :]) * itemsize
    if unit not in _UNITS:
        return None
    rows, length = math.prod(shape[:axis]), shape[axis]
    taken = range(*slices[axis].indices(length))
    step, count = abs(taken.step), len(taken)
    first = (taken[-1] if taken.step < 0 else taken[0]) if count else 0  # the lowest slot
    backward = int(taken.step < 0 and count > 1)
    if not backward and count * step == length and first < step:
        return unit, 1, rows * length, first, step, rows * count, 0
    if length * unit < _LOOP_ROW_BYTES:
        return None
    return unit, rows, length, first, step, count, backward


def _compiled(
    data: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    slices: tuple[slice, ...],
    out: npt.NDArray[Any],
) -> bool:
    """``out`` made by the compiled loop in one pass, each element written once from data or
    updates, when the slice is along one axis (``_one_axis``) and the loops are ready; whether
    it was."""
    if out.nbytes < _LOOP_FROM or not out.size:
        return False
    if not all(a.flags.c_contiguous for a in (out, data, updates)):
        return False
    if out.dtype.itemsize != data.dtype.itemsize:
        return False
    if np.may_share_memory(out, data) or np.may_share_memory(out, updates):
        return False
    view = _one_axis(data.shape, data.dtype.itemsize, slices)
    if view is None:
        return False
    module = loops.ready_module()
    if module is None:
        return False
    unit, rows, length, first, step, count, backward = view
    kind = _UNITS[unit]
    module.slice_scatter(
        data.reshape(-1).view(kind),
        updates.reshape(-1).view(kind),
        out.reshape(-1).view(kind),
        rows,
        length,
        first,
        step,
        count,
        backward,
        int(out.nbytes >= STREAM_BYTES),
    )
    return True


def _scattered(
    data: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    slices: tuple[slice, ...],
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(data.shape, data.dtype)
    if _compiled(data, updates, slices, out):
        return out
    raw, source, replacing = as_raw(out), as_raw(data), as_raw(updates)
    first = data.shape[0]
    whole_first = range(*slices[0].indices(first)) == range(first)
    if not out.nbytes or out.nbytes < _PIECES_FROM or not whole_first or first < 2:
        np.copyto(raw, source, casting="equiv")
        np.copyto(raw[slices], replacing, casting="equiv")
        return out
    rows = max(1, _PIECE_BYTES // (out.nbytes // first))
    inner = (slice(None), *slices[1:])
    for top in range(0, first, rows):
        piece = raw[top : top + rows]
        np.copyto(piece, source[top : top + rows], casting="equiv")
        np.copyto(piece[inner], replacing[top : top + rows], casting="equiv")
    return out


def plan(arrays: Arrays, attributes: Attributes) -> Plan:
    """SliceScatter-15's planner: every check made, the output's shape (data's)."""
    data, updates = arrays["data"], arrays["updates"]
    slices = slice_scatter_plan(
        data, updates, arrays["start"], arrays["stop"], arrays["step"], arrays.get("axes")
    )
    return Plan(data.shape, lambda out: _scattered(data, updates, slices, out))


def _index(name: str, number: int, words: str) -> Input:
    return Input(
        name,
        f"{words} (input {number}, type T_IND).",
        "T_IND: any integer type, a 1D tensor of one value per sliced axis. JSON form is int64.",
        INTEGER_TYPES,
        rank="1",
        limit="rank",  # one value per sliced axis: counted on its shape before it is read
    )


_DATA = [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]

OP = Op(
    name="slice_scatter",
    spec="SliceScatter-15",
    summary="SliceScatter-15: a copy of a tensor with a slice replaced by updates",
    description="SliceScatter-15: a copy of `data` (rank 1 or more) whose slice "
    "`data[start:stop:step]` along `axes` (by default the first len(start) axes) is replaced "
    "by `updates`, as the spec's NumPy snippet does: negative values count from the end, values "
    "past a dimension are clamped, a negative step slices backwards. `updates` has data's type "
    "and exactly the slice's shape. The output has data's shape and type.",
    request_doc="SliceScatter-15: `data` with `data[start:stop:step]` along `axes` set to "
    "`updates`.",
    inputs=(
        data_input("update a slice of"),
        Input(
            "updates",
            "The slice's new values (input 2, type T, the slice's shape).",
            DATA_CONSTRAINT + " It has the type of data.",
            ALL_TYPES,
        ),
        _index("start", 3, "Where each slice starts, inclusive"),
        _index("stop", 4, "Where each slice stops, exclusive"),
        _index("step", 5, "The step of each slice, not 0"),
        Input(
            "axes",
            "The axes start, stop and step apply to (input 6, type T_AXIS; optional: "
            "[0, 1, ..., len(start) - 1]).",
            "T_AXIS: any integer type, a 1D tensor of unique axes in [-r, r - 1]. JSON form is "
            "int64.",
            INTEGER_TYPES,
            rank="1",
            limit="rank",
            optional=True,
        ),
    ),
    plan=plan,
    examples={
        "example_1": example(
            "SliceScatter-15 Example 1: fill a slice over axis 0",
            {
                "data": _DATA,
                "updates": [[10, 20, 30, 40, 50]],
                "start": [0],
                "stop": [1],
                "step": [1],
                "axes": [0],
                "dtype": "float32",
            },
            [[10.0, 20.0, 30.0, 40.0, 50.0], [5.0, 6.0, 7.0, 8.0, 9.0]],
        ),
        "example_2": example(
            "SliceScatter-15 Example 2: every second value over axis 1, start and stop clamped",
            {
                "data": _DATA,
                "updates": [[10, 20, 30], [40, 50, 60]],
                "start": [-25],
                "stop": [25],
                "step": [2],
                "axes": [1],
                "dtype": "float32",
            },
            [[10.0, 1.0, 20.0, 3.0, 30.0], [40.0, 6.0, 50.0, 8.0, 60.0]],
        ),
        "example_3": example(
            "SliceScatter-15 Example 3: every second value over both axes, axes left out",
            {
                "data": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14]],
                "updates": [[50, 60], [70, 80]],
                "start": [0, 1],
                "stop": [3, 5],
                "step": [2, 2],
                "dtype": "float32",
            },
            [
                [0.0, 50.0, 2.0, 60.0, 4.0],
                [5.0, 6.0, 7.0, 8.0, 9.0],
                [10.0, 70.0, 12.0, 80.0, 14.0],
            ],
        ),
        "example_backward_below_minus_d": example(
            "SliceScatter-15: backwards from a start below -d, an empty slice (Python's rule)",
            {
                "data": [0, 1, 2, 3, 4, 5, 6],
                "updates": [],
                "start": [-9],
                "stop": [-10],
                "step": [-2],
                "axes": [0],
            },
            [0, 1, 2, 3, 4, 5, 6],
        ),
    },
    decisions=(
        "SliceScatter-15, updates: exactly the slice's shape (the text: \"same shape as data "
        "except axes set by axes\"); the snippet's NumPy assignment would also broadcast a "
        "smaller updates, which is refused naming updates.",
        "SliceScatter-15, the slice by Python's rule (the spec's snippet) on any integer: a "
        "start below -d with a negative step clamps to before the first element, so the slice "
        "is empty (data [0..6], start [-9], stop [-10], step [-2] takes no element).",
        'SliceScatter-15, T is "any numeric type": every supported type is taken, bool included '
        "(the op only copies elements); updates must be of data's type.",
        "SliceScatter-15 without axes and with more start values than data has dimensions: "
        "refused naming start (the default axes would be out of range).",
        "SliceScatter-15, Example 3 writes its start, stop and step ports as <dim>1</dim> beside "
        "two values each: read as the two values.",
    ),
    disagreements=(
        *narrowed_by_the_cpu_plugin("SliceScatter-15"),
        "SliceScatter-15 backwards from a start below -d: data of length 7, start [-9], stop "
        "[-10], step [-2] is an empty slice by the spec's snippet; the CPU plugin wants one "
        "update and writes it at data[0].",
    ),
)
