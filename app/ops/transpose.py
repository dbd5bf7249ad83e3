"""Transpose-1: the dimensions of a tensor reordered by a permutation (reversed when empty)."""

from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops import loops
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
from app.ops.raw import STREAM_BYTES, as_raw, is_integer_type


def transpose_order(rank: int, input_order: npt.NDArray[Any]) -> tuple[int, ...]:
    """Check ``input_order`` against the spec and give the permutation: its values, or the axes
    reversed when it is empty."""
    if not is_integer_type(input_order.dtype):
        raise SpecError(
            "input_order",
            f"input_order must be of an integer type (T_AXIS), got {input_order.dtype.name}",
        )
    if input_order.ndim != 1:
        raise SpecError(
            "input_order",
            f"input_order must be a 1D tensor, got a tensor of shape {list(input_order.shape)}",
        )
    count = input_order.shape[0]
    if count == 0:
        return tuple(reversed(range(rank)))
    if count != rank:
        raise SpecError(
            "input_order",
            f"input_order must have n elements, n being the rank of arg ({rank}), or none; "
            f"got {count}",
        )
    values = input_order.tolist()
    if sorted(values) != list(range(rank)):
        raise SpecError(
            "input_order",
            f"input_order must contain every integer in the range [0, {rank - 1}], "
            f"got {_shown(values)}",
        )
    return tuple(int(value) for value in values)


def _shown(values: list[int]) -> str:
    return str(values) if len(values) <= 16 else f"{str(values[:16])[:-1]}, ...]"


def transpose(
    arg: npt.ArrayLike, input_order: npt.ArrayLike, out: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any]:
    """Transpose-1: ``arg`` with its axes permuted by ``input_order`` (reversed when it is
    empty): ``output[i(order[0]), ..., i(order[n-1])] = arg[i(0), ..., i(n-1)]``."""
    arg = np.asarray(arg)
    order = transpose_order(arg.ndim, np.asarray(input_order))
    return _transposed(arg, order, out)


#: The side of the square tiles a 2-D transpose moves one at a time, in elements, by item size,
#: where neither the line tiles nor the strips below apply; each a multiple of the side of the
#: blocks transposed in the registers inside it (16, 8, 8 and 4 elements). Measured against
#: 128 (64 for 8 bytes), kernel alone, thread time, / a copy: float32 3001 x 5003 5.1 -> 1.8,
#: 2999 x 2001 2.2 -> 1.5, 1000 x 1000 2.1 -> 1.2, float16 2001 x 7001 2.1 -> 1.5, float64
#: 3001 x 1003 1.6 -> 1.4; float32 2048 x 512 1.73 -> 1.81, 300 x 30000 1.67 -> 1.73 the only
#: losses seen (tiles of 16 lose more there). Bytes keep 128: 64 lost with 96-256 channels
#: (2.0-2.2 -> 2.6-2.7) and measured both ways on 4001 x 4001.
_TILE = {1: 128, 2: 32, 4: 32, 8: 32}
#: Source rows of a multiple of 4 KiB, shorter than 64 KiB: each falls in the same first-level
#: cache set as the others, so a square tile's target lines are evicted half written. Such a
#: matrix goes in tiles one cache line of rows tall and _STRIP_COLUMNS wide, a column of blocks
#: after another, each target line written whole at once (2-D int8 of 8 KiB rows: 4.2-5.0 ->
#: 2.9-3.3 times the copy; rows of 64 KiB and more fall in one set of the second-level cache
#: too, and the square tiles are quicker there).
_SET_PERIOD = 4096
_STRIP_BELOW = 64 << 10
_STRIP_COLUMNS = 256
_LINE = 64
#: Outputs of ``raw.STREAM_BYTES`` or more whose rows (the source's columns) are whole lines
#: long, 512 bytes or more, go in tiles of one line a side, each line read and written whole in
#: one go, written by non-temporal stores (``_line_tiles`` in compiled.py; the set conflicts
#: of rows a power of two apart then cost nothing). Measured on 64 MiB (thread time, against
#: ``np.copyto`` of the same bytes): 2-D float32 4096 x 4096 5.6 -> 0.9, int8 8192 x 8192 4.9 ->
#: 1.1-1.3; NCHW -> NHWC (target rows of 64 and 256 bytes) stays on the square tiles, quicker
#: there (1.5 against 1.6-5); at 4 MiB and less the line tiles are not always quicker. So do
#: source rows shorter than 512 bytes and not whole lines: the columns past the last whole tile
#: move an element at a time (float32 1M x 20: 1.8 against 3.2; rows of whole lines gain,
#: int8 1M x 64: 1.7 -> 1.3).
_LINE_ROWS_FROM = 512
#: Target rows of whole lines, _SHORT_TILE elements or fewer (NCHW -> NHWC: the channels), go
#: in square tiles of _SHORT_TILE elements, a column of blocks after another: NCHW -> NHWC of
#: 64 MiB, 64 channels, float32 / int8, 1.54-1.60 / 1.43-1.47 -> 1.27-1.37 / 1.16-1.19 times
#: the copy (thread time, same process); int16 4 x 32 channels 1.35 -> 1.16; float64 32
#: channels 1.37 -> 1.16. More channels lose there (int8 128 and 256 channels 1.8-2.0 -> 2.5-2.7,
#: float16 128: 1.8 -> 2.4), and so do rows not of whole lines (float32 100 x 100000: 1.9 ->
#: 2.4): they keep the tiles below.
_SHORT_TILE = 64


def _transposed(
    arg: npt.NDArray[Any], order: tuple[int, ...], out: npt.NDArray[Any] | None
) -> npt.NDArray[Any]:
    source = np.transpose(as_raw(arg), order)
    if out is None:
        out = np.empty(source.shape, arg.dtype)
    target = as_raw(out)
    swapped = _as_swap(arg.shape, order)
    flat = arg.flags.c_contiguous and out.flags.c_contiguous and arg.itemsize in _TILE
    compiled = loops.ready_module() if swapped is not None and flat and arg.size else None
    if compiled is None or swapped is None:  # no tiles to cut, or the loops compiling
        np.copyto(target, source, casting="equiv")
        return out
    # A batch of 2-D transposes: the compiled tiled loop (NumPy's copy of the transposed view
    # misses the cache on every element, and tiles cut by NumPy cost a call each).
    batch, rows, columns = swapped
    row_bytes = columns * arg.itemsize
    target_row = rows * arg.itemsize
    if (
        out.nbytes >= STREAM_BYTES
        and target_row % _LINE == 0
        and target_row >= _LINE_ROWS_FROM
        and row_bytes >= _LINE
        and (row_bytes % _LINE == 0 or row_bytes >= _LINE_ROWS_FROM)
    ):
        compiled.transpose_tiles(as_raw(arg).reshape(-1), target.reshape(-1), batch, rows,
                                 columns, 0, 0, 0, 1)  # fmt: skip
        return out
    if rows <= _SHORT_TILE and target_row % _LINE == 0:
        tall = wide = _SHORT_TILE
        columns_first = 1
    elif row_bytes % _SET_PERIOD == 0 and row_bytes < _STRIP_BELOW:
        tall, wide, columns_first = _LINE // arg.itemsize, _STRIP_COLUMNS, 1
    else:
        tall = wide = _TILE[arg.itemsize]
        columns_first = 0
    compiled.transpose_tiles(as_raw(arg).reshape(-1), target.reshape(-1), batch, rows, columns,
                             tall, wide, columns_first, 0)  # fmt: skip
    return out


def _as_swap(shape: tuple[int, ...], order: tuple[int, ...]) -> tuple[int, int, int] | None:
    """``(batch, rows, columns)`` when the permutation, its unmoved leading axes and its
    adjacent runs merged, swaps two blocks of axes (a batch of 2-D transposes); else None."""
    lead = 0
    while lead < len(order) and order[lead] == lead:
        lead += 1
    rest = order[lead:]
    if not rest:
        return None
    # The moved part must be [k, ..., n-1, lead, ..., k-1]: two runs exchanged.
    split = rest[0]
    expected = (*range(split, len(order)), *range(lead, split))
    if rest != expected:
        return None
    batch = int(np.prod(shape[:lead], dtype=np.int64))
    rows = int(np.prod(shape[lead:split], dtype=np.int64))
    columns = int(np.prod(shape[split:], dtype=np.int64))
    return batch, rows, columns


def _plan(arrays: Arrays, attributes: Attributes) -> Plan:
    arg = arrays["arg"]
    order = transpose_order(arg.ndim, arrays["input_order"])
    shape = tuple(arg.shape[axis] for axis in order)
    return Plan(shape, lambda out: _transposed(arg, order, out))


_SMALL = [[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]],
          [[13, 14, 15, 16], [17, 18, 19, 20], [21, 22, 23, 24]]]  # fmt: skip

OP = Op(
    name="transpose",
    spec="Transpose-1",
    summary="Transpose-1: reorder the dimensions of a tensor",
    description="Transpose-1 over `arg`: the output's dimension k is arg's dimension "
    "`input_order[k]`; an empty `input_order` reverses the dimensions. The output has the type "
    "of `arg`.",
    request_doc="Transpose-1: `arg` with its dimensions reordered by `input_order`.",
    inputs=(
        data_input("transpose", "arg"),
        Input(
            "input_order",
            "The permutation of arg's axes (input 2, type T_AXIS); empty: the axes inverted.",
            "T_AXIS: any integer type, a 1D tensor of n elements, n the rank of arg, holding "
            "every integer in [0, n - 1]; or of 0 elements. JSON form is int64.",
            INTEGER_TYPES,
            rank="1",
            limit="rank",
        ),
    ),
    plan=_plan,
    output_type_from="arg",
    examples={
        "example_1": example(
            "Transpose-1 Example 1: a (2, 3, 4) tensor, input_order [2, 0, 1] gives (4, 2, 3)",
            {"arg": _SMALL, "input_order": [2, 0, 1]},
            np.transpose(np.array(_SMALL), (2, 0, 1)).tolist(),
        ),
        "example_2": example(
            "Transpose-1 Example 2: an empty input_order inverts the axes: (4, 3, 2)",
            {"arg": _SMALL, "input_order": []},
            np.transpose(np.array(_SMALL)).tolist(),
        ),
    },
    decisions=(
        "Transpose-1, negative values in input_order: refused; the spec asks for every integer "
        "in [0, n - 1].",
        "Transpose-1, rank-0 arg: input_order must be empty (n = 0), and the output is arg.",
        "Transpose-1, input_order as a scalar: refused; the spec asks for a 1D tensor.",
    ),
    disagreements=narrowed_by_the_cpu_plugin("Transpose-1"),
)
