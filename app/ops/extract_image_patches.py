"""ExtractImagePatches-3: the patches of a 4-D image, as a convolution would visit them, stacked
in the depth dimension."""

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops.errors import SpecError
from app.ops.raw import as_raw

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
    view = np.lib.stride_tricks.as_strided(
        source,
        (source.shape[0], rows.size, cols.size, source.shape[1], rows.patches, cols.patches),
        (b, r * rows.rate, q * cols.rate, c, r * rows.stride, q * cols.stride),
        writeable=False,
    )
    target = as_raw(out).reshape(view.shape) if out.flags.c_contiguous else None
    if target is None:
        result = np.empty(view.shape, dtype=source.dtype)
        np.copyto(result, view)
        np.copyto(as_raw(out), result.reshape(out.shape))
        return out
    if data.dtype.itemsize > 1 and data.dtype.isnative != out.dtype.isnative:
        np.copyto(target, view.byteswap())
    else:
        np.copyto(target, view)
    return out
