"""Views of any element type as unsigned integers of the same width, and the block copy of such
views, for bit-exact moves."""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.ops import loops

_UNSIGNED_OF_WIDTH: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
    8: np.dtype(np.uint64),
}


#: The output size from which the compiled copies that write an output front to back write it
#: by non-temporal stores (past the caches, no line read before it is written:
#: ``compiled._stream_row``): far past the L2, where an output would not stay in the cache for
#: its reader anyway.
STREAM_BYTES = 8 << 20
#: The shortest row (bytes) the strided copy writes by non-temporal stores. Measured on a 64 MiB
#: Reverse along the inner axis (thread time, against ``np.copyto`` of 64 MiB, 12.7 ms): rows
#: of 4 KiB 9.8 ms (int8) and 10.5 ms (float32) with them, 16.3 and 15.3 ms without; 2 KiB
#: 12.4 and 9.7 against 16.1 and 15.3 ms; 1 KiB 14.1 and 10.5 against 17.0 and 14.6 ms. Tile's
#: runs of 512 bytes (int8, ``streams_runs``): 9.3 against NumPy's 9.6 ms, 11.7 ms by the
#: strided copy's regular stores.
STREAM_ROW_BYTES = 1 << 10
#: The shortest interleaved row (bytes) the strided copy writes by non-temporal stores (put
#: together in a buffer in the L1 cache first). Measured on 64 MiB DepthToSpace outputs, against
#: ``np.copyto``: rows of 2 to 64 KiB 0.74-0.81x with them, 1.16-1.22x without; 1 KiB 1.02-1.04x
#: against 1.32-1.37x; 512 bytes 1.23-1.40x against 1.18-1.20x.
STREAM_INTERLEAVED_BYTES = 2 << 10


def streams_runs(parts: Sequence[int], whole: Sequence[int], out: npt.NDArray[Any]) -> bool:
    """Whether an output made of copies of the data (Tile's, Broadcast's) is made by the
    strided copy (``copy_view``), which writes it by non-temporal stores: a large C-ordered
    output (``STREAM_BYTES``) whose runs (the trailing axes where the data's part is the
    output's ``whole`` length) are long (``STREAM_ROW_BYTES``). Each run is then written without
    its lines read first, the source run staying in the cache. Measured on 64 MiB outputs
    against NumPy's copy: Broadcast's row to a square 0.7x; Tile [2, 2] int8 runs of 4 KiB 6.4
    against 8.9 ms, 1 KiB 7.4 against 9.8 ms, 512 bytes 9.3 against 9.6 ms; rows of 1,000 bytes
    by the strided copy's regular stores 1.1x NumPy's, 100 bytes 1.2x, one element repeated no
    quicker (those stay NumPy's)."""
    if out.nbytes < STREAM_BYTES or not out.flags.c_contiguous:
        return False
    run = 1
    for part, length in zip(reversed(parts), reversed(whole), strict=True):
        if part != length:
            break
        run *= length
    return run > 1 and run * out.itemsize >= STREAM_ROW_BYTES


def as_raw(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Return ``array`` viewed as unsigned integers of its item size (no copy).

    Roll and Gather only move elements, so they work on the bits: floats keep their NaN payloads
    and signed zeros, and every element type (bfloat16 included) takes the same path.
    """
    raw_dtype = _UNSIGNED_OF_WIDTH.get(array.dtype.itemsize)
    if raw_dtype is None:
        return array
    # A view to a type of the same width is allowed on any strides and keeps the bytes as stored.
    return array.view(raw_dtype)


def is_integer_type(dtype: np.dtype[Any]) -> bool:
    """True for the spec's "any supported integer type": signed or unsigned, not bool."""
    return dtype.kind in "iu"


def into_c_ordered(
    out: npt.NDArray[Any] | None,
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    fill: Callable[[npt.NDArray[Any]], object],
) -> npt.NDArray[Any]:
    """An op's output, written by ``fill``, which writes into a C-ordered array only: ``out``
    (made when None) itself when it is one, else a fresh array then copied into ``out`` (bit for
    bit when both are of one type). An empty output is left as it is."""
    if out is None:
        out = np.empty(shape, dtype)
    if out.size == 0:
        return out
    if out.flags.c_contiguous:
        fill(out)
        return out
    target = np.empty(shape, dtype)
    fill(target)
    if out.dtype == target.dtype:
        np.copyto(as_raw(out), as_raw(target))
    else:
        np.copyto(out, target)
    return out


def _geometry(view: npt.NDArray[Any], base: npt.NDArray[Any]) -> tuple[int, list[int]]:
    """Where ``view`` starts in the flat ``base`` and its strides, in elements (signed); a view
    reaching outside ``base`` (not a view of it) is refused, as the compiled copy does not check
    its bounds."""
    item = base.itemsize
    start = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    strides = [stride // item for stride in view.strides]
    reach = [(length - 1) * stride for length, stride in zip(view.shape, strides, strict=True)]
    low = start // item + sum(step for step in reach if step < 0)
    high = start // item + sum(step for step in reach if step > 0)
    if view.dtype != base.dtype or start % item or low < 0 or high >= base.size:
        raise ValueError("copy_block: a block is not a view of its flat array")
    return start // item, strides


def copy_block(
    out: npt.NDArray[Any],
    out_block: npt.NDArray[Any],
    source: npt.NDArray[Any],
    source_block: npt.NDArray[Any],
) -> None:
    """``out_block[...] = source_block`` by the compiled strided copy: ``out`` and ``source``
    are flat C-ordered raw arrays, the blocks views of the same shape into them (sliced,
    reversed with negative steps, or broadcast with zero strides). Dimensions that walk on from
    one another in both are merged first, so a block reversed along every axis is one reversed
    row: NumPy's own copy of a negative-stride view goes element by element (2-6x a plain copy
    for bytes), this one at about a copy's speed."""
    if out_block.size == 0:
        return
    compiled = loops.ready_module()
    if compiled is None:  # while the loops compile: NumPy's copy of the same views
        np.copyto(out_block, source_block, casting="equiv")
        return
    out_start, out_strides = _geometry(out_block, out)
    source_start, source_strides = _geometry(source_block, source)
    lengths = list(out_block.shape)
    # Dimensions of length 1 move nothing (a block of one element is a row of one); the rest
    # merge from the inside out.
    merged = [
        [length, source_strides[d], out_strides[d]]
        for d, length in enumerate(lengths)
        if length != 1
    ] or [[1, 1, 1]]
    while len(merged) > 1:
        outer, inner = merged[-2], merged[-1]
        if outer[1] != inner[1] * inner[0] or outer[2] != inner[2] * inner[0]:
            break
        merged[-2:] = [[outer[0] * inner[0], inner[1], inner[2]]]
    run, step, into = merged[-1]
    rows = merged[:-1]
    if into != 1:
        # Rows of one element (a block one element wide), each placed by the table.
        rows, run, step = merged, 1, 1
    # Non-temporal stores only for a block that is the whole output (Reverse's), written front
    # to back: blocks written one after another (Pad's) come back to each line of the output
    # several times, in runs of a few KiB, which such stores make slower.
    whole = out_block.size == out.size
    stream = int(whole and out.nbytes >= STREAM_BYTES and run * out.itemsize >= STREAM_ROW_BYTES)
    if step == 1 and _copy_words(compiled, out, source, rows, out_start, source_start, run, stream):
        return
    table = _table(rows)
    compiled.strided_copy(source, out, table, source_start, out_start, run, step, 1, 0, stream)


#: The smallest copy ``copy_view`` gives the compiled loop (64 KiB).
COPY_VIEW_FROM = 1 << 16


def copy_view(
    out: npt.NDArray[Any],
    out_view: npt.NDArray[Any],
    source: npt.NDArray[Any],
    source_view: npt.NDArray[Any],
) -> None:
    """``out_view[...] = source_view`` for views of the raw arrays ``out`` and ``source`` (a
    slice's, sliced with any steps, reversed too; ``source_view`` may differ from
    ``out_view``'s shape by axes of one element, a strided slice's new and shrunk axes): the
    compiled strided copy (``copy_block``) when both arrays are C-ordered, NumPy's otherwise.
    NumPy's own copy of a view read a step apart goes element by element (a byte slice of
    every other column: 2-3x the copy of its bytes); below ``COPY_VIEW_FROM`` bytes NumPy's
    copy is the quicker (the compiled copy's set-up costs some microseconds). Written a step
    apart (SliceScatter's), the compiled copy measured no quicker than NumPy's."""
    small = out_view.nbytes < COPY_VIEW_FROM or not isinstance(source_view, np.ndarray)
    if small or not (out.flags.c_contiguous and source.flags.c_contiguous):
        np.copyto(out_view, source_view, casting="equiv")
        return
    if source_view.shape != out_view.shape:
        reshaped = source_view.view()
        try:
            reshaped.shape = out_view.shape  # a view, never a copy: refused if it would be one
        except AttributeError:  # not by axes of one element alone: NumPy's broadcasting copy
            np.copyto(out_view, source_view, casting="equiv")
            return
        source_view = reshaped
    copy_block(out.reshape(-1), out_view, source.reshape(-1), source_view)


#: The elements the strided copy moves a run as, widest first: 16 bytes (a complex128's two
#: words, only ever loaded and stored, never computed with: the bits move as they are), then 8,
#: 4 and 2 bytes.
_UNITS = (
    np.dtype(np.complex128),
    np.dtype(np.uint64),
    np.dtype(np.uint32),
    np.dtype(np.uint16),
)


def _as_units(
    out: npt.NDArray[Any],
    source: npt.NDArray[Any],
    dims: list[list[int]],
    out_start: int,
    source_start: int,
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], list[list[int]], int, int] | None:
    """The copy in the widest units wider than its elements (16 bytes down to 2), when its
    innermost axis is a forward run of both arrays of whole units and every stride and start
    falls on one: each unit is then one element, and a run of 16 bytes (BatchToSpace's and
    SpaceToBatch's int8 channel runs) stops being a row of its own (the rows become the axes
    around it, which the row shapes above serve); a run of 8 or 4 bytes (int8 runs of 8 or 4
    channels) is one element of 8 or 4 bytes (16 MiB SpaceToBatch int8, 4 channels: 9.6 -> 1.0x
    the floor). None: it does not fall so."""
    length, source_step, out_step = dims[-1]
    if source_step != 1 or out_step != 1:
        return None
    for unit in _UNITS:
        if unit.itemsize <= out.itemsize:
            return None
        per = unit.itemsize // out.itemsize
        if length % per or out_start % per or source_start % per:
            continue
        if any(dim[1] % per or dim[2] % per for dim in dims[:-1]):
            continue
        units = [[dim[0], dim[1] // per, dim[2] // per] for dim in dims[:-1]]
        if length > per:
            units.append([length // per, 1, 1])
        units = units or [[1, 1, 1]]
        wide = _whole(out, unit), _whole(source, unit)
        return *wide, units, out_start // per, source_start // per
    return None


def _whole(array: npt.NDArray[Any], wide: np.dtype[Any]) -> npt.NDArray[Any]:
    """The flat ``array`` seen as elements of ``wide``, its tail short of one left out: a copy
    whose every row starts and ends on a whole one never reaches it."""
    per = wide.itemsize // array.itemsize
    return array[: array.size - array.size % per].view(wide)


def _table(rows: list[list[int]], per: int = 1) -> npt.NDArray[np.int64]:
    """The strided copy's table of ``rows`` ([length, source stride, out stride] each): their
    lengths, then their strides in each array, in units of ``per`` elements."""
    return np.array(
        [r[0] for r in rows] + [r[1] // per for r in rows] + [r[2] // per for r in rows],
        dtype=np.int64,
    )


def strided_view(
    base: npt.NDArray[Any], shape: tuple[int, ...], steps: tuple[int, ...], writeable: bool
) -> npt.NDArray[Any]:
    """A view of ``base`` of ``shape`` with ``steps`` (bytes) as its strides. A step along an
    axis of one element or none is never taken and is made 0: a stride of 2**62 (an attribute
    past the data, where one patch or block fits) would overflow the view's int64 strides."""
    strides = tuple(step if extent > 1 else 0 for extent, step in zip(shape, steps, strict=True))
    return np.lib.stride_tricks.as_strided(base, shape, strides, writeable=writeable)


def _copy_words(
    compiled: Any,
    out: npt.NDArray[Any],
    source: npt.NDArray[Any],
    rows: list[list[int]],
    out_start: int,
    source_start: int,
    run: int,
    stream: int,
) -> bool:
    """Forward rows of elements narrower than 8 bytes copied as 8-byte words, when every row
    and every start falls on whole words of both arrays; whether they were. A row of 16 bytes
    (BatchToSpace's and SpaceToBatch's channel runs in int8) is then two moves, not sixteen
    (a loop the compiler vectorises leaves rows this short to its element-by-element tail).
    ``stream``: the strided copy's (non-temporal stores)."""
    per = 8 // out.itemsize if out.itemsize < 8 else 0
    if not per or run % per or out_start % per or source_start % per:
        return False
    if any(row[1] % per or row[2] % per for row in rows):
        return False
    table = _table(rows, per)
    compiled.strided_copy(
        _whole(source, np.dtype(np.uint64)),
        _whole(out, np.dtype(np.uint64)),
        table,
        source_start // per,
        out_start // per,
        run // per,
        1,
        1,
        0,
        stream,
    )
    return True


def copy_gathered(out: npt.NDArray[Any], source: npt.NDArray[Any], view: npt.NDArray[Any]) -> None:
    """``out[...] = view`` for a C-ordered raw ``out`` of ``view``'s shape, ``view`` a strided
    view into the flat C-ordered raw array ``source`` (``copy_permuted``'s case of a whole
    output)."""
    copy_permuted(out.reshape(-1), out, source, view)


#: The longest step a row may take on either side, and the shortest row worth a call of the
#: loop's inner copy: a row of 2 elements (a depth-to-space block's) is read along another axis.
_SHORT_STEP = 4
_SHORT_ROW = 16


def copy_permuted(
    out: npt.NDArray[Any],
    out_view: npt.NDArray[Any],
    source: npt.NDArray[Any],
    source_view: npt.NDArray[Any],
) -> None:
    """``out_view[...] = source_view``, views of one shape into the flat C-ordered raw arrays
    ``out`` and ``source`` (positive strides, no element of ``out_view`` twice), by the compiled
    strided copy: one axis is the rows (the one ``out`` is written along when it reads a short
    step of ``source``, else the one ``source`` is read along forward), the others taken in the
    order they walk the side the rows do not (the largest strides outermost). An image's patches
    then read each source line while it is in the cache, however far apart they land; a
    depth-to-space block's lines are written whole while in the cache, however far apart they
    come from; BatchToSpace's channel runs, short forward runs that other runs follow in
    ``out``, are written a whole output line at a time from the lines they come from
    (``_interleaved_blocks``). NumPy's copy walks the output's order and goes back to memory
    for either."""
    if out_view.size == 0:
        return
    compiled = loops.ready_module()
    if compiled is None:  # while the loops compile: NumPy's copy of the same views
        np.copyto(out_view, source_view, casting="equiv")
        return
    out_start, out_strides = _geometry(out_view, out)
    source_start, source_strides = _geometry(source_view, source)
    dims = sorted(
        (
            [length, source_strides[d], out_strides[d]]
            for d, length in enumerate(out_view.shape)
            if length != 1
        ),
        key=lambda dim: -dim[2],
    ) or [[1, 1, 1]]
    while len(dims) > 1:
        outer, inner = dims[-2], dims[-1]
        if outer[1] != inner[1] * inner[0] or outer[2] != inner[2] * inner[0]:
            break
        dims[-2:] = [[outer[0] * inner[0], inner[1], inner[2]]]
    # The whole of a large output written by interleaved rows: by non-temporal stores, when the
    # rows are long enough (``STREAM_INTERLEAVED_BYTES``).
    whole = out_view.size == out.size and out.nbytes >= STREAM_BYTES
    wide = _as_units(out, source, dims, out_start, source_start)
    if wide is not None:
        out, source, dims, out_start, source_start = wide
    if _copy_blocks(compiled, out, source, dims, out_start, source_start, whole):
        return
    written = dims[-1]  # out's smallest stride
    read = [dim for dim in dims if dim[1] == 1 and 1 < dim[2] <= _SHORT_STEP]
    if (written[0] >= _SHORT_ROW and abs(written[1]) <= _SHORT_STEP) or not read:
        row, side = written, 1
    else:
        row, side = max(read, key=lambda dim: dim[0]), 2
    rows = [dim for dim in dims if dim is not row]
    # A row written a step apart whose gaps one other axis fills (out stride 1, as long as the
    # step, read forward rows apart): the rows of that axis go interleaved, each store to the
    # next element, instead of elements stored a step apart one at a time.
    lanes = [dim for dim in rows if dim[2] == 1 and dim[0] == row[2] and dim[1] > 0]
    lane_step = 0
    if side == 2 and row[1] == 1 and lanes:
        rows.remove(lanes[0])
        lane_step = lanes[0][1]
    # A row written forward and read a short step apart whose gaps one other axis fills (source
    # stride 1, as long as the step): that axis's rows are read with it, the line once.
    gaps = [dim for dim in rows if dim[1] == 1 and dim[0] == row[1] and dim[2] > 0]
    if side == 1 and row[2] == 1 and row[1] in (2, 3, 4) and gaps:  # the loop's three shapes
        rows.remove(gaps[0])
        lane_step = -gaps[0][2]
    rows.sort(key=lambda dim: -abs(dim[side]))
    forward = row[1] == 1 and row[2] == 1 and not lane_step
    if forward and _copy_words(compiled, out, source, rows, out_start, source_start, row[0], 0):
        return
    table = _table(rows)
    stream = lane_step > 0 and whole and row[0] * row[2] * out.itemsize >= STREAM_INTERLEAVED_BYTES
    compiled.strided_copy(
        source, out, table, source_start, out_start, row[0], row[1], row[2], lane_step, int(stream)
    )


def _copy_blocks(
    compiled: Any,
    out: npt.NDArray[Any],
    source: npt.NDArray[Any],
    dims: list[list[int]],
    out_start: int,
    source_start: int,
    whole: bool,
) -> bool:
    """``copy_permuted``'s copy of short runs as blocks, when they are: interleaved into the
    output's lines (``_interleaved_blocks``; by non-temporal stores when ``whole``, the whole of
    a large output, and the rows are ``STREAM_INTERLEAVED_BYTES`` or longer), or read in a line
    and spread to their rows (``_gathered_blocks``); whether they were."""
    block = dims[-1][0]
    interleaved = _interleaved_blocks(dims)
    if interleaved is not None:
        row, lane = interleaved
        rows = sorted((dim for dim in dims[:-1] if dim is not row and dim is not lane),
                      key=lambda dim: -dim[2])  # fmt: skip
        stream = whole and row[0] * row[2] * out.itemsize >= STREAM_INTERLEAVED_BYTES
        compiled.strided_copy(source, out, _table(rows), source_start, out_start, row[0], block,
                              lane[0] * block, lane[1], int(stream))  # fmt: skip
        return True
    gathered = _gathered_blocks(dims)
    if gathered is not None:
        row, lane = gathered
        rows = sorted((dim for dim in dims[:-1] if dim is not row and dim is not lane),
                      key=lambda dim: -abs(dim[1]))  # fmt: skip
        compiled.strided_copy(source, out, _table(rows), source_start, out_start, row[0], lane[0],
                              block, -lane[2], 0)  # fmt: skip
        return True
    return False


def _interleaved_blocks(dims: list[list[int]]) -> tuple[list[int], list[int]] | None:
    """The row and the lanes of a copy whose innermost axis is a short forward run (a block,
    shorter than ``_SHORT_ROW``) that other blocks, read from elsewhere, follow in ``out``: an
    axis written one block apart (the lanes: ``lanes`` blocks side by side in ``out``, read
    forward from ``source``, any distance apart) and one written ``lanes`` blocks apart and
    read one block apart (the row). BatchToSpace's channel runs are such blocks, the block
    column the lanes and the data's column the row: the strided copy then writes each output
    line front to back from the lanes' source lines, not a block at a time with the loop's
    step over every other axis between blocks (64 MiB float32: 2.0 -> 1.0x the byte floor).
    None: not such a copy. ``dims`` as ``copy_permuted`` merged them (out's strides
    decreasing)."""
    return _blocks_side_by_side(dims, 2)


def _gathered_blocks(dims: list[list[int]]) -> tuple[list[int], list[int]] | None:
    """``_interleaved_blocks`` the other way round: the row and the lanes of a copy whose
    innermost axis is a short forward run (a block) that other blocks follow in ``source``,
    bound for elsewhere in ``out``: an axis read one block apart (the lanes: ``lanes`` blocks
    side by side in ``source``, each written to its own place) and one read ``lanes`` blocks
    apart and written one block apart (the row). SpaceToBatch's channel runs are such blocks,
    the block column the lanes: each source line is then read once, front to back. None: not
    such a copy."""
    return _blocks_side_by_side(dims, 1)


def _blocks_side_by_side(dims: list[list[int]], side: int) -> tuple[list[int], list[int]] | None:
    """``_interleaved_blocks`` (``side`` 2: the blocks side by side in out, a dim's step there
    its third number) or ``_gathered_blocks`` (1: side by side in source, its second): the lanes
    one block apart on that side and read or written forward on the other, the row ``lanes``
    blocks apart on that side and one block apart on the other."""
    other = 3 - side
    block, source_step, out_step = dims[-1]
    if source_step != 1 or out_step != 1 or not 1 < block < _SHORT_ROW:
        return None
    for lane in dims[:-1]:
        if lane[side] != block or lane[other] <= 0:
            continue
        apart = lane[0] * block
        rows = [
            dim
            for dim in dims[:-1]
            if dim is not lane and dim[other] == block and dim[side] == apart
        ]
        if rows:
            return max(rows, key=lambda dim: dim[0]), lane
    return None


def without_still_axes(
    data: npt.NDArray[Any], out: npt.NDArray[Any], blocks: list[int], begins: list[int]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], list[int], list[int]]:
    """BatchToSpace's and SpaceToBatch's problem without the axes that move nothing: those after
    the first where data and out both have one element and the block is 1 (their crop or pad is
    then 0). ``blocks`` and ``begins`` are per axis after the first.

    Both ops view the data through about twice its dimensions; without these axes, data of more
    than 32 dimensions (TENSOR_OPS_MAX_RANK allows 64) stays within NumPy's 64. Views of
    ``data`` and ``out`` (an axis of one element is indexed away, whatever the strides)."""
    still = [
        axis
        for axis in range(1, data.ndim)
        if data.shape[axis] == 1 and out.shape[axis] == 1 and blocks[axis - 1] == 1
    ]
    if not still:
        return data, out, blocks, begins
    index = tuple(0 if axis in still else slice(None) for axis in range(data.ndim))
    kept = [axis - 1 for axis in range(1, data.ndim) if axis not in still]
    return data[index], out[index], [blocks[i] for i in kept], [begins[i] for i in kept]
