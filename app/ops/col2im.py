"""Col2Im-15: an image built from the sliding blocks of a (N, C * Product(kernel_size), L)
tensor, the values of overlapping blocks added."""

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from app.ops import loops
from app.ops.declaration import (
    ALL_TYPES,
    DATA_CONSTRAINT,
    INTS,
    LIMIT_RANK,
    Arrays,
    Attribute,
    Attributes,
    Input,
    Op,
    Plan,
    example,
)
from app.ops.errors import SpecError
from app.ops.raw import as_raw, copy_permuted, strided_view

_INDEX_TYPES = ("int32", "int64")
#: The largest attribute value (the compiled loops take them as int64).
_INT64_MAX = 2**63 - 1


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
    if any(not isinstance(v, int | np.integer) or not low <= v <= _INT64_MAX for v in items):
        rule = "positive integers" if positive else "non-negative integer numbers"
        raise SpecError(name, f"{name} must be {rule} up to 2**63 - 1, got {list(items)}")
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


def _first_elements(axis: BlockAxis) -> tuple[npt.NDArray[np.int64], bool]:
    """Per pixel along the axis, the first kernel element that reaches it (``axis.size`` where
    none does), and whether a pixel is reached twice (by a compiled loop: a kernel may have as
    many elements along an axis as the data has rows)."""
    first = np.full(axis.length, axis.size, dtype=np.int64)
    twice = loops.col2im_reach(first, axis.size, axis.stride, axis.dilation, axis.pad, axis.blocks)
    return first, twice


#: How ``loops.col2im`` adds two values of a type (its ``kind``): 0 integers (wrapping, the
#: default), 1 bool (or), 2 IEEE floats of the element's width, 3 bfloat16.
_SUM_KINDS = {"bool": 1, "float16": 2, "float32": 2, "float64": 2, "bfloat16": 3}


def col2im_workspace_bytes(data: npt.NDArray[Any], plan: Col2ImPlan) -> int:
    """The kernel's temporaries beyond input and output: data C-ordered in native order when it
    comes otherwise; per pixel row and column the first kernel element reaching it (int64) and
    whether none does (a byte); and the NumPy stand-in's masks (a byte per block, and per block
    row and column: at most two per block), which it holds while numba compiles."""
    copied = 0 if data.dtype.isnative and data.flags.c_contiguous else data.nbytes
    pixels = plan.rows.length + plan.cols.length
    return copied + 9 * pixels + 2 * plan.rows.blocks * plan.cols.blocks


def _place_whole(out: npt.NDArray[Any], values: npt.NDArray[Any], plan: Col2ImPlan) -> bool:
    """Where no pixel is reached twice and every kernel element reaches the same blocks (no
    padding cuts some off): each value lands in one pixel, so the output seen as [N, C, i, j, p,
    q] (a strided view of it) takes ``values`` whole by one compiled permuted copy, each block
    row's kernel elements written while the output lines are in the cache (pixels no block
    reaches are the caller's to zero). False, nothing written, where the reach differs between
    kernel elements or none reaches."""
    rows, cols = plan.rows, plan.cols
    # A later kernel element starts no earlier: its first and stop blocks are no larger. So
    # every element reaches the same blocks when the first and the last do (no Python loop over
    # a kernel that may have as many elements along an axis as the data has rows).
    reach = [_reach(axis, 0) for axis in (rows, cols)]
    if reach != [_reach(axis, axis.size - 1) for axis in (rows, cols)]:
        return False
    (p0, p1), (q0, q1) = reach
    if p1 <= p0 or q1 <= q0:
        return False
    raw_out = as_raw(out)
    blocks = as_raw(values).reshape(
        out.shape[0], plan.channels, rows.size, cols.size, rows.blocks, cols.blocks
    )[:, :, :, :, p0:p1, q0:q1]
    item = raw_out.itemsize
    height, width = rows.length * cols.length * item, cols.length * item
    y0, x0 = p0 * rows.stride - rows.pad, q0 * cols.stride - cols.pad
    corner = raw_out[:, :, y0, x0]  # where kernel element (0, 0) of the first block lands
    steps = (
        out.shape[1] * height,
        height,
        rows.dilation * width,
        cols.dilation * item,
        rows.stride * width,
        cols.stride * item,
    )
    target = strided_view(corner, blocks.shape, steps, writeable=True)
    copy_permuted(raw_out.reshape(-1), target, as_raw(values).reshape(-1), blocks)
    return True


def col2im_planned(
    data: npt.NDArray[Any], plan: Col2ImPlan, out: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any]:
    """``col2im`` with the inputs already checked: each kernel element of each block put in the
    pixel it reaches, in the kernel's row-major order, its bits where it is the first to reach
    the pixel and added in the element type where an earlier one did (a pixel reached once
    keeps its bits): one compiled loop (``loops.col2im``), or one permuted copy where no pixel
    is reached twice and every kernel element reaches the same blocks."""
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
    if rows.blocks == 0 or cols.blocks == 0:  # no block (the data is empty, its kernel any size)
        as_raw(out).fill(0)
        return out
    row_first, rows_twice = _first_elements(rows)
    col_first, cols_twice = _first_elements(cols)
    row_unreached, col_unreached = row_first == rows.size, col_first == cols.size
    values = data if data.dtype.isnative else np.ascontiguousarray(data, dtype=work)
    whole = not (rows_twice or cols_twice) and values.flags.c_contiguous
    if whole and _place_whole(out, values, plan):
        _zero_unreached(out, row_unreached, col_unreached)
        return out
    axes = np.array(
        [[a.size, a.stride, a.dilation, a.pad, a.blocks, a.length] for a in (rows, cols)], np.int64
    ).reshape(-1)
    kind = _SUM_KINDS.get(work.name, 0)
    source = as_raw(np.ascontiguousarray(values)).reshape(-1)
    planes = out.shape[0] * out.shape[1]
    loops.col2im(source, as_raw(out).reshape(-1), row_first, col_first, axes, planes, kind)
    _zero_unreached(out, row_unreached, col_unreached)
    return out


def _zero_unreached(
    out: npt.NDArray[Any], rows: npt.NDArray[np.bool_], cols: npt.NDArray[np.bool_]
) -> None:
    """Zero the image's rows and columns no block reaches (``rows``, ``cols``: True there)."""
    zero = np.zeros((), dtype=out.dtype)
    if rows.any():
        out[:, :, rows, :] = zero
    if cols.any():
        out[:, :, :, cols] = zero


# ------------------------------------------------------------------------------------------------
# The declaration


def _checked(arrays: Arrays, attributes: Attributes) -> Col2ImPlan:
    return col2im_plan(
        arrays["data"],
        arrays["output_size"],
        arrays["kernel_size"],
        attributes["strides"],
        attributes["dilations"],
        attributes["pads_begin"],
        attributes["pads_end"],
    )


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    checked = _checked(arrays, attributes)
    return Plan(checked.output_shape, functools.partial(col2im_planned, arrays["data"], checked))


def _workspace(arrays: Arrays, attributes: Attributes) -> int:
    return col2im_workspace_bytes(arrays["data"], _checked(arrays, attributes))


def _size_input(name: str, number: int, words: str) -> Input:
    return Input(
        name,
        f"{words} (input {number}, type T_IND).",
        "T_IND: int64 or int32, a 1D tensor of two non-negative integers (one per spatial "
        "dimension). JSON form is int64.",
        _INDEX_TYPES,
        rank="1",
        limit=LIMIT_RANK,
    )


# fmt: off
#: Small examples by the spec's text (its own three give shapes without values: tested as plans).
_EXAMPLES: list[tuple[str, str, dict[str, Any], Any]] = [
    ("channel_major", "Col2Im-15, C = 2, kernel 1x2, one block: a block's values are "
     "channel-major (channel 0's kernel elements, then channel 1's)",
     {"data": [[[1], [2], [3], [4]]], "output_size": [1, 2], "kernel_size": [1, 2],
      "dtype": "int32"},
     [[[[1, 2]], [[3, 4]]]]),
    ("overlap_adds", "Col2Im-15, kernel 1x2 sliding by 1 over a row of 4: pixels two blocks "
     "reach hold the sum",
     {"data": [[[1, 10, 100], [2, 20, 200]]], "output_size": [1, 4], "kernel_size": [1, 2],
      "dtype": "float32"},
     [[[[1.0, 12.0, 120.0, 200.0]]]]),
    ("strides_and_pads", "Col2Im-15, 2x2 kernel, strides 2,2, pads 1,1: blocks reach past the "
     "image (those values are dropped)",
     {"data": [[list(range(1, 10)), list(range(11, 20)), list(range(21, 30)),
                list(range(31, 40))]],
      "output_size": [4, 4], "kernel_size": [2, 2], "strides": [2, 2], "pads_begin": [1, 1],
      "pads_end": [1, 1], "dtype": "int32"},
     [[[[31, 22, 32, 23], [14, 5, 15, 6], [34, 25, 35, 26], [17, 8, 18, 9]]]]),
]
# fmt: on


def _list(name: str, default: tuple[int, int], words: str) -> Attribute:
    return Attribute(name, default, words, kind=INTS)


OP = Op(
    name="col2im",
    spec="Col2Im-15",
    summary="Col2Im-15: an image built from sliding blocks, overlapping values added",
    description="Col2Im-15 over `data` (N, C * Product(kernel_size), L): the image (N, C, "
    "output_size[0], output_size[1]) whose pixels hold the values of the L sliding blocks that "
    "reach them (block l = p * blocks_cols + q puts kernel element (i, j) at row p * strides[0] "
    "+ i * dilations[0] - pads_begin[0], column q * strides[1] + j * dilations[1] - "
    "pads_begin[1]), values of overlapping blocks added in the element type; a block's C * K "
    "values are channel-major (c * K + i * kernel_size[1] + j). L must be the product of the "
    "blocks per dimension. Send JSON (tensors as nested arrays or base64 .npy) or an .npz "
    "archive.",
    request_doc="Col2Im-15: an image of `output_size` from the sliding blocks in `data`.",
    inputs=(
        Input(
            "data",
            "The blocks, (N, C * Product(kernel_size), L) (input 1, type T).",
            DATA_CONSTRAINT + " Shape (N, C * Product(kernel_size), L).",
            ALL_TYPES,
            rank="3",
        ),
        _size_input("output_size", 2, "The spatial shape of the output image"),
        _size_input("kernel_size", 3, "The size of the sliding blocks"),
    ),
    attributes=(
        _list("strides", (1, 1), "The stride of the sliding blocks: two positive integers."),
        _list(
            "dilations",
            (1, 1),
            "The local stride of a block's elements: two non-negative integers.",
        ),
        _list("pads_begin", (0, 0), "The zero pixels added at the beginning of each axis."),
        _list("pads_end", (0, 0), "The zero pixels added at the end of each axis."),
    ),
    plan=_plan,
    workspace=_workspace,
    examples={
        name: example(summary, request, output) for name, summary, request, output in _EXAMPLES
    },
    decisions=(
        "Col2Im-15 a block's C x K values are channel-major (index c * K + k, k = i * "
        "kernel_size[1] + j): the spec's sentence ('each block contains Product(kernel_size) "
        "vectors containing values from each channel C') is the one PyTorch's nn.Fold docs use "
        "for the same layout, (N, C x Product(kernel_size), L) with channel-major rows, which "
        "this op mirrors (same formula for L, same attributes), and which OpenVINO's CPU plugin "
        "follows (the differential tests agree on every case with C > 1 and K > 1); the "
        "kernel-major reading would contradict both.",
        "Col2Im-15 'combining the values contained in blocks': overlapping values are added in "
        "the element type (floats rounded after each addition, integers wrap, bool OR), in the "
        "kernel's row-major order (i, then j) at each pixel; a pixel one value reaches keeps "
        "its bits (-0.0, NaN payloads); pixels no block reaches are zero. A sum with one NaN "
        "keeps its payload (quieted); of two NaNs, the earlier one's (float32, float64) or the "
        "later one's (float16, bfloat16, as NumPy's and ml_dtypes' additions give them).",
        "Col2Im-15 data is 3-D: the text's shape (N, C * Product(kernel_size), L) is read over "
        "its word '4D tensor' (the output is the 4-D one); an unbatched 2-D data is refused.",
        "Col2Im-15 the attribute is served as `strides` (shared/api.md's name; the spec's "
        "heading says stride).",
        "Col2Im-15 kernel_size and strides of 0: refused (422 naming them): C cannot be "
        "derived from C * 0, and a stride of 0 gives no count of blocks; output_size, "
        "dilations and pads may be 0.",
        "Col2Im-15 L must equal the product of floor((output_size[d] + pads_begin[d] + "
        "pads_end[d] - dilations[d] * (kernel_size[d] - 1) - 1) / strides[d]) + 1 (0 when "
        "negative) over d; data's L otherwise is refused naming data. The spec's Example 2 "
        "prints L = 25 where its formula gives 7 * 7 = 49: the text wins, L = 25 is refused.",
        "Col2Im-15's three examples give shapes without values: they are tested as plans; "
        "/docs shows three small examples by the text.",
        "Col2Im-15 amplifies: a few bytes may ask for a huge image (output_size "
        "1000000,1000000 with strides 10000000,10000000 takes one block); the planner gives the "
        "shape and admission refuses it (413) before anything is built.",
    ),
)
