"""ExtractImagePatches-3: the patches of a 4-D image, as a convolution would visit them, stacked
in the depth dimension."""

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops.declaration import (
    ALL_TYPES,
    DATA_CONSTRAINT,
    INTS,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Plan,
    example,
)
from app.ops.errors import SpecError
from app.ops.raw import as_raw, copy_gathered, strided_view

AUTO_PADS = ("valid", "same_upper", "same_lower")


class PatchAxis(NamedTuple):
    """One spatial axis of the extraction: patches ``patches``, the first patch's first sample
    at ``-pad`` (0 or less: zeros before the image), samples ``rate`` apart, patches
    ``stride`` apart."""

    size: int
    stride: int
    rate: int
    pad: int
    patches: int


class PatchesPlan(NamedTuple):
    """What the checks of one ExtractImagePatches found."""

    rows: PatchAxis
    cols: PatchAxis
    output_shape: tuple[int, ...]


def _pair(name: str, values: Sequence[int], what: str) -> tuple[int, int]:
    """A list attribute of two non-negative integers ``[<what>_rows, <what>_cols]``."""
    items = tuple(values)
    if len(items) != 2:
        raise SpecError(
            name, f"{name} must be [{what}_rows, {what}_cols] (two values), got {list(items)}"
        )
    for value in items:
        if not isinstance(value, int | np.integer) or value < 0:
            raise SpecError(name, f"{name} must be non-negative integers, got {list(items)}")
    return int(items[0]), int(items[1])


def effective_size(size: int, rate: int) -> int:
    """The spec's ``patch_sizes_eff = patch_sizes + (patch_sizes - 1) * (rates - 1)``; a patch
    of no sample spans nothing."""
    return size + (size - 1) * (rate - 1) if size else 0


def _axis(length: int, size: int, stride: int, rate: int, auto_pad: str) -> PatchAxis:
    span = effective_size(size, rate)
    if auto_pad == "valid":
        # No padding: every patch lies in the image.
        count = (length - span) // stride + 1 if length >= span else 0
        return PatchAxis(size, stride, rate, 0, count)
    # same_*: padded by zeros to ceil(length / stride) patches, odd padding's extra at the
    # end (same_upper) or at the beginning (same_lower).
    count = -(-length // stride)
    total = max((count - 1) * stride + span - length, 0)
    before = total // 2 if auto_pad == "same_upper" else total - total // 2
    return PatchAxis(size, stride, rate, before, count)


def extract_image_patches_plan(
    data: npt.NDArray[Any],
    sizes: Sequence[int],
    strides: Sequence[int],
    rates: Sequence[int],
    auto_pad: str,
) -> PatchesPlan:
    """Check the input and attributes against the spec and give the output's shape, with
    nothing allocated: ``[batch, size[0] * size[1] * depth, out_rows, out_cols]``."""
    size = _pair("sizes", sizes, "size")
    stride = _pair("strides", strides, "stride")
    rate = _pair("rates", rates, "rate")
    if auto_pad not in AUTO_PADS:
        raise SpecError(
            "auto_pad", f"auto_pad must be one of {', '.join(AUTO_PADS)}, got {auto_pad!r}"
        )
    if 0 in stride:
        raise SpecError(
            "strides",
            f"strides must be positive: a distance of 0 between patches places no grid, got "
            f"{list(stride)}",
        )
    if data.ndim != 4:
        raise SpecError(
            "data",
            "data must be a 4-D tensor [batch, depth, in_rows, in_cols], got shape "
            f"{list(data.shape)}",
        )
    batch, depth, in_rows, in_cols = data.shape
    rows = _axis(in_rows, size[0], stride[0], rate[0], auto_pad)
    cols = _axis(in_cols, size[1], stride[1], rate[1], auto_pad)
    shape = (batch, size[0] * size[1] * depth, rows.patches, cols.patches)
    return PatchesPlan(rows, cols, shape)


def extract_image_patches(
    data: npt.ArrayLike,
    sizes: Sequence[int],
    strides: Sequence[int],
    rates: Sequence[int],
    auto_pad: str,
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """ExtractImagePatches-3: ``out[b, (i * size_cols + j) * depth + c, p, q]`` is
    ``data[b, c, p * stride_rows + i * rate_rows - pad_top, q * stride_cols + j * rate_cols -
    pad_left]``, a zero where that lies in the padding."""
    data = np.asarray(data)
    plan = extract_image_patches_plan(data, sizes, strides, rates, auto_pad)
    return extract_image_patches_planned(data, plan, out)


def _padded_span(axis: PatchAxis, length: int) -> tuple[int, int]:
    """How many zeros the samples reach before and after the image along one axis."""
    if axis.patches == 0 or axis.size == 0:
        return 0, 0
    last = (axis.patches - 1) * axis.stride + (axis.size - 1) * axis.rate - axis.pad
    return axis.pad, max(last + 1 - length, 0)


def patches_workspace_bytes(data: npt.NDArray[Any], plan: PatchesPlan) -> int:
    """The bytes of the zero-padded image the kernel builds in a same_* mode (0 without
    padding)."""
    before_r, after_r = _padded_span(plan.rows, data.shape[2])
    before_c, after_c = _padded_span(plan.cols, data.shape[3])
    if not (before_r or after_r or before_c or after_c):
        return 0
    padded = (data.shape[2] + before_r + after_r) * (data.shape[3] + before_c + after_c)
    return int(data.shape[0] * data.shape[1] * padded * data.dtype.itemsize)


def extract_image_patches_planned(
    data: npt.NDArray[Any], plan: PatchesPlan, out: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any]:
    """``extract_image_patches`` with the input already checked: one strided copy of the
    (zero-padded where the samples reach beyond it) image into the output."""
    if out is None:
        out = np.empty(plan.output_shape, dtype=data.dtype)
    if out.size == 0:
        return out
    source = as_raw(data)
    before_r, after_r = _padded_span(plan.rows, data.shape[2])
    before_c, after_c = _padded_span(plan.cols, data.shape[3])
    if before_r or after_r or before_c or after_c:
        padded = np.zeros(
            (
                *data.shape[:2],
                data.shape[2] + before_r + after_r,
                data.shape[3] + before_c + after_c,
            ),
            dtype=source.dtype,
        )
        padded[:, :, before_r : before_r + data.shape[2], before_c : before_c + data.shape[3]] = (
            source
        )
        source = padded
    # Samples start at -pad, which is index 0 of the padded image (or of the image itself).
    rows, cols = plan.rows, plan.cols
    b, c, r, q = source.strides
    shape = (source.shape[0], rows.size, cols.size, source.shape[1], rows.patches, cols.patches)
    steps = (b, r * rows.rate, q * cols.rate, c, r * rows.stride, q * cols.stride)
    view = strided_view(source, shape, steps, writeable=False)
    target = as_raw(out).reshape(view.shape) if out.flags.c_contiguous else None
    if target is None:
        result = np.empty(view.shape, dtype=source.dtype)
        np.copyto(result, view)
        np.copyto(as_raw(out), result.reshape(out.shape))
        return out
    if data.dtype.itemsize > 1 and data.dtype.isnative != out.dtype.isnative:
        np.copyto(target, view.byteswap())
    elif source.flags.c_contiguous:
        copy_gathered(target, source.reshape(-1), view)
    else:
        np.copyto(target, view)
    return out


# ------------------------------------------------------------------------------------------------
# The declaration


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    data = arrays["data"]
    checked = extract_image_patches_plan(
        data,
        attributes["sizes"],
        attributes["strides"],
        attributes["rates"],
        attributes["auto_pad"],
    )
    return Plan(
        checked.output_shape, functools.partial(extract_image_patches_planned, data, checked)
    )


def _workspace(arrays: Arrays, attributes: Attributes) -> int:
    data = arrays["data"]
    checked = extract_image_patches_plan(
        data,
        attributes["sizes"],
        attributes["strides"],
        attributes["rates"],
        attributes["auto_pad"],
    )
    return patches_workspace_bytes(data, checked)


_IMAGE = [[[[row * 10 + col + 1 for col in range(10)] for row in range(10)]]]
_TWO_MAPS = [[[[m * 25 + row * 5 + col + 1 for col in range(5)] for row in range(5)]
              for m in range(2)]]  # fmt: skip
# fmt: off
#: The spec's worked examples (name, summary, request, output).
_EXAMPLES: list[tuple[str, str, dict[str, Any], Any]] = [
    ("example_1", "ExtractImagePatches-3 example 1: sizes 3,3, strides 5,5, rates 1,1, valid, "
     "on a 1x1x10x10 image of 1..100",
     {"data": _IMAGE, "sizes": [3, 3], "strides": [5, 5], "rates": [1, 1], "auto_pad": "valid"},
     [[[[1, 6], [51, 56]], [[2, 7], [52, 57]], [[3, 8], [53, 58]], [[11, 16], [61, 66]],
       [[12, 17], [62, 67]], [[13, 18], [63, 68]], [[21, 26], [71, 76]], [[22, 27], [72, 77]],
       [[23, 28], [73, 78]]]]),
    ("example_2", "ExtractImagePatches-3 example 2: sizes 4,4, strides 8,8, rates 1,1, valid",
     {"data": _IMAGE, "sizes": [4, 4], "strides": [8, 8], "rates": [1, 1], "auto_pad": "valid"},
     [[[[v]] for v in (1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34)]]),
    ("example_3", "ExtractImagePatches-3 example 3: sizes 4,4, strides 9,9, rates 1,1, "
     "same_upper (zeros where the patches reach past the image)",
     {"data": _IMAGE, "sizes": [4, 4], "strides": [9, 9], "rates": [1, 1],
      "auto_pad": "same_upper"},
     [[[[0, 0], [0, 89]], [[0, 0], [81, 90]], [[0, 0], [82, 0]], [[0, 0], [83, 0]],
       [[0, 9], [0, 99]], [[1, 10], [91, 100]], [[2, 0], [92, 0]], [[3, 0], [93, 0]],
       [[0, 19], [0, 0]], [[11, 20], [0, 0]], [[12, 0], [0, 0]], [[13, 0], [0, 0]],
       [[0, 29], [0, 0]], [[21, 30], [0, 0]], [[22, 0], [0, 0]], [[23, 0], [0, 0]]]]),
    ("example_4", "ExtractImagePatches-3 example 4: sizes 3,3, strides 5,5, rates 2,2, valid",
     {"data": _IMAGE, "sizes": [3, 3], "strides": [5, 5], "rates": [2, 2], "auto_pad": "valid"},
     [[[[1, 6], [51, 56]], [[3, 8], [53, 58]], [[5, 10], [55, 60]], [[21, 26], [71, 76]],
       [[23, 28], [73, 78]], [[25, 30], [75, 80]], [[41, 46], [91, 96]], [[43, 48], [93, 98]],
       [[45, 50], [95, 100]]]]),
    ("example_5", "ExtractImagePatches-3 example 5: sizes 2,2, strides 3,3, rates 1,1, valid, "
     "on a 1x2x5x5 image of two feature maps (1..25, 26..50)",
     {"data": _TWO_MAPS, "sizes": [2, 2], "strides": [3, 3], "rates": [1, 1],
      "auto_pad": "valid"},
     [[[[1, 4], [16, 19]], [[26, 29], [41, 44]], [[2, 5], [17, 20]], [[27, 30], [42, 45]],
       [[6, 9], [21, 24]], [[31, 34], [46, 49]], [[7, 10], [22, 25]], [[32, 35], [47, 50]]]]),
]
# fmt: on


def _list(name: str, words: str) -> Attribute:
    return Attribute(name, None, words, kind=INTS)


OP = Op(
    name="extract_image_patches",
    spec="ExtractImagePatches-3",
    summary="ExtractImagePatches-3: the patches of a 4-D image, stacked in the depth dimension",
    description="ExtractImagePatches-3 over a 4-D `data` [batch, depth, in_rows, in_cols]: the "
    "patches of `sizes` [rows, cols], `strides` apart, sampled `rates` apart (as a dilated "
    "convolution), each vectorized into the depth dimension: the output is [batch, sizes[0] * "
    "sizes[1] * depth, out_rows, out_cols], element (i * sizes[1] + j) * depth + c of a patch "
    "being channel c at patch position (i, j). `auto_pad` valid takes only patches inside the "
    "image; same_upper / same_lower pad with zeros to ceil(in / stride) patches (an odd padding's "
    "extra at the end / beginning). Send JSON (tensors as nested arrays or base64 .npy) or an "
    ".npz archive.",
    request_doc="ExtractImagePatches-3: the patches of `data` by `sizes`, `strides`, `rates` and "
    "`auto_pad`.",
    inputs=(
        Input(
            "data",
            "The image, [batch, depth, in_rows, in_cols] (input 1, type T).",
            DATA_CONSTRAINT + " A 4-D tensor.",
            ALL_TYPES,
            rank="4",
        ),
    ),
    attributes=(
        _list(
            "sizes", "The size [size_rows, size_cols] of the patches: two non-negative integers."
        ),
        _list(
            "strides",
            "The distance [stride_rows, stride_cols] between two consecutive patches: two "
            "positive integers.",
        ),
        _list(
            "rates",
            "The input stride [rate_rows, rate_cols] between two samples of a patch (as a dilated "
            "convolution's rate): two non-negative integers.",
        ),
        Attribute(
            "auto_pad",
            None,
            "How the padding is calculated: valid (none), same_upper or same_lower (zeros up to "
            "ceil(in / stride) patches, an odd padding's extra at the end or the beginning).",
            choices=AUTO_PADS,
        ),
    ),
    plan=_plan,
    workspace=_workspace,
    examples={
        name: example(summary, request, output) for name, summary, request, output in _EXAMPLES
    },
    decisions=(
        "ExtractImagePatches-3 padding (same_upper/same_lower): the number of patches is "
        "ceil(in / stride) and the total padding max((out - 1) * stride + size_eff - in, 0), "
        "split evenly with the odd one at the end (same_upper) or the beginning (same_lower), as "
        "the spec's example 3 shows; valid takes floor((in - size_eff) / stride) + 1 patches, 0 "
        "when the image is smaller than a patch.",
        "ExtractImagePatches-3 output depth order: (i * sizes[1] + j) * depth + c, the patch "
        "position outer and the channel inner, as the spec's example 5 shows.",
        "ExtractImagePatches-3 strides of 0: the range of values says non-negative, but a "
        "distance of 0 between patches gives no count of patches (a division by 0); refused "
        "(422 naming strides).",
        "ExtractImagePatches-3 sizes of 0 give patches of no sample (an output of depth 0); "
        "rates of 0 sample one pixel size times (size_eff = size + (size - 1) * (0 - 1) = 1), as "
        "the spec's formula says.",
        "ExtractImagePatches-3 the padding's zeros are zero bits of the element type (False, 0, "
        "+0.0).",
        "ExtractImagePatches-3 amplifies: a few bytes may ask for a huge output (sizes "
        "1000000,1000000 over a 1x1x1x1 image, same_upper: 10**12 elements); the planner gives "
        "the shape and admission refuses it (413) before anything is built.",
        "ExtractImagePatches-3 example pictures print 79 for the element 97 of the 1..100 image; "
        "the image is read as the text says (1 through 100).",
    ),
)
