"""The compiled loops' NumPy stand-ins: the same arguments, the same bits, while numba compiles.

``app/ops/compiled.py`` runs these until its loops are ready (a first start compiles them for
seconds): each takes exactly the arguments of its compiled twin and writes the same bits into
``out``. They are vectorised NumPy, but not free: ``take`` and ``take_slices`` hold the
positions as int64, a mask and the gathered block beside ``out`` (a few times the output), and
``roll_rows`` makes two copies per combination of rolled dimensions. So the switch gives them
small calls only (``cheap``); a larger one waits for the compiled loop, and the memory the
admission model counts stays true.
"""

import itertools
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

from tensor_ops_wire.dtypes import BFLOAT16

Array = npt.NDArray[Any]

#: The largest output (bytes) a stand-in writes: the gathered block and positions it holds beside
#: it stay within a few MiB.
CHEAP_OUTPUT_BYTES = 1 << 20
#: The most rolled dimensions before the rows a roll stand-in takes: 2**n block copies.
CHEAP_ROLLED_DIMENSIONS = 6
#: The most updates ScatterElementsUpdate's stand-ins take: they sort the updates' positions
#: (and hold a few arrays of their size), where the compiled loops walk them once.
CHEAP_SCATTER_UPDATES = 1 << 16
#: The most steps GatherTree's stand-in walks (a few NumPy calls a step, twice): a million
#: steps of one beam were a minute or two of a worker's time while numba compiled.
CHEAP_STEPS = 1024
#: The most kernel elements Col2Im's stand-ins go through (a few NumPy calls each): a 512 x 512
#: kernel held a worker 8 s, and a kernel may have as many elements as the data has rows.
CHEAP_KERNEL_ELEMENTS = 1024


def _positions(indices: Array, batches: int, count: int, wrap: int, length: int) -> Array:
    """The indices as positions (int64), ``wrap`` added to the negative ones as the loop does;
    those outside ``[0, length)`` set to -1."""
    positions = indices[: batches * count].astype(np.int64).reshape(batches, count)
    positions += (positions >> 63) & wrap
    positions[(positions < 0) | (positions >= length)] = -1
    return positions


def take(
    source: Array,
    indices: Array,
    out: Array,
    batches: int,
    outer: int,
    length: int,
    count: int,
    wrap: int,
    line: int,
) -> int:
    """``compiled.take``: single elements (``line``, the prefetch distance, has no use here);
    1 when a position was outside ``[0, length)``."""
    return int(_gather(source, indices, out, batches, outer, length, count, 1, wrap))


def take_slices(
    source: Array,
    indices: Array,
    out: Array,
    batches: int,
    outer: int,
    length: int,
    count: int,
    inner: int,
    wrap: int,
) -> None:
    """``compiled.take_slices``: ``source`` is (batches, outer, length, inner), ``out``
    (batches, outer, count, inner); a position out of range gives a slice of zeros."""
    _gather(source, indices, out, batches, outer, length, count, inner, wrap)


def _gather(
    source: Array,
    indices: Array,
    out: Array,
    batches: int,
    outer: int,
    length: int,
    count: int,
    inner: int,
    wrap: int,
) -> bool:
    """The gather of both ``take`` and ``take_slices``; whether a position was outside
    ``[0, length)``."""
    target = out[: batches * outer * count * inner].reshape(batches, outer, count, inner)
    if target.size == 0:
        return False
    if length == 0:
        target.fill(0)
        return True
    rows = source[: batches * outer * length * inner].reshape(batches, outer, length, inner)
    positions = _positions(indices, batches, count, wrap, length)
    outside = positions < 0
    chosen = np.where(outside, 0, positions).reshape(batches, 1, count, 1)
    np.copyto(target, np.take_along_axis(rows, chosen, axis=2))
    np.copyto(target, 0, where=outside.reshape(batches, 1, count, 1))
    return bool(outside.any())


def roll_rows(source: Array, out: Array, table: Array, row: int, split: int) -> None:
    """``compiled.roll_rows``: rows of ``row`` units, each rolled by ``split``; the dimensions
    before the rows (lengths, shifts and strides in ``table``, C order) rolled by their shifts,
    as block copies: two a rolled dimension, combined, and two within each row."""
    dims = table.size // 3
    lengths = [int(length) for length in table[:dims]]
    shifts = [int(shift) for shift in table[dims : 2 * dims]]
    shape = (*lengths, row)
    rows = 1
    for length in lengths:
        rows *= length
    whole = source[: rows * row].reshape(shape)
    target = out[: rows * row].reshape(shape)
    # Per dimension, the (output, source) slice pairs: one for an unrolled one, two for a
    # rolled one (the output's first ``shift`` come from the source's last ``shift``).
    pieces: list[list[tuple[slice, slice]]] = []
    for length, shift in zip(lengths, shifts, strict=True):
        if shift == 0:
            pieces.append([(slice(None), slice(None))])
        else:
            pieces.append(
                [
                    (slice(shift, None), slice(0, length - shift)),
                    (slice(0, shift), slice(length - shift, None)),
                ]
            )
    head = row - split
    for combination in itertools.product(*pieces):
        into = tuple(pair[0] for pair in combination)
        taken = tuple(pair[1] for pair in combination)
        np.copyto(target[(*into, slice(split, None))], whole[(*taken, slice(0, head))])
        np.copyto(target[(*into, slice(0, split))], whole[(*taken, slice(head, None))])


def gather_tree_is_cheap(out: Array, max_time: int) -> bool:
    """Whether ``gather_tree``'s stand-in is cheap enough for a call while numba compiles: at
    most CHEAP_OUTPUT_BYTES of ids and CHEAP_STEPS steps."""
    return out.nbytes <= CHEAP_OUTPUT_BYTES and max_time <= CHEAP_STEPS


def roll_is_cheap(table: Array) -> bool:
    """Whether ``roll_rows`` over ``table`` makes few enough block copies for a stand-in."""
    dims = table.size // 3
    return int(np.count_nonzero(table[dims : 2 * dims])) <= CHEAP_ROLLED_DIMENSIONS


def parent_values(raw: Array, kind: int, fraction: int, bias: int, most: int) -> Array:
    """``compiled.gather_tree``'s reading of parent ids (int64, clipped into [0, most]): the raw
    bits as ``kind`` says, 0 unsigned, 1 signed, 2 a float of ``fraction`` mantissa bits and
    exponent ``bias`` (whose values the checks have let through are integers)."""
    bits = raw.astype(np.uint64)
    width = 8 * raw.itemsize
    if kind == 0:
        values = bits.view(np.int64)
    elif kind == 1:
        values = raw.view(f"i{raw.itemsize}").astype(np.int64)
    else:
        magnitude = bits & np.uint64((1 << (width - 1)) - 1)
        exponent = (magnitude >> np.uint64(fraction)).astype(np.int64) - bias
        whole = (magnitude & np.uint64((1 << fraction) - 1)) | np.uint64(1 << fraction)
        shift = np.clip(fraction - exponent, 0, 63).astype(np.uint64)
        # Past 2**(fraction + 1) the mantissa moves up (bfloat16's 258, float16's 4096); a
        # value past any beam is clipped below.
        up = np.clip(exponent - fraction, 0, 62 - fraction).astype(np.uint64)
        values = ((whole >> shift) << up).astype(np.int64)
        values[(magnitude == 0) | (exponent < 0)] = 0
        values[exponent > 62] = most
    return np.clip(values, 0, most)


def gather_tree(
    steps: Array,
    parents: Array,
    out: Array,
    lengths: Array,
    state: Array,
    ends: Array,
    max_time: int,
    batch_size: int,
    beam_width: int,
    block: int,
    kind: int,
    fraction: int,
    bias: int,
    stream: int,
    seen: Array,
) -> int:
    """``compiled.gather_tree``: the same walk a step at a time over every batch at once
    (``state``, ``block`` and ``stream`` unused: it holds the beams as arrays of its own), and
    the same answer of what the ids are (``seen`` not empty): 1, a float id that is no integer;
    else 0, ``seen[0]`` the largest bits of the parent ids past the first step."""
    shape = (max_time, batch_size, beam_width)
    ids = steps.reshape(shape)
    parent_ids = parents.reshape(shape)
    target = out.reshape(shape)
    index = np.broadcast_to(np.arange(beam_width), (batch_size, beam_width)).copy()
    decoded = lengths.reshape(batch_size, 1)
    end, alt = ends[0], ends[1]
    for t in range(max_time - 1, -1, -1):
        here = decoded > t
        np.copyto(target[t], np.where(here, np.take_along_axis(ids[t], index, axis=1), end))
        if t > 0:
            followed = np.take_along_axis(parent_ids[t], index, axis=1)
            values = parent_values(followed, kind, fraction, bias, beam_width - 1)
            index = np.where(here, values, index)
    finished = np.zeros((batch_size, beam_width), np.bool_)
    for t in range(max_time):
        np.copyto(target[t], end, where=finished)
        finished |= (target[t] == end) | (target[t] == alt)
    if not seen.size:
        return 0
    seen[:] = 0
    row = batch_size * beam_width
    if kind < 2:
        seen[0] = parents[row:].max(initial=0)
        return 0
    if first_fraction(steps, fraction, bias, steps.size, seen) >= 0:
        return 1
    return int(first_fraction(parents, fraction, bias, row, seen) >= 0)


#: Float values checked at a time by ``first_fraction`` (its temporaries stay this small).
_FRACTION_CHUNK = 1 << 16


def first_fraction(raw: Array, fraction: int, bias: int, skip: int, largest: Array) -> int:
    """``compiled.first_fraction``: the position of the first value of ``raw`` (a float's bits:
    ``fraction`` mantissa bits, exponent ``bias``) that is not an integer, or -1; when -1,
    ``largest[0]`` set to the largest bits of ``raw[skip:]`` (0 if none)."""
    kinds = {(10, 15): np.float16, (23, 127): np.float32, (52, 1023): np.float64}
    for start in range(0, raw.size, _FRACTION_CHUNK):
        chunk = raw[start : start + _FRACTION_CHUNK]
        if (fraction, bias) == (7, 127):  # bfloat16: the high half of a float32
            values = (chunk.astype(np.uint32) << np.uint32(16)).view(np.float32)
        else:
            values = chunk.view(kinds[(fraction, bias)])
        with np.errstate(invalid="ignore"):  # inf - inf: the NaN that marks it
            bad = np.flatnonzero((values - np.trunc(values)) != 0)
        if bad.size:
            return start + int(bad[0])
    largest[0] = raw[skip:].max(initial=0)
    return -1


def col2im_reach_is_cheap(size: int) -> bool:
    """Whether ``col2im_reach``'s stand-in goes through few enough kernel elements."""
    return size <= CHEAP_KERNEL_ELEMENTS


def col2im_is_cheap(axes: Array) -> bool:
    """Whether ``col2im``'s stand-in goes through few enough kernel elements (``axes``: as
    ``col2im`` takes them)."""
    return int(axes[0]) * int(axes[6]) <= CHEAP_KERNEL_ELEMENTS


def _block_span(start: int, stride: int, blocks: int, length: int) -> tuple[int, int]:
    """The blocks ``[first, stop)`` that put a kernel element lying at ``start`` in block 0
    (every ``stride`` on) within ``[0, length)``."""
    first = 0 if start >= 0 else (-start + stride - 1) // stride
    stop = min(blocks, (length - 1 - start) // stride + 1)
    return first, max(first, stop)


def col2im_reach(
    first: Array, size: int, stride: int, dilation: int, pad: int, blocks: int
) -> bool:
    """``compiled.col2im_reach``: a strided slice of ``first`` per kernel element, the pixels
    it reaches (``first`` holds ``size`` where none has yet); whether one is reached twice."""
    twice = False
    for offset in range(size):
        start = offset * dilation - pad
        p0, p1 = _block_span(start, stride, blocks, first.size)
        if p1 > p0:
            reached = first[start + p0 * stride : start + (p1 - 1) * stride + 1 : stride]
            twice = twice or bool((reached < size).any())
            np.minimum(reached, offset, out=reached)
    return twice


def _summed(raw: Array, kind: int) -> Array:
    """``raw`` (unsigned) as the type its values are added in (``kind``, as ``col2im`` takes
    it): integers as they are (an unsigned sum wraps to the signed one's bits)."""
    if kind == 1:
        return raw.view(np.bool_)
    if kind == 2:
        return raw.view(f"f{raw.itemsize}")
    if kind == 3:
        return raw.view(ml_dtypes.bfloat16)
    return raw


def col2im(
    source: Array,
    out: Array,
    row_first: Array,
    col_first: Array,
    axes: Array,
    planes: int,
    kind: int,
) -> None:
    """``compiled.col2im``: one strided copy (or sum) per kernel element, in the kernel's
    row-major order, its bits where it is the first to reach a pixel and added in the element
    type (``_summed``) where an earlier one did. Beside ``out`` it holds a byte per block of a
    kernel element (where it comes first) and per block row and column."""
    size0, stride0, dilation0, pad0, blocks0, height = (int(v) for v in axes[:6])
    size1, stride1, dilation1, pad1, blocks1, width = (int(v) for v in axes[6:])
    shape = (planes, size0, size1, blocks0, blocks1)
    raw_blocks = source[: planes * size0 * size1 * blocks0 * blocks1].reshape(shape)
    raw_out = out[: planes * height * width].reshape(planes, height, width)
    blocks, target = _summed(raw_blocks, kind), _summed(raw_out, kind)
    with np.errstate(all="ignore"):  # integers wrap, NaNs and infinities are values here
        for i in range(size0):
            y0 = i * dilation0 - pad0
            p0, p1 = _block_span(y0, stride0, blocks0, height)
            if p1 <= p0:
                continue
            ys = slice(y0 + p0 * stride0, y0 + (p1 - 1) * stride0 + 1, stride0)
            for j in range(size1):
                x0 = j * dilation1 - pad1
                q0, q1 = _block_span(x0, stride1, blocks1, width)
                if q1 <= q0:
                    continue
                xs = slice(x0 + q0 * stride1, x0 + (q1 - 1) * stride1 + 1, stride1)
                rows, cols = row_first[ys] == i, col_first[xs] == j
                taken = (slice(None), i, j, slice(p0, p1), slice(q0, q1))
                if rows.all() and cols.all():
                    np.copyto(raw_out[:, ys, xs], raw_blocks[taken])
                    continue
                into = target[:, ys, xs]
                np.add(into, blocks[taken], out=into)
                if rows.any() and cols.any():
                    # The pixels it reaches first take its bits over the sum (one mask held).
                    mask = rows[:, None] & cols[None, :]
                    np.copyto(raw_out[:, ys, xs], raw_blocks[taken], where=mask)


# ------------------------------------------------------------------------------------------------
# ScatterElementsUpdate's stand-ins: the updates' positions worked out whole, then ordered by a
# stable sort (the updates applied in their row-major order, whatever NumPy's fancy assignment
# does with repeats).

#: ``scatter_reduce``'s reductions by code (``compiled.scatter_reduce`` takes the same codes).
SCATTER_REDUCTIONS = ("none", "sum", "prod", "min", "max", "mean")
#: ``scatter_reduce``'s ``kind``: the element type's own values, or uint16 bits of float16 (1)
#: or bfloat16 (2).
SCATTER_KINDS = (None, np.dtype(np.float16), BFLOAT16)


def scatter_is_cheap(updates: Array) -> bool:
    """Whether ScatterElementsUpdate's stand-ins are cheap enough for a call while numba
    compiles: at most CHEAP_SCATTER_UPDATES updates."""
    return updates.size <= CHEAP_SCATTER_UPDATES


def scatter_positions(indices: Array, table: Array, axis: int, size: int) -> Array:
    """Each update's flat position in the output (int64), in the updates' row-major order: its
    own index, with the index along ``axis`` from ``indices`` (``size`` added to a negative
    one); ``table`` holds the updates' shape, then the output's strides (elements)."""
    rank = table.size // 2
    shape = tuple(int(length) for length in table[:rank])
    strides = [int(stride) for stride in table[rank:]]
    along = indices.reshape(shape).astype(np.int64)
    if along.size and int(along.min()) < 0:
        along = np.where(along < 0, along + size, along)
    positions = along * strides[axis] if strides[axis] != 1 else along.copy()
    for dim in range(rank):
        if dim == axis or shape[dim] == 1:
            continue
        span = np.arange(shape[dim], dtype=np.int64) * strides[dim]
        positions += span.reshape((-1,) + (1,) * (rank - dim - 1))
    return positions.reshape(-1)


def scatter_put(
    out: Array, indices: Array, updates: Array, table: Array, axis: int, size: int
) -> None:
    """``compiled.scatter_put``: ``out[positions[i]] = updates[i]`` in order, the last of
    repeated positions winning (chosen explicitly: NumPy does not promise an order for repeated
    fancy assignment), by a stable sort of the positions."""
    if updates.size == 0:
        return
    positions = scatter_positions(indices, table, axis, size)
    order = np.argsort(positions, kind="stable")
    ordered = positions[order]
    last = np.empty(ordered.size, dtype=bool)
    last[-1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=last[:-1])
    out[ordered[last]] = updates[order[last]]


def scatter_reduce(
    out: Array,
    indices: Array,
    updates: Array,
    table: Array,
    axis: int,
    size: int,
    reduction: int,
    use_init_val: int,
    kind: int,
    seen: Array,
    counts: Array,
) -> None:
    """``compiled.scatter_reduce`` (``seen`` and ``counts`` unused: the positions are sorted);
    float16 and bfloat16 (``kind`` 1 and 2) computed by NumPy's and ml_dtypes' own loops."""
    if updates.size == 0:
        return
    named = SCATTER_KINDS[kind] or np.dtype(out.dtype.type)
    # NumPy's ufunc.at picks its loop by the dtype instances it is given: with the output's
    # type NumPy's own and the updates' another instance of it (what ``newbyteorder("=")``
    # makes), a sum of two NaNs keeps the update's payload (a product, the element's), the rule
    # the compiled loop follows. Set here whatever instances the caller holds (big-endian
    # data's output is another instance), so one rule holds for every byte order.
    flat = out.view(named)
    values = updates.view(named.newbyteorder("="))
    positions = scatter_positions(indices, table, axis, size)
    name = SCATTER_REDUCTIONS[reduction]
    with np.errstate(all="ignore"):  # integers wrap, NaNs and infinities are values here
        if name in ("sum", "prod", "mean"):
            _accumulate(flat, positions, values, name, bool(use_init_val))
        else:
            _extreme(flat, positions, values, name == "max", bool(use_init_val))


def _is_float(dtype: np.dtype[Any]) -> bool:
    return dtype.kind == "f" or dtype == SCATTER_KINDS[2]


def _accumulate(
    flat: Array, positions: Array, values: Array, reduction: str, use_init_val: bool
) -> None:
    """sum, prod and mean: the updates folded in, in order, in the element type (``ufunc.at``
    applies them one after the other)."""
    function = np.multiply if reduction == "prod" else np.add
    reached, first, inverse = np.unique(positions, return_index=True, return_inverse=True)
    if use_init_val:
        function.at(flat, positions, values)
    else:
        # data's element takes no part: each position starts from its first update (an
        # identity such as 0 would turn a first -0.0 into +0.0), the others fold into it.
        flat[reached] = values[first]
        rest = np.ones(positions.size, dtype=bool)
        rest[first] = False
        function.at(flat, positions[rest], values[rest])
    if reduction != "mean":
        return
    # Counted by the updates' places among the reached positions (as many as the updates),
    # not over the whole output.
    counts = np.bincount(inverse.reshape(-1), minlength=reached.size)
    if use_init_val:
        counts += 1
    sums = flat[reached]
    if _is_float(flat.dtype):
        flat[reached] = (sums.astype(np.float64) / counts).astype(flat.dtype)
    else:
        wide = np.uint64 if flat.dtype.kind == "u" else np.int64
        flat[reached] = np.floor_divide(sums.astype(wide), counts.astype(wide)).astype(flat.dtype)


def _extreme(
    flat: Array, positions: Array, values: Array, greatest: bool, use_init_val: bool
) -> None:
    """min and max: ``x = std::min(u, x)`` (``x`` stays only when ``x < u``; max: ``u < x``)
    folded over each position's updates in order, without a loop over them.

    The fold ends on the last NaN when it is the last value; else it restarts after the last
    NaN (the value after a NaN replaces it), and ends on the extreme of what follows, the latest
    of equal ones (only +0.0 and -0.0 are equal with other bits).
    """
    order = np.argsort(positions, kind="stable")
    ordered = positions[order]
    chosen = values[order]
    starts_mask = np.empty(ordered.size, dtype=bool)
    starts_mask[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts_mask[1:])
    places = ordered[starts_mask]
    if use_init_val:
        # data's element is the first value of each position's sequence.
        group = np.cumsum(starts_mask) - 1
        counts = np.bincount(group)
        sequence = np.empty(ordered.size + places.size, dtype=flat.dtype)
        first = np.flatnonzero(starts_mask) + np.arange(places.size)
        keep = np.ones(sequence.size, dtype=bool)
        keep[first] = False
        sequence[first] = flat[places]
        sequence[keep] = chosen
        starts = first
        lengths = counts + 1
    else:
        sequence = chosen
        starts = np.flatnonzero(starts_mask)
        lengths = np.diff(np.append(starts, ordered.size))
    group = np.repeat(np.arange(places.size), lengths)
    index = np.arange(sequence.size, dtype=np.int64)
    ends = starts + lengths - 1
    if _is_float(flat.dtype):
        nan = np.isnan(sequence)
        last_nan = np.maximum.reduceat(np.where(nan, index, -1), starts)
    else:
        last_nan = np.full(places.size, -1, dtype=np.int64)
    tail = index > last_nan[group]
    if flat.dtype.kind == "b":
        neutral = np.array(not greatest)
    elif flat.dtype.kind in "iu":
        info = np.iinfo(flat.dtype)
        neutral = np.array(info.min if greatest else info.max, dtype=flat.dtype)
    else:
        neutral = np.array(-np.inf if greatest else np.inf).astype(flat.dtype)
    candidates = np.where(tail, sequence, neutral)
    best = (np.maximum if greatest else np.minimum).reduceat(candidates, starts)
    latest = np.maximum.reduceat(np.where(tail & (sequence == best[group]), index, -1), starts)
    # A position whose last value is a NaN ends on it.
    pick = np.where(last_nan == ends, last_nan, latest)
    flat[places] = sequence[pick]
