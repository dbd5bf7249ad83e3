"""Slice-8: the region of a tensor that start, stop and step select along the axes given, as
Python's ``data[start:stop:step]``."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
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
from app.ops.raw import as_raw, copy_view, is_integer_type


def _vector(name: str, array: npt.NDArray[Any], kind: str) -> list[int]:
    if not is_integer_type(array.dtype):
        raise SpecError(name, f"{name} must be of an integer type ({kind}), got {array.dtype.name}")
    if array.ndim != 1:
        raise SpecError(
            name, f"{name} must be a 1D tensor, got a tensor of shape {list(array.shape)}"
        )
    return [int(value) for value in array.tolist()]


def slice_plan(
    shape: tuple[int, ...],
    start: npt.NDArray[Any],
    stop: npt.NDArray[Any],
    step: npt.NDArray[Any],
    axes: npt.NDArray[Any] | None,
) -> tuple[tuple[slice, ...], tuple[int, ...]]:
    """Check the inputs against the spec; the slice of each axis (clamped as Python clamps, on
    Python integers: any int64 or uint64 value) and the output's shape."""
    rank = len(shape)
    if rank == 0:
        raise SpecError("data", "data must have rank 1 or more, got a scalar")
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
    seen: set[int] = set()
    slices = [slice(None)] * rank
    for position, (axis, begin, end, stride) in enumerate(
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
        taken = range(*slice(begin, end, stride).indices(shape[axis % rank]))
        # As a slice of non-negative bounds: ``indices`` gives -1 for "before the first element",
        # which a slice would read as the last one.
        slices[axis % rank] = (
            slice(taken.start, taken.stop if taken.stop >= 0 else None, taken.step)
            if taken
            else slice(0, 0)
        )
    out_shape = tuple(
        len(range(*item.indices(size))) for item, size in zip(slices, shape, strict=True)
    )
    return tuple(slices), out_shape


def slice_(
    data: npt.ArrayLike,
    start: npt.ArrayLike,
    stop: npt.ArrayLike,
    step: npt.ArrayLike,
    axes: npt.ArrayLike | None = None,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """Slice-8: ``data[start:stop:step]`` along ``axes`` (by default the first ones)."""
    data = np.asarray(data)
    given = None if axes is None else np.asarray(axes)
    slices, shape = slice_plan(
        data.shape, np.asarray(start), np.asarray(stop), np.asarray(step), given
    )
    return _sliced(data, slices, shape, out)


def _sliced(
    data: npt.NDArray[Any],
    slices: tuple[slice, ...],
    shape: tuple[int, ...],
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(shape, data.dtype)
    target, source = as_raw(out), as_raw(data)
    copy_view(target, target, source, source[slices])
    return out


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    slices, shape = slice_plan(
        data.shape, arrays["start"], arrays["stop"], arrays["step"], arrays.get("axes")
    )
    return Plan(shape, lambda out: _sliced(data, slices, shape, out))


def _index(name: str, number: int, words: str) -> Input:
    return Input(
        name,
        f"{words} (input {number}, type T_IND).",
        "T_IND: any integer type, a 1D tensor of one value per sliced axis. JSON form is int64.",
        INTEGER_TYPES,
        rank="1",
        limit="rank",
    )


_TEN = list(range(10))
# fmt: off
#: The spec's examples (name, summary, request, output), and the int64 limits as ends.
_EXAMPLES: list[tuple[str, str, dict[str, Any], Any]] = [
    ("example_1", "Slice-8 Example 1: basic slicing",
     {"data": _TEN, "start": [1], "stop": [8], "step": [1], "axes": [0]}, _TEN[1:8]),
    ("example_2", "Slice-8 Example 2: axes left out",
     {"data": _TEN, "start": [1], "stop": [8], "step": [1]}, _TEN[1:8]),
    ("example_3", "Slice-8 Example 3: step 2",
     {"data": _TEN, "start": [1], "stop": [8], "step": [2], "axes": [0]}, _TEN[1:8:2]),
    ("example_4", "Slice-8 Example 4: start and stop clamped",
     {"data": _TEN, "start": [-100], "stop": [100], "step": [1], "axes": [0]}, _TEN),
    ("example_5", "Slice-8 Example 5: backwards to stop -11",
     {"data": _TEN, "start": [9], "stop": [-11], "step": [-1], "axes": [0]}, _TEN[::-1]),
    ("example_6", "Slice-8 Example 6: backwards to stop 0",
     {"data": _TEN, "start": [9], "stop": [0], "step": [-1], "axes": [0]}, _TEN[:0:-1]),
    ("example_7", "Slice-8 Example 7: backwards to stop -10",
     {"data": _TEN, "start": [9], "stop": [-10], "step": [-1], "axes": [0]}, _TEN[:0:-1]),
    ("example_8", "Slice-8 Example 8: backwards by 2",
     {"data": _TEN, "start": [9], "stop": [-11], "step": [-2], "axes": [0]}, [9, 7, 5, 3, 1]),
    ("example_9", "Slice-8 Example 9: backwards, clamped",
     {"data": _TEN, "start": [100], "stop": [-100], "step": [-1], "axes": [0]}, _TEN[::-1]),
    ("example_10", "Slice-8 Example 10: a 2D tensor, every axis",
     {"data": [_TEN[:5], _TEN[5:]], "start": [0, 1], "stop": [2, 4], "step": [1, 2],
      "axes": [0, 1]}, [[1, 3], [6, 8]]),
    ("example_int64_limits", "Slice-8: INT64_MAX and INT64_MIN as the ends",
     {"data": _TEN, "start": [2**63 - 1], "stop": [-(2**63)], "step": [-3], "axes": [0]},
     [9, 6, 3, 0]),
]
# fmt: on

OP = Op(
    name="slice",
    spec="Slice-8",
    summary="Slice-8: a region of a tensor, as data[start:stop:step]",
    description="Slice-8 over `data` (rank 1 or more): along each axis of `axes` (by default "
    "the first len(start) ones), the elements from `start` (inclusive) to `stop` (exclusive) "
    "by `step`, as Python slices them: negative values count from the end, values past a "
    "dimension are clamped, a negative step slices backwards. Other axes are kept whole.",
    request_doc="Slice-8: `data[start:stop:step]` along `axes`.",
    inputs=(
        data_input("slice"),
        _index("start", 2, "Where each slice starts, inclusive"),
        _index("stop", 3, "Where each slice stops, exclusive"),
        _index("step", 4, "The step of each slice, not 0"),
        Input(
            "axes",
            "The axes start, stop and step apply to (input 5, type T_AXIS; optional: "
            "[0, 1, ..., len(start) - 1]).",
            "T_AXIS: any integer type, a 1D tensor of unique axes in [-r, r - 1]. JSON form is "
            "int64.",
            INTEGER_TYPES,
            rank="1",
            optional=True,
            limit="rank",
        ),
    ),
    plan=_plan,
    examples={name: example(*case) for name, *case in _EXAMPLES},
    decisions=(
        "Slice-8 without axes and with more start values than data has dimensions: refused "
        "naming start (the default axes would be out of range).",
        "Slice-8, start, stop and step of any integer type, uint64 values of 2**63 and more "
        "included: read as the integers they are and clamped as Python clamps them.",
        "Slice-8, Example 10 gives its output as [1, 3, 6, 8] of shape (2, 2): [[1, 3], [6, 8]].",
    ),
    disagreements=(
        *narrowed_by_the_cpu_plugin("Slice-8"),
        "Slice-8, int64 start, stop and step on the CPU plugin: narrowed to int32 (a step of "
        'INT64_MIN becomes 0 and is refused, "Step must be non-zero"; other limits wrap); the '
        "service reads them as the integers they are.",
        "Slice-8 backwards from a start below -dim: data of length 7, start [-9], stop [-10], "
        "step [-2] is empty by Python's rule (the spec's); the CPU plugin returns [data[0]].",
    ),
)
