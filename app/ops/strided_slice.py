"""StridedSlice-1: a strided slice of a tensor, by the spec's text (its slicing steps, clamping
and masks), which differs from Python's slicing where the text says so."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    INTEGER_TYPES,
    INTS,
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
from app.ops.raw import as_raw, copy_view, is_integer_type

MASKS = ("begin_mask", "end_mask", "new_axis_mask", "shrink_axis_mask", "ellipsis_mask")
#: The masks that change the output's rank: at most one of them at a slicing step.
_RANK_MASKS = ("new_axis_mask", "shrink_axis_mask", "ellipsis_mask")

Index = slice | int | None


def _vector(name: str, array: npt.NDArray[Any]) -> list[int]:
    if not is_integer_type(array.dtype):
        raise SpecError(name, f"{name} must be of an integer type (T_IND), got {array.dtype.name}")
    if array.ndim != 1:
        raise SpecError(
            name, f"{name} must be a 1D tensor, got a tensor of shape {list(array.shape)}"
        )
    return [int(value) for value in array.tolist()]


def _mask(name: str, values: Sequence[int], length: int) -> list[int]:
    """A mask read for ``length`` slicing steps: padded with zeros, the rest ignored."""
    for position, value in enumerate(values):
        if value not in (0, 1):
            raise SpecError(
                name, f"{name}[{position}] = {value}: a bit mask is a list of 0s and 1s"
            )
    return [*values[:length], *[0] * (length - len(values))]


def _forward(first: int, last: int, stride: int, size: int, masked: tuple[int, int]) -> slice:
    """One step slicing forward: begin (inclusive), then every stride-th while below end; the
    begin's element is always added, when the dimension has it."""
    begin = 0 if masked[0] else _clamped(first + size if first < 0 else first, 0, size)
    end = size if masked[1] else _clamped(last + size if last < 0 else last, 0, size)
    if begin >= size:  # begin clamped to size(dim): there is no element to add
        return slice(0, 0)
    count = max(1, -((begin - end) // stride))
    return slice(begin, begin + (count - 1) * stride + 1, stride)


def _reverse(first: int, last: int, stride: int, size: int, masked: tuple[int, int]) -> slice:
    """One step slicing in reverse: begin, then every |stride|-th while above end."""
    if size == 0:
        return slice(0, 0)
    begin = size - 1 if masked[0] else _clamped(first + size if first < 0 else first, 0, size - 1)
    end = 0 if masked[1] else _clamped(last + size if last < 0 else last, -1, size)
    count = max(1, -((end - begin) // -stride))
    final = begin + (count - 1) * stride
    return slice(begin, final - 1 if final > 0 else None, stride)


def _clamped(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)


def strided_slice_plan(
    shape: tuple[int, ...],
    begin: npt.NDArray[Any],
    end: npt.NDArray[Any],
    stride: npt.NDArray[Any] | None,
    masks: Attributes,
) -> tuple[tuple[Index, ...], tuple[int, ...]]:
    """Check the inputs and masks against the spec; the NumPy index that takes the slice
    (slices, ints for shrunk axes, None for new ones) and the output's shape. Python integers:
    any int64 or uint64 value."""
    firsts = _vector("begin", begin)
    count = len(firsts)
    lasts = _vector("end", end)
    strides = [1] * count if stride is None else _vector("stride", stride)
    if not len(lasts) == len(strides) == count:
        raise SpecError(
            "end" if len(lasts) != count else "stride",
            "begin, end and stride must have the same length, got "
            f"{count}, {len(lasts)} and {len(strides)}",
        )
    for position, value in enumerate(strides):
        if value == 0:
            raise SpecError("stride", f"stride[{position}] is 0: stride cannot contain zeros")
    bits = {name: _mask(name, tuple(masks.get(name, ())), count) for name in MASKS}
    if sum(bits["ellipsis_mask"]) > 1:
        raise SpecError(
            "ellipsis_mask",
            "ellipsis_mask can have up to one occurrence of the value 1, got "
            f"{sum(bits['ellipsis_mask'])} within the {count} slicing steps",
        )
    for position in range(count):
        set_here = [name for name in _RANK_MASKS if bits[name][position]]
        if len(set_here) > 1:
            raise SpecError(
                set_here[1],
                f"{' and '.join(set_here)} are both 1 at step {position}: a step inserts a new "
                "axis, shrinks one or is the ellipsis, not several",
            )
    rank = len(shape)
    new_axes = sum(bits["new_axis_mask"])
    skipped = rank - (count - new_axes - 1) if any(bits["ellipsis_mask"]) else 0
    consumed = count - new_axes - (1 if any(bits["ellipsis_mask"]) else 0) + skipped
    if skipped < 0 or consumed != rank:
        raise SpecError(
            "begin",
            f"begin has {count} slicing steps ({new_axes} of them new axes"
            + (", one the ellipsis" if any(bits["ellipsis_mask"]) else "")
            + f"), which slice {count - new_axes - (1 if any(bits['ellipsis_mask']) else 0)} "
            f"dimensions; data has {rank}: without an ellipsis the steps that are not new axes "
            "must be as many as data's dimensions",
        )
    index: list[Index] = []
    out_shape: list[int] = []
    axis = 0
    for position in range(count):
        if bits["new_axis_mask"][position]:
            index.append(None)
            out_shape.append(1)
            continue
        if bits["ellipsis_mask"][position]:
            index += [slice(None)] * skipped
            out_shape += shape[axis : axis + skipped]
            axis += skipped
            continue
        size = shape[axis]
        masked = (bits["begin_mask"][position], bits["end_mask"][position])
        first, last, pace = firsts[position], lasts[position], strides[position]
        if bits["shrink_axis_mask"][position]:
            index.append(_shrunk(position, first, last, size, masked))
        else:
            taken = (_forward if pace > 0 else _reverse)(first, last, pace, size, masked)
            index.append(taken)
            out_shape.append(len(range(*taken.indices(size))))
        axis += 1
    return tuple(index), tuple(out_shape)


def _shrunk(position: int, first: int, last: int, size: int, masked: tuple[int, int]) -> int:
    """The element a shrunk step keeps: begin, which must equal end (both after the masks and
    negative adjusting), clamped as slicing forward (the stride is ignored)."""
    begin = 0 if masked[0] else (first + size if first < 0 else first)
    end = size if masked[1] else (last + size if last < 0 else last)
    if begin != end:
        raise SpecError(
            "end",
            f"shrink_axis_mask[{position}] is 1: begin[{position}] must equal end[{position}], "
            f"got {begin} and {end} (after masks and negative values adjusting)",
        )
    kept = max(begin, 0)
    if kept >= size:
        raise SpecError(
            "begin",
            f"shrink_axis_mask[{position}] is 1 but begin[{position}] = {first} names no element "
            f"of a dimension of size {size}",
        )
    return kept


def strided_slice(
    data: npt.ArrayLike,
    begin: npt.ArrayLike,
    end: npt.ArrayLike,
    stride: npt.ArrayLike | None = None,
    out: npt.NDArray[Any] | None = None,
    **masks: Sequence[int],
) -> npt.NDArray[Any]:
    """StridedSlice-1 of ``data`` (masks by name: ``begin_mask=[0, 1]``...); into ``out`` if
    given."""
    data = np.asarray(data)
    given = None if stride is None else np.asarray(stride)
    index, shape = strided_slice_plan(data.shape, np.asarray(begin), np.asarray(end), given, masks)
    return _sliced(data, index, shape, out)


def _sliced(
    data: npt.NDArray[Any],
    index: tuple[Index, ...],
    shape: tuple[int, ...],
    out: npt.NDArray[Any] | None,
) -> npt.NDArray[Any]:
    if out is None:
        out = np.empty(shape, data.dtype)
    target, source = as_raw(out), as_raw(data)
    copy_view(target, target, source, source[index])
    return out


def plan(arrays: Arrays, attributes: Attributes) -> Plan:
    """StridedSlice-1's planner: every check made, the output's shape."""
    data = arrays["data"]
    index, shape = strided_slice_plan(
        data.shape, arrays["begin"], arrays["end"], arrays.get("stride"), attributes
    )
    return Plan(shape, lambda out: _sliced(data, index, shape, out))


def _index(name: str, number: int, words: str, optional: bool = False) -> Input:
    return Input(
        name,
        f"{words} (input {number}, type T_IND).",
        "T_IND: any integer type, a 1D tensor of one value per slicing step. JSON form is int64.",
        INTEGER_TYPES,
        rank="1",
        limit="rank",  # one value per slicing step: counted on its shape before it is read
        optional=optional,
    )


def _mask_attribute(name: str, required: bool, words: str) -> Attribute:
    return Attribute(name, None if required else (), words + " A list of 0s and 1s, one a "
                     "slicing step: padded with zeros when shorter, the rest ignored when longer.",
                     kind=INTS)  # fmt: skip


def _example(summary: str, shape: tuple[int, ...], index: Any, **request: Any) -> dict[str, Any]:
    """One of the spec's examples over ``arange`` data of ``shape``, its answer the text's (as
    NumPy's ``index``, checked equal to the text's reading in the tests)."""
    data = np.arange(int(np.prod(shape))).reshape(shape)
    return example(f"StridedSlice-1 {summary}", {"data": data.tolist(), **request},
                   data[index].tolist())  # fmt: skip


_NO_MASKS: dict[str, list[int]] = {"begin_mask": [], "end_mask": []}
_EXAMPLES = {
    "example_1": _example(
        "Example 1, basic: its fifth axis is [3, 2, 1] by the text (the example says [3, 2, 1, "
        "0])", (4,) * 6, np.s_[0:4, 1:4, 0:4:2, 1:4:2, 3:0:-1, 3:0:-2],
        begin=[0, 1, 0, 1, 3, 3], end=[4, 4, 4, 4, 0, 0], stride=[1, 1, 2, 2, -1, -2],
        **_NO_MASKS),
    "example_2": _example(
        "Example 2, clamping: begin 1234 clamps to size(dim) = 2, where no element is, so the "
        "output is 0 x 1 by the text (the example says 1 x 1)", (2, 2), np.s_[2:2, 1:2],
        begin=[1234, 2], end=[1234, 4321], stride=[1, -1], **_NO_MASKS),
    "example_3": _example(
        "Example 3, a negative end", (2, 3, 4), np.s_[0:2, 0:2, 0:-1],
        begin=[0, 0, 0], end=[2, 2, -1], stride=[1, 1, 1], **_NO_MASKS),
    "example_4": _example(
        "Example 4, begin_mask and end_mask: in reverse end_mask is 0, the first element "
        "excluded", (2, 3, 4), np.s_[1:, :, 3:0:-1],
        begin=[1, 1, 123], end=[0, 0, 2], stride=[1, 1, -1], begin_mask=[0, 1, 1],
        end_mask=[1, 1, 1], new_axis_mask=[0, 0, 0, 0, 0], shrink_axis_mask=[0, 0],
        ellipsis_mask=[0]),
    "example_5": _example(
        "Example 5, new_axis_mask", (2, 4), np.s_[np.newaxis, 0:2, np.newaxis, 0:4],
        begin=[1234, 0, -1, 0], end=[1234, 2, 9876, 4], stride=[132, 1, 241, 1],
        begin_mask=[0, 0, 0, 0], end_mask=[0, 0, 0, 0], new_axis_mask=[1, 0, 1, 0],
        shrink_axis_mask=[0, 0, 0, 0], ellipsis_mask=[0, 0, 0, 0]),
    "example_6": _example(
        "Example 6, shrink_axis_mask, on (1, 2, 3, 4, 2) data (the spec's is (1, 2, 384, 640, "
        "8))", (1, 2, 3, 4, 2), np.s_[0:1, 0, 0:3, 0:4, 0:2],
        begin=[0, 0, 0, 0, 0], end=[1, 0, 3, 4, 2], stride=[1, 1, 1, 1, 1],
        begin_mask=[0] * 5, end_mask=[0] * 5, new_axis_mask=[0] * 5,
        shrink_axis_mask=[0, 1, 0, 0, 0], ellipsis_mask=[0] * 5),
    "example_7": _example(
        "Example 7, ellipsis_mask, on 5D data of 3s (the spec's has twelve dimensions of 10)",
        (3,) * 5, np.s_[0:2, ..., 0:1], begin=[0, 0, 0], end=[2, 0, 1], stride=[1, -1, 1],
        begin_mask=[0, 0, 0], end_mask=[0, 0, 0], new_axis_mask=[0, 0, 0],
        shrink_axis_mask=[0, 0, 0], ellipsis_mask=[0, 1, 0]),
    "example_8": _example(
        "Example 8, an ellipsis with masks of unequal length, on (4, 2, 2, 6) data (the "
        "spec's has twelve dimensions of 10, and its output 11 where the text gives 13)",
        (4, 2, 2, 6), np.s_[2:, ..., np.newaxis, :5], begin=[2, 1, 10, 10],
        end=[123, 1, 10, 5], stride=[1, -1, 1, 1], begin_mask=[0, 0, 1, 1],
        end_mask=[1, 1, 0, 0], new_axis_mask=[0, 0, 1], shrink_axis_mask=[0],
        ellipsis_mask=[0, 1]),
}  # fmt: skip

OP = Op(
    name="strided_slice",
    spec="StridedSlice-1",
    summary="StridedSlice-1: a strided slice, with begin, end, new-axis, shrink and ellipsis masks",
    description="StridedSlice-1 of `data` by its text: each slicing step i takes begin[i] "
    "(negative values adjusted by the dimension's size, then clamped) and then every stride[i] "
    "while before end[i] (after it, in reverse); begin equal to end keeps one element. "
    "`begin_mask` and `end_mask` use the dimension's start and end (in reverse, size - 1 and "
    "0); `new_axis_mask` inserts a dimension of 1, `shrink_axis_mask` removes one keeping "
    "begin's element (begin must equal end), `ellipsis_mask` (one at most) keeps the "
    "dimensions the other steps do not slice. Masks are lists, padded with zeros.",
    request_doc="StridedSlice-1: `data` sliced by `begin`, `end`, `stride` and the masks.",
    inputs=(
        data_input("slice"),
        _index("begin", 2, "Where each step starts, inclusive"),
        _index("end", 3, "Where each step ends, exclusive"),
        _index("stride", 4, "The stride of each step, no zeros (optional: all 1)", True),
    ),
    attributes=(
        _mask_attribute(
            "begin_mask", True, "1 at step i: begin[i] is ignored, the dimension's start used."
        ),
        _mask_attribute(
            "end_mask", True, "1 at step i: end[i] is ignored, the dimension's end used."
        ),
        _mask_attribute("new_axis_mask", False, "1 at step i: a dimension of 1 is inserted there."),
        _mask_attribute(
            "shrink_axis_mask",
            False,
            "1 at step i: the dimension is removed, begin's element kept.",
        ),
        _mask_attribute(
            "ellipsis_mask",
            False,
            "1 at step i (one at most): the dimensions no other step slices are kept whole there.",
        ),
    ),
    plan=plan,
    examples=_EXAMPLES,
    decisions=(
        "StridedSlice-1, the text over Python's slicing where they differ: begin's element is "
        "always added (begin equal to end, or past end, gives one element), and end_mask in "
        "reverse is 0, excluding the first element; the spec's examples that say otherwise "
        "(1: [3, 2, 1, 0]; 2: 1 x 1; 8: 11 dimensions) are answered by the text, and /docs says "
        "so in each.",
        "StridedSlice-1, a begin that clamps to size(dim) slicing forward (or any step over a "
        "dimension of 0) names no element: the step adds none, and the output dimension is 0.",
        'StridedSlice-1, "If they are unused, N == M": the steps that are not new axes must be '
        "as many as data's dimensions (an ellipsis counting for those it keeps); fewer or more "
        "are refused naming begin (OpenVINO keeps trailing dimensions whole).",
        "StridedSlice-1, several of new_axis_mask, shrink_axis_mask and ellipsis_mask at one "
        "step: refused naming the second (the text gives each step one of these meanings); "
        "begin_mask and end_mask at a new-axis or ellipsis step have no effect (its values are "
        "ignored).",
        "StridedSlice-1, shrink_axis_mask: begin and end are compared after the masks and "
        "negative values adjusting; the element kept is begin clamped at 0; a begin at or past "
        "the dimension's size names no element and is refused naming begin.",
        'StridedSlice-1, "Stride input cannot contain any zeros": a zero is refused at any '
        "step, a new-axis or ellipsis step's included.",
        "StridedSlice-1, mask bits past the slicing steps are ignored (a second ellipsis among "
        "them too); a value other than 0 or 1 anywhere in a mask is refused naming it.",
        "StridedSlice-1, the spec's examples 6, 7 and 8 (millions of elements) are shown in "
        "/docs on smaller data; the tests check the spec's own shapes with the planner.",
    ),
    disagreements=(
        *narrowed_by_the_cpu_plugin("StridedSlice-1"),
        "StridedSlice-1 begin equal to end: data [0, 1, 2, 3, 4], begin [2], end [2], stride "
        "[1] gives [2] by the text; the CPU plugin gives [] (Python's rule).",
        "StridedSlice-1 forward with begin past end: data [0, 1, 2, 3, 4], begin [3], end [1], "
        "stride [1] gives [3] by the text; the CPU plugin gives [].",
        "StridedSlice-1 end_mask in reverse: data [0, 1, 2, 3, 4], begin [3], end [0], stride "
        "[-1], end_mask [1] gives [3, 2, 1] by the text; the CPU plugin gives [3, 2, 1, 0].",
        "StridedSlice-1 with fewer steps than data's dimensions and no ellipsis: refused by the "
        "text (N == M); the CPU plugin keeps the trailing dimensions whole.",
    ),
)
