"""Col2Im-15: an image built from the sliding blocks of a (N, C * Product(kernel_size), L)
tensor, the values of overlapping blocks added."""

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops.errors import SpecError
from app.ops.raw import as_raw

_INDEX_TYPES = ("int32", "int64")


class BlockAxis(NamedTuple):
    """One spatial axis: the image's ``length``, the kernel's ``size``, ``blocks`` along it."""

    length: int
    size: int
    stride: int
    dilation: int
    pad: int
    blocks: int


class Col2ImPlan(NamedTuple):
    """What the checks of one Col2Im found."""

    channels: int
    rows: BlockAxis
    cols: BlockAxis
    output_shape: tuple[int, ...]


def _two_values(name: str, values: npt.NDArray[Any], positive: bool) -> tuple[int, int]:
    """A 1D tensor of two non-negative integers (int32 or int64), read on its shape first."""
    if values.dtype.name not in _INDEX_TYPES:
        raise SpecError(name, f"{name} must be of type int64 or int32 (T_IND), got {values.dtype}")
    if values.shape != (2,):
        raise SpecError(
            name,
            f"{name} must be a 1D tensor of two values (one per spatial dimension), got shape "
            f"{list(values.shape)}",
        )
    first, second = int(values[0]), int(values[1])
    if min(first, second) < (1 if positive else 0):
        rule = "positive integers" if positive else "non-negative integer numbers"
        raise SpecError(name, f"{name} must be {rule}, got [{first}, {second}]")
    return first, second


def _attribute_pair(name: str, values: Sequence[int], positive: bool) -> tuple[int, int]:
    items = tuple(values)
    if len(items) != 2:
        raise SpecError(
            name, f"{name} must have two values (one per spatial dimension), got {list(items)}"
        )
    low = 1 if positive else 0
    if any(not isinstance(v, int | np.integer) or v < low for v in items):
        rule = "positive integers" if positive else "non-negative integer numbers"
        raise SpecError(name, f"{name} must be {rule}, got {list(items)}")
    return int(items[0]), int(items[1])


def col2im_plan(
    data: npt.NDArray[Any],
    output_size: npt.NDArray[Any],
    kernel_size: npt.NDArray[Any],
    strides: Sequence[int] = (1, 1),
    dilations: Sequence[int] = (1, 1),
    pads_begin: Sequence[int] = (0, 0),
    pads_end: Sequence[int] = (0, 0),
) -> Col2ImPlan:
    """Check the inputs against the spec and give the output's shape ``(N, C, output_size[0],
    output_size[1])``, with nothing allocated."""
    size = _two_values("output_size", output_size, positive=False)
    kernel = _two_values("kernel_size", kernel_size, positive=True)
    stride = _attribute_pair("strides", strides, positive=True)
    dilation = _attribute_pair("dilations", dilations, positive=False)
    begin = _attribute_pair("pads_begin", pads_begin, positive=False)
    end = _attribute_pair("pads_end", pads_end, positive=False)
    if data.ndim != 3:
        raise SpecError(
            "data",
            f"data must have the shape (N, C * Product(kernel_size), L), got shape "
            f"{list(data.shape)}",
        )
    axes = []
    for d in range(2):
        reach = size[d] + begin[d] + end[d] - dilation[d] * (kernel[d] - 1) - 1
        blocks = max(reach // stride[d] + 1, 0)
        axes.append(BlockAxis(size[d], kernel[d], stride[d], dilation[d], begin[d], blocks))
    product = kernel[0] * kernel[1]
    if data.shape[1] % product:
        raise SpecError(
            "data",
            f"data's second dimension must be C * Product(kernel_size) = C * {product}, got "
            f"{data.shape[1]}",
        )
    expected = axes[0].blocks * axes[1].blocks
    if data.shape[2] != expected:
        raise SpecError(
            "data",
            f"data's last dimension must be L = {axes[0].blocks} * {axes[1].blocks} = {expected} "
            f"blocks (by output_size, kernel_size, strides, dilations and pads), got "
            f"{data.shape[2]}",
        )
    channels = data.shape[1] // product
    return Col2ImPlan(channels, axes[0], axes[1], (data.shape[0], channels, size[0], size[1]))


def col2im(
    data: npt.ArrayLike,
    output_size: npt.ArrayLike,
    kernel_size: npt.ArrayLike,
    strides: Sequence[int] = (1, 1),
    dilations: Sequence[int] = (1, 1),
    pads_begin: Sequence[int] = (0, 0),
    pads_end: Sequence[int] = (0, 0),
    out: npt.NDArray[Any] | None = None,
) -> npt.NDArray[Any]:
    """Col2Im-15: ``out[n, c, y, x]`` is the sum, in the element type, of every ``data[n, c * K
    + i * kernel_size[1] + j, l]`` (channel-major, ``K = Product(kernel_size)``) whose block ``l
    = p * blocks_cols + q`` places kernel element ``(i, j)`` at ``y = p * strides[0] + i *
    dilations[0] - pads_begin[0]``, ``x = q * strides[1] + j * dilations[1] - pads_begin[1]``;
    zero where no block reaches."""
    plan = col2im_plan(
        np.asarray(data),
        np.asarray(output_size),
        np.asarray(kernel_size),
        strides,
        dilations,
        pads_begin,
        pads_end,
    )
    return col2im_planned(np.asarray(data), plan, out)


def _reach(axis: BlockAxis, offset: int) -> tuple[int, int]:
    """The blocks ``[first, stop)`` whose kernel element ``offset`` lies inside the image."""
    start = offset * axis.dilation - axis.pad  # where block 0 puts it
    first = 0 if start >= 0 else (-start + axis.stride - 1) // axis.stride
    stop = min(axis.blocks, (axis.length - 1 - start) // axis.stride + 1)
    return first, max(first, stop)


def _coverage(axis: BlockAxis) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """How many (kernel element, block) pairs reach each pixel along the axis, and the first
    kernel element that does (``axis.size`` where none)."""
    counts = np.zeros(axis.length, dtype=np.int64)
    first_offset = np.full(axis.length, axis.size, dtype=np.int64)
    for offset in range(axis.size):
        first, stop = _reach(axis, offset)
        if stop > first:
            start = offset * axis.dilation - axis.pad
            last = start + (stop - 1) * axis.stride
            reached = slice(start + first * axis.stride, last + 1, axis.stride)
            counts[reached] += 1
            np.minimum(first_offset[reached], offset, out=first_offset[reached])
    return counts, first_offset


def _combine(
    raw_out: npt.NDArray[Any],
    raw_blocks: npt.NDArray[Any],
    out: npt.NDArray[Any],
    blocks: npt.NDArray[Any],
    i: int,
    j: int,
    ys: slice,
    xs: slice,
    reach: tuple[tuple[int, int], tuple[int, int]],
    first: tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]] | None,
) -> None:
    """Kernel element ``(i, j)`` of every block into the pixels it reaches: its bits where it
    is the first to reach a pixel (``first``: per row and per column; None: first everywhere),
    added in the element type where an earlier element already did."""
    (p0, p1), (q0, q1) = reach
    if first is None or (first[0].all() and first[1].all()):
        np.copyto(raw_out[:, :, ys, xs], raw_blocks[:, :, i, j, p0:p1, q0:q1])
        return
    target = out[:, :, ys, xs]
    source = blocks[:, :, i, j, p0:p1, q0:q1]
    if not (first[0].any() and first[1].any()):
        np.add(target, source, out=target)
        return
    mask = first[0][:, None] & first[1][None, :]
    np.copyto(raw_out[:, :, ys, xs], raw_blocks[:, :, i, j, p0:p1, q0:q1], where=mask)
    np.add(target, source, out=target, where=~mask)


def col2im_workspace_bytes(data: npt.NDArray[Any]) -> int:
    """The kernel's temporaries beyond input and output: data in native order when it comes
    byte-swapped (the per-axis coverage counts are a few bytes a pixel row/column)."""
    return 0 if data.dtype.isnative else data.nbytes


def col2im_planned(
    data: npt.NDArray[Any], plan: Col2ImPlan, out: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any]:
    """``col2im`` with the inputs already checked: one strided copy per kernel element, in the
    kernel's row-major order, its bits put where it is the first to reach a pixel and added in
    the element type where an earlier one did (a pixel reached once keeps its bits)."""
    if out is None:
        out = np.empty(plan.output_shape, dtype=data.dtype)
    work = data.dtype.newbyteorder("=")
    if not out.flags.c_contiguous or out.dtype != work:
        result = col2im_planned(data, plan, np.empty(plan.output_shape, dtype=work))
        np.copyto(out, result)  # another byte order or layout: each value moved, bits kept
        return out
    if out.size == 0:
        return out
    rows, cols = plan.rows, plan.cols
    row_counts, row_first = _coverage(rows)
    col_counts, col_first = _coverage(cols)
    overlap = int(row_counts.max(initial=0)) > 1 or int(col_counts.max(initial=0)) > 1
    values = data if data.dtype.isnative else data.astype(work)
    blocks = values.reshape(
        data.shape[0], plan.channels, rows.size, cols.size, rows.blocks, cols.blocks
    )
    raw_out, raw_blocks = as_raw(out), as_raw(blocks)
    with np.errstate(all="ignore"):  # integers wrap, NaNs and infinities are values here
        for i in range(rows.size):
            p0, p1 = _reach(rows, i)
            if p1 <= p0:
                continue
            y0 = p0 * rows.stride + i * rows.dilation - rows.pad
            ys = slice(y0, y0 + (p1 - p0 - 1) * rows.stride + 1, rows.stride)
            for j in range(cols.size):
                q0, q1 = _reach(cols, j)
                if q1 <= q0:
                    continue
                x0 = q0 * cols.stride + j * cols.dilation - cols.pad
                xs = slice(x0, x0 + (q1 - q0 - 1) * cols.stride + 1, cols.stride)
                source = (p0, p1), (q0, q1)
                _combine(raw_out, raw_blocks, out, blocks, i, j, ys, xs, source,
                         (row_first[ys] == i, col_first[xs] == j) if overlap else None)  # fmt: skip
    zero = np.zeros((), dtype=work)
    if (row_counts == 0).any():
        out[:, :, row_counts == 0, :] = zero
    if (col_counts == 0).any():
        out[:, :, :, col_counts == 0] = zero
    return out
