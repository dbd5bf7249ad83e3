"""The compiled loops (app/ops/compiled.py) against plain NumPy references written here.

Gather: every element type, every index type (signed and unsigned, 8 to 64 bits), indices at
the edges of the range and of their type (negative, out of range, 2**64 - 1), every legal
(axis, batch_dims) of data of rank 1 to 4, empty dimensions, rows long enough to be prefetched,
slices moved as bytes and as 8-byte words; inputs strided, misaligned, byte-swapped; ``out``
given or not. Roll: every element type against ``np.roll``, up to 8 rolled axes. The registry
runs its kernel from the plan its plan function made. The loops are compiled once, at import,
for fixed signatures, and cached on disk.
"""

import contextlib
import ctypes
import importlib
import itertools
import mmap
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from app import registry
from app.ops import compiled, gather, loops, roll
from app.pipeline.jobs import Limits, make_job
from app.settings import Settings
from tests.support import assert_same_bits

Array = npt.NDArray[Any]
#: The module app.ops.roll (``app.ops.roll`` is the function).
roll_module = importlib.import_module("app.ops.roll")
gather_module = importlib.import_module("app.ops.gather")
ALL_TYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, ml_dtypes.bfloat16, np.float32, np.float64,
]  # fmt: skip
INDEX_TYPES: list[Any] = [
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
]  # fmt: skip


def name_of(dtype: Any) -> str:
    return str(np.dtype(dtype).name)


def random_data(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> Array:
    """Every bit pattern of the width: NaN payloads, -0.0, infinities and subnormals too."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    raw = rng.integers(0, 256, size=(*shape, dtype.itemsize), dtype=np.uint8)
    data: Array = raw.view(dtype).reshape(shape)
    return data


def edge_indices(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: Any, length: int
) -> Array:
    """Indices of ``dtype`` in ``shape``: the edges of [-length, length), the type's own
    extremes, and random values in and around the range."""
    info = np.iinfo(dtype)
    edges = [0, length - 1, length, length + 1, -1, -length, -length - 1, info.min, info.max]
    edges += [info.max - 1, info.min + 1, info.max // 2 + 1]
    pool = [value for value in edges if info.min <= value <= info.max]
    size = int(np.prod(shape))
    picked = rng.integers(-2 * length - 2, 2 * length + 2, size=size)
    values = [pool[int(rng.integers(len(pool)))] if rng.random() < 0.3 else int(v) for v in picked]
    values = [
        v if info.min <= v <= info.max else int(rng.integers(0, max(length, 1))) for v in values
    ]
    return np.array(values, dtype=object).reshape(shape).astype(dtype)


def reference_gather(data: Array, indices: Array, axis: int, batch_dims: int) -> Array:
    """Gather-8 by the spec's loops, in Python integers: data viewed as unsigned integers of its
    width; each index exact (no casts), negative from the end, out of range a slice of zeros."""
    width = data.dtype.itemsize
    raw = data.view(f"u{width}") if data.dtype != np.bool_ else data.view(np.uint8)
    length = data.shape[axis]
    batch_shape = data.shape[:batch_dims]
    out_shape = data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis + 1 :]
    out = np.zeros(out_shape, dtype=raw.dtype)
    for batch in np.ndindex(batch_shape):
        for outer in np.ndindex(data.shape[batch_dims:axis]):
            for position in np.ndindex(indices.shape[batch_dims:]):
                value = int(indices[batch + position])
                if value < 0:
                    value += length
                if 0 <= value < length:
                    out[batch + outer + position] = raw[batch + outer + (value,)]
    return out.view(data.dtype) if data.dtype != np.bool_ else out.view(np.bool_)


def legal_axes(data_rank: int, indices_rank: int) -> list[tuple[int, int]]:
    return [
        (axis, batch_dims)
        for axis in range(data_rank)
        for batch_dims in range(min(data_rank, indices_rank) + 1)
        if batch_dims <= axis
    ]


GATHER_SHAPES = [
    ((7,), (5,)),
    ((3, 5), (3, 4)),
    ((2, 3, 6), (2, 3, 4)),
    ((2, 1, 4, 3), (2, 1, 3)),
    ((2, 0, 3), (2, 0, 2)),
    ((3, 0), (3, 2)),
    ((2, 4), (2, 0)),
    ((4, 3), ()),
]


@pytest.mark.parametrize("index_type", INDEX_TYPES, ids=name_of)
@pytest.mark.parametrize("dtype", ALL_TYPES, ids=name_of)
def test_gather_matches_the_reference(dtype: Any, index_type: Any) -> None:
    rng = np.random.default_rng([np.dtype(dtype).num, np.dtype(index_type).num])
    for data_shape, indices_shape in GATHER_SHAPES:
        data = random_data(rng, data_shape, dtype)
        for axis, batch_dims in legal_axes(len(data_shape), len(indices_shape)):
            if data_shape[:batch_dims] != indices_shape[:batch_dims]:
                continue
            indices = edge_indices(rng, indices_shape, index_type, data_shape[axis])
            expected = reference_gather(data, indices, axis, batch_dims)
            described = f"{data_shape} {indices_shape} axis={axis} batch_dims={batch_dims}"
            out = gather(data, indices, axis, batch_dims)
            assert out.dtype == data.dtype, described
            assert_same_bits(out, expected)
            # Negative forms of axis and batch_dims, into a given output.
            given = np.empty(expected.shape, dtype=data.dtype)
            result = gather(
                data,
                indices,
                axis - len(data_shape),
                batch_dims - len(indices_shape) if batch_dims else 0,
                out=given,
            )
            assert result is given
            assert_same_bits(given, expected)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float16, np.int16], ids=name_of)
@pytest.mark.parametrize("index_type", [np.int32, np.int64, np.uint32, np.uint64], ids=name_of)
def test_narrow_elements_take_a_chunk_s_positions_once_for_its_rows(
    dtype: Any, index_type: Any
) -> None:
    """Elements of 1 and 2 bytes, several rows to a batch: a chunk of indices all in range
    (negative ones among them for signed types) is read once into positions for every row; a
    chunk with one out of range goes element by element (a zero there). Two chunks of
    ``TAKE_CHUNK`` and a part, the first all in range, the second with one out."""
    rng = np.random.default_rng(np.dtype(dtype).num)
    data = random_data(rng, (2, 3, 100), dtype)
    count = 2 * compiled.TAKE_CHUNK + 5
    signed = np.dtype(index_type).kind == "i"
    low = -100 if signed else 0
    indices = rng.integers(low, 100, count).astype(index_type)
    wanted = reference_gather(data, indices, 2, 0)
    assert loops.wait_compiled(120)
    assert_same_bits(gather(data, indices, 2, 0), wanted)
    indices[compiled.TAKE_CHUNK + 3] = 100  # one past the end, in the second chunk
    outside = reference_gather(data, indices, 2, 0)
    assert not outside[..., compiled.TAKE_CHUNK + 3].any()
    assert_same_bits(gather(data, indices, 2, 0), outside)
    batched = rng.integers(low, 100, (2, 3, 50)).astype(index_type)
    assert_same_bits(gather(data, batched, 2, 2), reference_gather(data, batched, 2, 2))
    # The chunk's positions are declared in Gather's workspace.
    assert gather_module.TAKE_CHUNK == compiled.TAKE_CHUNK
    assert gather_module.COLUMNS_LONGEST == compiled._COLUMNS_LONGEST
    table = 8 * (300 + 1)
    assert gather_module.gather_workspace((count,), np.dtype(np.int64), (20, 300), 1) == (
        4 * compiled.TAKE_CHUNK + table
    )
    assert gather_module.gather_workspace((count,), np.dtype(np.int64)) == 4 * compiled.TAKE_CHUNK


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64], ids=name_of)
@pytest.mark.parametrize("inner", [1, 2, 3, 8, 1500])
def test_gather_long_rows_and_slices(dtype: Any, inner: int) -> None:
    """Rows of 4 KiB and more (their successors prefetched) and slices of every size: single
    elements, bytes (odd sizes), 8-byte words."""
    rng = np.random.default_rng(inner)
    data = random_data(rng, (3, 4096 // inner + 5, inner), dtype)
    length = data.shape[1]
    for batch_dims, indices_shape in ((0, (length + 7,)), (1, (3, length))):
        indices = edge_indices(rng, indices_shape, np.int64, length)
        assert_same_bits(
            gather(data, indices, 1, batch_dims), reference_gather(data, indices, 1, batch_dims)
        )


def test_gather_inputs_strided_misaligned_byte_swapped() -> None:
    rng = np.random.default_rng(11)
    base = random_data(rng, (6, 40), np.float32)
    strided = base[::2, ::3]  # not contiguous
    buffer = np.zeros(strided.nbytes + 1, np.uint8)
    misaligned = buffer[1:].view(np.float32).reshape(strided.shape)
    misaligned[...] = strided
    assert not misaligned.flags.aligned
    length = strided.shape[1]
    for index_type in (">i8", ">u4", ">i2", "<u8"):
        indices = edge_indices(rng, (3, 9), np.dtype(index_type).newbyteorder("="), length)
        indices = indices.astype(index_type)[:, ::2]  # byte order as given, strided
        expected = reference_gather(strided, indices, 1, 1)
        assert_same_bits(gather(strided, indices, 1, 1), expected)
        assert_same_bits(gather(misaligned, indices, 1, 1), expected)
        out_buffer = np.zeros(expected.nbytes + 1, np.uint8)
        out = out_buffer[1:].view(np.float32).reshape(expected.shape)
        gather(misaligned, indices, 1, 1, out=out)
        assert_same_bits(out, expected)
        wide = np.zeros((expected.shape[0], 2 * expected.shape[1]), np.float32)
        gather(strided, indices, 1, 1, out=wide[:, ::2])  # a strided output
        assert_same_bits(wide[:, ::2], expected)


def test_unsigned_indices_compare_as_unsigned() -> None:
    data = np.arange(1, 6, dtype=np.int16)
    for index_type in (np.uint8, np.uint16, np.uint32, np.uint64):
        top = np.iinfo(index_type).max
        indices = np.array([top, top // 2 + 1, 4, 0], dtype=index_type)
        assert gather(data, indices, 0).tolist() == [0, 0, 5, 1]


# --- take's vector gathers ---------------------------------------------------------------------

#: The counts of indices a row: none, fewer than a gather's lanes, whole gathers of 8 and 16
#: lanes, and whole gathers with tails.
VECTOR_COUNTS = [0, 1, 7, 8, 15, 16, 17, 33, 40, 63]


def reference_take(
    source: Array, indices: Array, batches: int, outer: int, length: int, count: int, wrap: int
) -> Array:
    """``compiled.take``'s rule in NumPy: a negative value of the index view gets ``wrap`` added;
    a position outside ``[0, length)`` gives a zero."""
    rows = source.reshape(batches, outer, length)
    values = indices.reshape(batches, count).astype(np.int64)
    positions = values + np.where(values < 0, np.int64(wrap), np.int64(0))
    inside = (positions >= 0) & (positions < length)
    out = np.zeros((batches, outer, count), source.dtype)
    for batch in range(batches):
        taken = rows[batch][:, np.where(inside[batch], positions[batch], 0)]
        out[batch] = np.where(inside[batch], taken, 0)
    return out.reshape(-1)


def index_views(rng: np.random.Generator, size: int, length: int) -> list[tuple[Array, int]]:
    """The index views take is called with, and their ``wrap``: int32 and int64 (from the end),
    uint32 viewed as int32 (2**32) and uint64 viewed as int64 (0), each with the edges of the
    range and of the type among values in and around it."""
    views = []
    for kind in (np.int32, np.int64, np.uint32, np.uint64):
        info = np.iinfo(kind)
        low = -length - 2 if info.min < 0 else 0
        values = rng.integers(low, length + 2, size).astype(kind)
        edges = np.array([0, length - 1, length, info.max, info.min, max(info.min, -1)], kind)
        if size:
            picked = rng.random(size) < 0.2
            values[picked] = edges[rng.integers(0, edges.size, int(picked.sum()))]
        if info.min < 0:
            views.append((values, length))
        else:
            signed = values.view(np.int32 if kind == np.uint32 else np.int64)
            views.append((signed, 1 << 32 if kind == np.uint32 else 0))
    return views


def placed(values: Array, offset: int) -> Array:
    """``values`` copied into a buffer at byte ``offset``: misaligned for any offset not a
    multiple of the width, and nothing readable past their end."""
    buffer = np.empty(values.nbytes + offset, np.uint8)
    copy = buffer[offset:].view(values.dtype)
    copy[...] = values
    return copy


@pytest.mark.parametrize("width", [np.uint8, np.uint16, np.uint32, np.uint64], ids=name_of)
@pytest.mark.parametrize("per", [1, 3])
def test_vector_gathers_take_every_index_type_and_tail(width: Any, per: int) -> None:
    """``compiled.take`` by vector gathers against the NumPy rule: each width, every index view,
    rows of one element to some gathers' worth, counts with and without tails, sources at odd
    addresses, prefetching or not; with ``per`` rows a batch, narrow elements go through the
    chunk's positions (all in range: a second call with every index in range)."""
    rng = np.random.default_rng(np.dtype(width).itemsize * 10 + per)
    for length, count, batches, offset, line in itertools.product(
        [1, 2, 3, 5, 19, 64], VECTOR_COUNTS, [1, 2], [0, 1, 3], [0, 4]
    ):
        source = placed(random_data(rng, (batches * per * length,), width), offset)
        for indices, wrap in index_views(rng, batches * count, length):
            inside = rng.integers(0, length, batches * count).astype(indices.dtype)
            for chosen in (indices, inside):
                wanted = reference_take(source, chosen, batches, per, length, count, wrap)
                out = np.full(wanted.size, 7, width)
                compiled.take(source, chosen, out, batches, per, length, count, wrap, line)
                assert_same_bits(out, wanted)


@contextlib.contextmanager
def page_before_a_guard() -> Iterator[Array]:
    """A page of bytes followed by a page made unreadable (PROT_NONE) while the block runs: a
    read past the first page crashes the test."""
    page = mmap.PAGESIZE
    mprotect = ctypes.CDLL(None, use_errno=True).mprotect
    region = mmap.mmap(-1, 2 * page)
    whole = np.frombuffer(region, np.uint8)
    guard = ctypes.c_void_p(whole.ctypes.data + page)
    assert mprotect(guard, ctypes.c_size_t(page), 0) == 0  # PROT_NONE
    try:
        yield whole[:page]
    finally:
        assert mprotect(guard, ctypes.c_size_t(page), 3) == 0  # PROT_READ | PROT_WRITE


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mprotect"), reason="no mprotect")
@pytest.mark.parametrize("width", [np.uint8, np.uint16], ids=name_of)
def test_narrow_gathers_never_read_past_the_source(width: Any) -> None:
    """A 1- or 2-byte element is gathered as the 32-bit word at its address: the last positions
    of the source (their word would reach past its end) are read alone. The source is a page
    followed by a page made unreadable (a word read past the source would crash the test);
    every gather's lanes name the source's last elements."""
    with page_before_a_guard() as first_page:
        rng = np.random.default_rng(5)
        source = first_page.view(width)
        source[...] = random_data(rng, source.shape, width)
        total = source.size
        for per, length in ((1, total), (4, total // 4)):
            ends = np.arange(length - 4, length)
            indices = np.concatenate([ends, ends - length] * 6)  # some counted from the end
            for index_type in (np.int32, np.int64):
                chosen = indices.astype(index_type)
                wanted = reference_take(source, chosen, 1, per, length, chosen.size, length)
                out = np.zeros(wanted.size, width)
                compiled.take(source, chosen, out, 1, per, length, chosen.size, length, 0)
                assert_same_bits(out, wanted)


def guarded_out(size: int, address: int) -> tuple[Array, Array, slice]:
    """A byte output of ``size`` whose address is ``address`` past a 64-byte line, in a buffer
    of 7s with at least 64 of them on either side: the output, the buffer and its place there
    (to check that nothing around it was written)."""
    buffer = np.full(size + 192, 7, np.uint8)
    start = 64 + (address - buffer.ctypes.data) % 64
    place = slice(start, start + size)
    return buffer[place], buffer, place


def assert_only_out_written(buffer: Array, place: slice) -> None:
    assert (buffer[: place.start] == 7).all()
    assert (buffer[place.stop :] == 7).all()


@pytest.mark.parametrize("batches", [1, 2])
def test_bytes_of_several_rows_taken_by_columns(batches: int) -> None:
    """Bytes of 8 rows or more a batch go through ``_take_by_columns`` (with AVX-512 VBMI):
    groups of 8 rows and the rows left over, rows of whole and partial 64-byte tiles (and
    shorter than one), counts with and without a tail of columns, every index view (negative,
    out of range, the type's extremes), source and output at odd addresses; nothing written
    around the output."""
    rng = np.random.default_rng(88 + batches)
    for outer, length, count, offset in itertools.product(
        [8, 9, 15, 16, 17], [1, 5, 63, 64, 65, 130, 200], [64, 65, 127, 128, 200], [0, 1, 17]
    ):
        source = placed(random_data(rng, (batches * outer * length,), np.uint8), offset)
        for indices, wrap in index_views(rng, batches * count, length):
            wanted = reference_take(source, indices, batches, outer, length, count, wrap)
            out, buffer, place = guarded_out(wanted.size, offset)
            compiled.take(source, indices, out, batches, outer, length, count, wrap, 0)
            assert_same_bits(out, wanted)
            assert_only_out_written(buffer, place)


def test_bytes_taken_by_columns_into_a_large_output() -> None:
    """An output of 8 MiB or more with rows of whole 64-byte lines is written by non-temporal
    stores, the columns before its first line one by one: outputs at addresses 0, 16 and 33
    past a line, rows left over, indices negative and out of range."""
    rng = np.random.default_rng(8)
    outer, length, count = 1027, 8197, 8192
    source = random_data(rng, (outer * length,), np.uint8)
    indices = rng.permutation(length)[:count].astype(np.int32)
    indices[:40] = [-1, -length, length, -length - 1, 2**31 - 1, -(2**31)] * 6 + [0] * 4
    wanted = reference_take(source, indices, 1, outer, length, count, length)
    for address in (0, 16, 33):
        out, buffer, place = guarded_out(wanted.size, address)
        compiled.take(source, indices, out, 1, outer, length, count, length, 0)
        assert_same_bits(out, wanted)
        assert_only_out_written(buffer, place)


def test_bytes_taken_by_columns_past_a_chunk_of_indices() -> None:
    """More indices than ``TAKE_CHUNK``: their positions worked out again for each group of 8
    rows, chunk by chunk (two groups and a row left over, two batches)."""
    rng = np.random.default_rng(9)
    outer, length, count = 17, 100, compiled.TAKE_CHUNK + 70
    source = random_data(rng, (2 * outer * length,), np.uint8)
    indices = rng.integers(-length - 3, length + 3, 2 * count).astype(np.int64)
    wanted = reference_take(source, indices, 2, outer, length, count, length)
    out = np.empty(wanted.size, np.uint8)
    compiled.take(source, indices, out, 2, outer, length, count, length, 0)
    assert_same_bits(out, wanted)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint8], ids=name_of)
@pytest.mark.parametrize("index_type", INDEX_TYPES, ids=name_of)
def test_gather_of_bytes_by_columns(dtype: Any, index_type: Any) -> None:
    """Gather of 1-byte elements along the last axis, rows enough for groups of 8 (and some
    left over): every index type with its edges (negative, out of range, the type's
    extremes), batches, data strided and misaligned, ``out`` given."""
    rng = np.random.default_rng(np.dtype(index_type).num + 3 * np.dtype(dtype).num)
    data = random_data(rng, (3, 19, 100), dtype)
    indices = edge_indices(rng, (5, 40), index_type, 100)
    assert_same_bits(gather(data, indices, 2, 0), reference_gather(data, indices, 2, 0))
    batched = edge_indices(rng, (3, 70), index_type, 100)
    assert_same_bits(gather(data, batched, 2, 1), reference_gather(data, batched, 2, 1))
    wide = random_data(rng, (17, 2 * 100), dtype)
    strided, misaligned = wide[:, ::2], placed(wide.reshape(-1), 1).reshape(wide.shape)
    for source in (strided, misaligned):
        given = np.empty((17, 5, 40), dtype)
        assert gather(source, indices, 1, 0, out=given) is given
        assert_same_bits(given, reference_gather(source, indices, 1, 0))


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mprotect"), reason="no mprotect")
def test_bytes_taken_by_columns_never_read_past_the_source() -> None:
    """``_take_by_columns`` reads rows by 64-byte vectors: only whole tiles within a row, the
    rest byte by byte. The source ends where a page made unreadable begins (a read past it
    would crash the test): groups of 8 rows, rows left over, rows of whole tiles and not."""
    with page_before_a_guard() as first_page:
        rng = np.random.default_rng(10)
        for outer, length, count in ((8, 512, 128), (9, 455, 130), (16, 100, 64), (11, 64, 70)):
            source = first_page[first_page.size - outer * length :]
            source[...] = random_data(rng, source.shape, np.uint8)
            ends = np.arange(length - 4, length)
            indices = np.resize(np.concatenate([ends, ends - length]), count)
            for index_type in (np.int32, np.int64):
                chosen = indices.astype(index_type)
                wanted = reference_take(source, chosen, 1, outer, length, count, length)
                out = np.zeros(wanted.size, np.uint8)
                compiled.take(source, chosen, out, 1, outer, length, count, length, 0)
                assert_same_bits(out, wanted)


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=name_of)
@pytest.mark.parametrize("index_type", [np.int32, np.int64], ids=name_of)
def test_gather_elements_along_the_last_axis_by_vector_gathers(dtype: Any, index_type: Any) -> None:
    """GatherElements along the last axis (one row of indices a row of data, through the
    vector gathers): every element type, odd row lengths and counts, the row's last element,
    inputs strided and misaligned, ``out`` given or not."""
    from app.ops.gather_elements import gather_elements  # noqa: PLC0415

    rng = np.random.default_rng(np.dtype(dtype).num)
    for rows, length, count in ((1, 1, 1), (3, 5, 17), (4, 33, 40), (2, 300, 63)):
        data = random_data(rng, (rows, 2 * length), dtype)[:, ::2]  # strided
        indices = rng.integers(0, length, (rows, count)).astype(index_type)
        indices[:, 0] = length - 1
        indices[:, -1] = length - 1
        wide = np.zeros((rows, length), dtype)
        wide[...] = data
        wanted = np.take_along_axis(wide, indices.astype(np.int64), axis=1)
        assert_same_bits(gather_elements(data, indices, -1), wanted)
        misaligned = placed(wide.reshape(-1), 1).reshape(wide.shape)
        given = np.empty(wanted.shape, dtype)
        assert gather_elements(misaligned, indices, 1, out=given) is given
        assert_same_bits(given, wanted)


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=name_of)
def test_roll_matches_numpy(dtype: Any) -> None:
    rng = np.random.default_rng(np.dtype(dtype).num)
    shapes = [(7,), (4, 6), (3, 1, 5), (2, 3, 4, 5), (2,) * 8 + (3,), (3, 0, 2)]
    for shape in shapes:
        data = random_data(rng, shape, dtype)
        rank = len(shape)
        for count in range(1, min(rank, 9) + 1):
            axes = rng.permutation(rank)[:count]
            shift = rng.integers(-20, 20, size=count)
            axes_given = np.where(rng.random(count) < 0.5, axes - rank, axes)
            expected = np.roll(data, shift.tolist(), tuple(axes.tolist()))
            assert_same_bits(roll(data, shift, axes_given), expected)
            out = np.empty_like(data)
            assert roll(data, shift, axes_given, out=out) is out
            assert_same_bits(out, expected)
            strided = np.repeat(data, 2, axis=-1)[..., ::2]
            assert_same_bits(roll(strided, shift, axes_given), expected)


@pytest.mark.parametrize("dtype", [np.int8, np.float32, ml_dtypes.bfloat16], ids=name_of)
def test_roll_of_large_tensors_by_flat_copies(dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large outputs are rolled by flat copies and their seams where few blocks make them (the
    size thresholds lowered here to reach that path on small tensors), else by the loop."""
    monkeypatch.setattr(roll_module, "_LARGE", 0)
    monkeypatch.setattr(roll_module, "_LARGE_RUNS", 0)
    monkeypatch.setattr(roll_module, "_MAX_BLOCKS", 8)
    rng = np.random.default_rng(np.dtype(dtype).num)
    cases = [
        ((9, 13), [4, -3], [0, 1]),
        ((9, 13), [2], [0]),
        ((9, 13), [11], [1]),
        ((9, 13), [-1], [-1]),
        ((2, 5, 7), [3, 2], [1, 2]),
        ((3, 5, 7), [1], [0]),
        ((6, 5, 7), [3, 2], [1, 2]),  # 12 blocks: the loop
        ((3, 4, 5, 2), [1, 2, 1], [0, 1, 3]),  # two rolled axes before the rows: the loop
        ((5, 4, 3), [2, 1], [0, 2]),
    ]
    for shape, shift, axes in cases:
        data = random_data(rng, shape, dtype)
        assert_same_bits(roll(data, shift, axes), np.roll(data, shift, axes))


def test_roll_misaligned_and_odd_runs() -> None:
    rng = np.random.default_rng(4)
    data = random_data(rng, (5, 7, 3), np.float64)
    buffer = np.zeros(data.nbytes + 3, np.uint8)
    misaligned = buffer[3:].view(np.float64).reshape(data.shape)
    misaligned[...] = data
    for shift, axes in (([1, 2], [0, 1]), ([3], [2]), ([-1, 1, 1], [0, 1, 2])):
        assert_same_bits(roll(misaligned, shift, axes), np.roll(data, shift, axes))


def test_the_job_runs_its_kernel_from_the_plan_it_carries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """make_job runs the op's plan (the spec's checks) and the job carries it: Job.output
    computes from it, and the spec's checks are not run again. The plan travels with the job,
    not through a table of the module's."""
    checks = {"gather_plan": 0, "roll_shifts": 0}

    def counted(name: str, check: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            checks[name] += 1
            return check(*args, **kwargs)

        return call

    def refused(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("checked again")

    # The declarations reach the checks through their own modules (app/ops/<op>.py): counted
    # there, and the checking entry points (the kernels called alone) refused.
    monkeypatch.setattr(
        gather_module, "gather_plan", counted("gather_plan", gather_module.gather_plan)
    )
    monkeypatch.setattr(roll_module, "roll_shifts", counted("roll_shifts", roll_module.roll_shifts))
    monkeypatch.setattr(gather_module, "gather", refused)
    monkeypatch.setattr(roll_module, "roll", refused)

    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    arrays = {"data": data, "indices": np.array([[1, -1], [0, 9], [3, 2]]), "axis": np.array(1)}
    attributes = {"batch_dims": 1}
    op = registry.REGISTRY["gather"]
    expected = reference_gather(data, arrays["indices"], 1, 1)
    limits = Limits.of(Settings())
    job = make_job(op, arrays, attributes, limits)
    assert job.output_shape == (3, 2)
    assert checks["gather_plan"] == 1  # the spec's checks ran once, in make_job
    assert_same_bits(job.output(), expected)
    assert checks["gather_plan"] == 1  # and not again when the job computed
    for module in (registry, gather_module, roll_module):
        assert not any(name.startswith("_PLANS") for name in vars(module)), "a module-level table"

    roll_op = registry.REGISTRY["roll"]
    roll_arrays = {"data": data, "shift": np.array([1, -1]), "axes": np.array([0, 1])}
    roll_job = make_job(roll_op, roll_arrays, {}, limits)
    assert roll_job.output_shape == (3, 4)
    assert checks["roll_shifts"] == 1
    assert_same_bits(roll_job.output(), np.roll(data, [1, -1], (0, 1)))
    assert checks["roll_shifts"] == 1


def test_compiled_for_fixed_signatures_only() -> None:
    assert dict(compiled.compiled_signatures()) == {
        "take": 8,
        "take_slices": 4,
        "roll": 2,
        "strided_copy": 5,  # the four unsigned widths and 16-byte units
        "pad_rows": 4,
        "slice_scatter": 4,  # each width (an element, or the run after the sliced axis)
        "transpose_tiles": 4,
        "gather_tree": 4,
        "first_fraction": 3,
        "col2im_reach": 1,
        "col2im": 4,  # each width
        # Unique's: slots of 1 or 2 bytes, keys of 2, 4 or 8, int32 or int64 indices.
        "first_slots": 2,
        "slot_lines": 4,
        "hash_groups": 3,
        "hash_lines": 6,
        # ScatterElementsUpdate's: puts of each width, reductions of the 11 types it computes
        # in (bool, the integers, float32, float64; uint16 also float16's and bfloat16's bits).
        "scatter_put": 4,
        "scatter_reduce": 11,
    }
    source = np.zeros(4, np.float32)  # not a raw unsigned view: no signature takes it
    with pytest.raises(TypeError):
        compiled.take(source, np.zeros(1, np.int64), source, 1, 1, 4, 1, 4, 0)


def test_edge_indices_cover_the_extremes() -> None:
    rng = np.random.default_rng(0)
    for index_type in INDEX_TYPES:
        values = set(edge_indices(rng, (400,), index_type, 5).tolist())
        info = np.iinfo(index_type)
        assert info.max in values and info.min in values
        assert {0, 4, 5} <= values
        if info.min < 0:
            assert {-1, -5, -6} <= values
    assert list(itertools.islice(legal_axes(3, 2), 3)) == [(0, 0), (1, 0), (1, 1)]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_a_block_copy_takes_any_view_of_its_flat_array(dtype: Any) -> None:
    """``copy_block`` copies strided, reversed and broadcast views (each stride a row may have:
    forward, reversed, repeated, every third) as NumPy's assignment does, bit for bit."""
    from app.ops.raw import copy_block  # noqa: PLC0415

    source = np.arange(7 * 9 * 11, dtype=np.uint64).astype(dtype).reshape(7, 9, 11)
    flat = source.reshape(-1)
    views = [
        source[::2, ::-1, 1:],
        source[::-1, 3:4, ::-1],
        np.broadcast_to(source[:, :, 5:6], (7, 9, 10)),
        source[1:, ::-2, ::3],
        source[..., 0],
    ]
    for view in views:
        out = np.full(view.shape, 255, dtype)
        copy_block(out.reshape(-1), out, flat, view)
        assert_same_bits(out, np.ascontiguousarray(view))


def test_a_block_copy_refuses_what_is_not_a_view_of_its_flat_array() -> None:
    """The compiled copy reads without bounds checks, so a block outside its array is refused
    before it runs."""
    from app.ops.raw import copy_block  # noqa: PLC0415

    source = np.arange(16, dtype=np.uint8)
    out = np.zeros(16, np.uint8)
    with pytest.raises(ValueError, match="not a view"):
        copy_block(out, out, source, np.arange(16, dtype=np.uint8))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
@pytest.mark.parametrize("offset", [0, 8, 3])
def test_rows_on_whole_words_are_copied_as_words(
    dtype: Any, offset: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A permuted copy whose inner runs, strides and starts fall on 16-byte units moves units
    (BatchToSpace's 16-byte channel runs: one element each, the rows the axes around them);
    forward block rows on 8-byte words are copied as words. The same bits as NumPy's copy, by
    either function, an array at an odd address included; rows off the words take the element
    loop."""
    from app.ops import raw  # noqa: PLC0415

    worded: list[int] = []
    united: list[bool] = []
    original = raw._copy_words
    original_units = raw._as_units

    def counted(*arguments: Any) -> bool:
        done = original(*arguments)
        worded.append(done)
        return done

    def counted_units(*arguments: Any) -> Any:
        wide = original_units(*arguments)
        united.append(wide is not None)
        return wide

    monkeypatch.setattr(raw, "_copy_words", counted)
    monkeypatch.setattr(raw, "_as_units", counted_units)
    per = 8 // np.dtype(dtype).itemsize
    buffer = np.zeros(8 * 6 * 5 * 16 * np.dtype(dtype).itemsize + offset, np.uint8)
    flat = buffer[offset:].view(dtype)
    flat[:] = np.arange(flat.size, dtype=np.uint64).astype(dtype) * 7 + 3
    cube = flat.reshape(8, 6, 5, 16)
    out = np.zeros(8 * 6 * 5 * 16, dtype)
    # Batch to space as BatchToSpace moves it: a permuted view of whole channel runs.
    permuted = cube.reshape(2, 2, 2, 6, 5, 16).transpose(2, 3, 0, 4, 1, 5)
    raw.copy_permuted(out, out.reshape(permuted.shape), flat, permuted)
    assert_same_bits(out.reshape(permuted.shape), permuted.copy())
    # A block copy of rows a whole number of words long, and of rows that are not.
    for width in (16, 16 - per // 2):
        out[:] = 0
        view = cube[:, 1:5, :, :width]
        target = out.reshape(8, 6, 5, 16)[:, :4, :, :width]
        raw.copy_block(out, target, flat, view)
        assert_same_bits(target, view.copy())
    assert united == [True]  # the permuted copy, in units
    assert True not in worded[:-2]  # (it may ask the words' path, which declines units)
    assert worded[-2:] == [True, False]  # the blocks: whole words, then not


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("step", [2, 3, 4])
def test_rows_read_a_step_apart_are_read_with_the_rows_that_fill_their_gaps(
    dtype: Any, step: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Image patches whose stride is their size: each output row reads a source line ``step``
    elements apart, and the ``step`` rows that fill the gaps are read with it (``lane_step``
    negative: the line once). The same bits as NumPy's copy of the view, every width (the
    ops hand the copy their data's raw unsigned view)."""
    from app.ops import loops, raw  # noqa: PLC0415

    lanes: list[int] = []
    original = compiled.strided_copy

    def watched(*arguments: Any) -> None:
        lanes.append(int(arguments[8]))  # lane_step
        original(*arguments)

    assert loops.ready_module() is compiled
    monkeypatch.setattr(compiled, "strided_copy", watched)
    height, width = 5, 7 * step * 4
    flat = (np.arange(3 * height * step * width) * 37 % 251).astype(dtype)
    image = flat.reshape(3, height * step, width)
    # [channel, row, kernel row, column, kernel column] -> [kernel row, kernel column,
    # channel, row, column]: what ExtractImagePatches makes of a stride equal to its size.
    patches = image.reshape(3, height, step, width // step, step).transpose(2, 4, 0, 1, 3)
    out = np.zeros(patches.size, dtype)
    raw.copy_permuted(out, out.reshape(patches.shape), flat, patches)
    assert_same_bits(out.reshape(patches.shape), patches.copy())
    assert lanes and all(lane < 0 for lane in lanes), lanes


@pytest.mark.parametrize(
    "dtype", [np.uint8, np.uint16, np.uint32, np.uint64, np.complex128], ids=str
)
def test_rows_of_blocks_interleaved_from_their_lanes(dtype: Any) -> None:
    """The strided copy's rows of blocks (``lane_step`` positive, ``step`` the block's length,
    ``out_step`` the lanes' count times it): block ``e`` of lane ``k`` read at ``k * lane + e *
    block`` and written at ``(e * lanes + k) * block``, for every block length and lane count
    its loop writes out and others (1 to 7, 2 to 5), rows of 1 to 301 blocks, starts off
    either array's first element, two outer axes, in every width it is compiled for, by
    regular stores and by non-temporal ones (``stream``: the row put together in a buffer,
    pieces of up to 8 KiB, each streamed; rows of several pieces here): the bits an
    index-by-index reference puts there, and nothing outside the blocks written (gaps between
    the rows and the ends of ``out`` keep their bits)."""
    rng = np.random.default_rng(11)

    def bits(count: int) -> Array:
        return np.frombuffer(rng.bytes(count * np.dtype(dtype).itemsize), dtype).copy()

    shapes = itertools.product((1, 2, 3, 4, 5, 7), (2, 3, 4, 5), (1, 2, 7, 33, 301), (0, 1))
    for block, lanes, size, stream in shapes:
        source_start, out_start = int(rng.integers(0, 4)), int(rng.integers(0, 4))
        width = size * lanes * block  # one row's elements, side by side in out
        lane = size * block + int(rng.integers(0, 3))
        lengths = [2, 3]
        source_strides = [(lanes + 1) * lane, lanes * lane + 1]
        out_strides = [3 * (width + 2) + 1, width + 2]
        source = bits(source_start + 2 * source_strides[0] + 3 * source_strides[1] + 1)
        out = bits(out_start + out_strides[0] + 2 * out_strides[1] + width + 5)
        expected = out.copy()
        e, k, j = np.meshgrid(np.arange(size), np.arange(lanes), np.arange(block), indexing="ij")
        for outer, inner in itertools.product(range(2), range(3)):
            s = source_start + outer * source_strides[0] + inner * source_strides[1]
            o = out_start + outer * out_strides[0] + inner * out_strides[1]
            expected[o + (e * lanes + k) * block + j] = source[s + k * lane + e * block + j]
        table = np.array(lengths + source_strides + out_strides, np.int64)
        compiled.strided_copy(source, out, table, source_start, out_start, size, block,
                              lanes * block, lane, stream)  # fmt: skip
        assert out.tobytes() == expected.tobytes(), (block, lanes, size, stream)


@pytest.mark.parametrize(
    "dtype", [np.uint8, np.uint16, np.uint32, np.uint64, np.complex128], ids=str
)
def test_rows_of_blocks_spread_to_their_lanes(dtype: Any) -> None:
    """The strided copy's rows of blocks read in one line (``lane_step`` negative, ``step`` the
    lanes' count, ``out_step`` the block's length, more than 1): block ``e * lanes + k`` of the
    line written to lane ``k``'s row at ``e * block``, for every block length and lane count its
    loop writes out and others (2 to 7, 2 to 5), rows of 1 to 301 blocks, starts off either
    array's first element, two outer axes, every width: the bits an index-by-index reference
    puts there, and nothing outside the blocks written."""
    rng = np.random.default_rng(12)

    def bits(count: int) -> Array:
        return np.frombuffer(rng.bytes(count * np.dtype(dtype).itemsize), dtype).copy()

    for block, lanes, size in itertools.product((2, 3, 4, 5, 7), (2, 3, 4, 5), (1, 2, 7, 33, 301)):
        source_start, out_start = int(rng.integers(0, 4)), int(rng.integers(0, 4))
        line = size * lanes * block  # one row's elements, side by side in source
        gap = size * block + int(rng.integers(1, 3))  # a lane's row, and a gap after it
        lengths = [2, 3]
        source_strides = [3 * line + 2, line + 1]
        out_strides = [3 * lanes * gap + 1, lanes * gap]
        source = bits(source_start + source_strides[0] + 2 * source_strides[1] + line + 1)
        out = bits(out_start + out_strides[0] + 2 * out_strides[1] + lanes * gap + 3)
        expected = out.copy()
        e, k, j = np.meshgrid(np.arange(size), np.arange(lanes), np.arange(block), indexing="ij")
        for outer, inner in itertools.product(range(2), range(3)):
            s = source_start + outer * source_strides[0] + inner * source_strides[1]
            o = out_start + outer * out_strides[0] + inner * out_strides[1]
            expected[o + k * gap + e * block + j] = source[s + (e * lanes + k) * block + j]
        table = np.array(lengths + source_strides + out_strides, np.int64)
        compiled.strided_copy(source, out, table, source_start, out_start, size, lanes, block,
                              -gap, 0)  # fmt: skip
        assert out.tobytes() == expected.tobytes(), (block, lanes, size)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_short_runs_bound_for_other_rows_are_copied_as_spread_blocks(
    dtype: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SpaceToBatch's permuted view (the block column's channel runs side by side in each data
    line, each bound for its own batch) with runs of 1 to 16 elements and block columns of 2 to
    4: the same bits as NumPy's copy; runs of more than one element (or unit) in a row of
    blocks spread to their lanes (``lane_step`` negative, ``out_step`` the block)."""
    from app.ops import raw  # noqa: PLC0415

    calls: list[tuple[int, int, int]] = []
    original = compiled.strided_copy

    def watched(*arguments: Any) -> None:
        calls.append((int(arguments[6]), int(arguments[7]), int(arguments[8])))
        original(*arguments)

    monkeypatch.setattr(compiled, "strided_copy", watched)
    item = np.dtype(dtype).itemsize
    for channels, across in itertools.product((1, 2, 3, 5, 8, 16), (2, 3, 4)):
        calls.clear()
        shape = (2, 3, 2, 5, across, channels)  # [batch, H, by, W, bx, C]
        count = int(np.prod(shape))
        flat = np.frombuffer(np.random.default_rng(channels).bytes(count * item), dtype)
        view = flat.reshape(shape).transpose(2, 4, 0, 1, 3, 5)  # [by, bx, batch, H, W, C]
        out = np.zeros(count, dtype)
        raw.copy_permuted(out, out.reshape(view.shape), flat, view)
        assert_same_bits(out.reshape(view.shape), view.copy())
        unit = next((unit for unit in (16, 8, 4, 2) if item < unit and channels * item % unit == 0),
                    item)  # fmt: skip
        block = channels * item // unit
        if block > 1:
            assert (across, block) in [call[:2] for call in calls if call[2] < 0], calls


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("streamed", [False, True])
def test_short_runs_that_other_runs_follow_are_copied_as_interleaved_blocks(
    dtype: Any, offset: int, streamed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BatchToSpace's permuted view (the block column's channel runs side by side in each output
    line) with runs of 1 to 16 elements, block columns of 2 to 4, the data at an odd address or
    not: the same bits as NumPy's copy, by rows of interleaved blocks (``lane_step`` positive,
    ``step`` the run's length in the elements or the units of 2 to 16 bytes the copy moves:
    the widest the run fills), by regular
    stores or (the thresholds of a large output set to 0) by non-temporal ones."""
    from app.ops import raw  # noqa: PLC0415

    calls: list[tuple[int, int, int]] = []
    original = compiled.strided_copy

    def watched(*arguments: Any) -> None:
        calls.append((int(arguments[6]), int(arguments[7]), int(arguments[8])))
        assert int(arguments[9]) == streamed
        original(*arguments)

    monkeypatch.setattr(compiled, "strided_copy", watched)
    if streamed:
        monkeypatch.setattr(raw, "STREAM_BYTES", 0)
        monkeypatch.setattr(raw, "STREAM_INTERLEAVED_BYTES", 0)
    item = np.dtype(dtype).itemsize
    for channels, across in itertools.product((1, 2, 3, 5, 8, 16), (2, 3, 4)):
        calls.clear()
        shape = (2, across, 2, 3, 5, channels)  # [by, bx, batch, H, W, C]
        count = int(np.prod(shape))
        noise = np.random.default_rng(channels).bytes(count * item + offset)
        flat = np.frombuffer(noise, np.uint8)[offset:].view(dtype)
        view = flat.reshape(shape).transpose(2, 3, 0, 4, 1, 5)  # [batch, H, by, W, bx, C]
        out = np.zeros(count, dtype)
        raw.copy_permuted(out, out.reshape(view.shape), flat, view)
        assert_same_bits(out.reshape(view.shape), view.copy())
        # The run in the widest unit (16 bytes down to 2, wider than an element) it fills.
        unit = next((unit for unit in (16, 8, 4, 2) if item < unit and channels * item % unit == 0),
                    item)  # fmt: skip
        block = channels * item // unit
        assert (block, across * block) in [call[:2] for call in calls if call[2] > 0], calls


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_a_view_copy_takes_slices_of_any_step_either_way(
    dtype: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``copy_view`` (Slice and StridedSlice's copy) gives NumPy's assignment bit
    for bit, read from a view (steps 1 to 5 either way, new and dropped axes of one element,
    rows of every length) or written into one (every other element replaced), the compiled
    copy taking every size (its threshold set to 0)."""
    from app.ops import raw  # noqa: PLC0415

    monkeypatch.setattr(raw, "COPY_VIEW_FROM", 0)
    rng = np.random.default_rng(7)
    source = rng.integers(0, 1 << 30, (6, 10, 37), dtype=np.uint64).astype(dtype)
    reads = [source[:, :, ::step] for step in (1, 2, 3, 4, 5, -1, -2, -3)]
    reads += [source[1:5:2, ::-3, 2:30:2], source[None, 2, ..., ::2], source[:, 4, :]]
    for view in reads:
        out = np.full(view.shape, 7, dtype)
        raw.copy_view(out, out, source, view)
        assert_same_bits(out, np.ascontiguousarray(view))
    # A view given with axes of one element more or fewer than the output's.
    out = np.full((1, 6, 37), 7, dtype)
    raw.copy_view(out, out, source, source[:, 3, :])
    assert_same_bits(out, source[None, :, 3, :].copy())
    for slices in [(slice(None), slice(None), slice(None, None, 2)),
                   (slice(None), slice(None, None, -1), slice(1, None, 4)),
                   (slice(None, None, -2), slice(1, 9, 3), slice(None))]:  # fmt: skip
        target = source.copy()
        expected = source.copy()
        fresh = rng.integers(0, 1 << 30, target[slices].shape, dtype=np.uint64).astype(dtype)
        expected[slices] = fresh
        raw.copy_view(target, target[slices], fresh, fresh)
        assert_same_bits(target, expected)


@pytest.mark.parametrize(
    "dtype", [np.uint8, np.uint16, np.uint32, np.uint64, np.complex128], ids=str
)
@pytest.mark.parametrize("step", [1, -1])
@pytest.mark.parametrize("offset", [0, 1, 5])
def test_the_strided_copy_by_non_temporal_stores_in_every_width(
    dtype: Any, step: int, offset: int
) -> None:
    """The strided copy's rows written by non-temporal stores (``stream`` 1), forward and
    reversed, in each width it is compiled for (16-byte units too), starting ``offset``
    elements past an aligned output, of a length whose ends fall off a 64-byte line: the same
    bits as with regular stores and as NumPy's copy."""
    rows, run = 5, 203
    source = np.frombuffer(np.random.default_rng(offset).bytes(rows * run * 16), dtype)
    source = source[: rows * run].copy()
    expected = source.reshape(rows, run)[:, ::step]
    results = []
    for stream in (0, 1):
        out = np.zeros(rows * run + offset, dtype)
        # Rows of ``run`` elements, read forward from their first or backward from their last.
        table = np.array([rows, run, run], np.int64)
        start = 0 if step == 1 else run - 1
        compiled.strided_copy(source, out, table, start, offset, run, step, 1, 0, stream)
        assert not out[:offset].any()
        results.append(out[offset:].reshape(rows, run))
    assert results[0].tobytes() == results[1].tobytes() == expected.tobytes()


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mprotect"), reason="no mprotect")
@pytest.mark.parametrize(
    "dtype", [np.uint8, np.uint16, np.uint32, np.uint64, np.complex128], ids=str
)
@pytest.mark.parametrize("offset", [0, 1, 5])
def test_the_strided_copy_of_every_other_element_by_non_temporal_stores(
    dtype: Any, offset: int
) -> None:
    """Rows read two apart and written forward by non-temporal stores (``stream`` 1; a line
    of the output is two lines of the source shuffled, which read the element after the last
    one taken): in each width, starting ``offset`` elements past an aligned output, rows whose
    ends fall off a line or end on one, the last row's last element the source's last, the
    source followed by an unreadable page (a read past it would crash the test): the same bits
    as with regular stores and as NumPy's, nothing outside the output written."""
    width = np.dtype(dtype).itemsize
    page = mmap.PAGESIZE
    for rows, run, gap in ((5, 203, 1), (3, 250, 0), (1, 2000, 1), (4, 9, 1)):
        stride = 2 * run - gap  # each source row; gap 1: the row's last element is taken
        nbytes = rows * stride * width
        pages = -(-nbytes // page)
        mprotect = ctypes.CDLL(None, use_errno=True).mprotect
        region = mmap.mmap(-1, (pages + 1) * page)
        whole = np.frombuffer(region, np.uint8)
        guard = ctypes.c_void_p(whole.ctypes.data + pages * page)
        assert mprotect(guard, ctypes.c_size_t(page), 0) == 0  # PROT_NONE
        try:
            source = whole[pages * page - nbytes : pages * page].view(dtype)
            source[...] = np.frombuffer(np.random.default_rng(run).bytes(nbytes), dtype)
            taken = np.lib.stride_tricks.as_strided(
                source, (rows, run), (stride * width, 2 * width)
            )
            total = rows * run
            for ends_on_a_line in (False, True):
                results = []
                for stream in (0, 1):
                    out = np.zeros(total + offset + 64 + 3, dtype)
                    start = offset
                    if ends_on_a_line:  # the last row's last line whole: its loads the furthest
                        start += (-(out.ctypes.data + (offset + total) * width) % 64) // width
                    table = np.array([rows, stride, run], np.int64)
                    compiled.strided_copy(source, out, table, 0, start, run, 2, 1, 0, stream)
                    assert not out[:start].any() and not out[start + total :].any()
                    results.append(out[start : start + total])
                assert results[0].tobytes() == results[1].tobytes() == taken.tobytes()
        finally:
            assert mprotect(guard, ctypes.c_size_t(page), 3) == 0  # PROT_READ | PROT_WRITE


def test_the_half_float_conversions_round_as_numpy_and_ml_dtypes() -> None:
    """The one set of float16 and bfloat16 conversions Col2Im's sums and ScatterElementsUpdate's
    reductions share: float32 bits to float16 (NumPy) and bfloat16 (ml_dtypes), float64 bits to
    float16 (NumPy: one rounding, not two through float32), at every tie between two float16s,
    beside it, across the subnormals and the overflow edge, for NaN payloads and at random."""
    import numba  # noqa: PLC0415 - only this test calls the inlined conversions itself

    @numba.njit  # type: ignore[untyped-decorator]
    def each(bits: Array, out: Array, which: int) -> None:  # pragma: no cover - compiled
        for i in range(bits.size):
            if which == 0:
                out[i] = compiled._single_to_half(bits[i])
            elif which == 1:
                out[i] = compiled._single_to_brain(bits[i])
            else:
                out[i] = compiled._double_to_half(bits[i])

    rng = np.random.default_rng(16)
    halves = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float64)
    halves = np.unique(np.abs(halves[np.isfinite(halves)]))
    ties = halves[:-1] + np.diff(halves) / 2
    values = np.concatenate(
        [halves, ties, np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf),
         [65519.99, 65520.0, 2.0**-25, 2.0**-26, 1e-300, 1e300, np.inf]]
    )  # fmt: skip
    doubles = np.concatenate(
        [values, -values, rng.integers(0, 2**64, 200_000, dtype=np.uint64).view(np.float64),
         np.array([np.nan, -np.nan]), np.array([0x7FF0000000000001, 0xFFF4000000000000], np.uint64).view(np.float64)]
    )  # fmt: skip
    singles = np.concatenate(
        [np.arange(0x33000000 - 4096, 0x47800000 + 4096, 61, dtype=np.uint32),
         rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32),
         np.array([0x7F800001, 0x7FC00000, 0x7FBFE000, 0x7F802000, 0x7F7FFFFF, 0x7F7F8000], np.uint32)]
    )  # fmt: skip
    singles = np.concatenate([singles, singles | np.uint32(0x80000000)])
    out = np.empty(singles.size, np.uint64)
    with np.errstate(all="ignore"):
        each(singles.astype(np.uint64), out, 0)
        assert_same_bits(
            out.astype(np.uint16), singles.view(np.float32).astype(np.float16).view(np.uint16)
        )
        each(singles.astype(np.uint64), out, 1)
        expected = singles.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
        assert_same_bits(out.astype(np.uint16), expected)
        out = np.empty(doubles.size, np.uint64)
        each(doubles.view(np.uint64), out, 2)
        assert_same_bits(out.astype(np.uint16), doubles.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64], ids=str)
@pytest.mark.parametrize("shift", [0, 1, 3])
@pytest.mark.parametrize("stream", [0, 1])
def test_pad_rows_pieces_of_every_step_to_the_bit(dtype: Any, shift: int, stream: int) -> None:
    """``pad_rows``' pieces of each step (forward, reversed, one element repeated, a constant
    whose bits are all set but the lowest) in rows whose pieces start and end off a 64-byte
    line, of lengths from 1 to several lines, the output ``shift`` bytes past an aligned
    address (1 and 3: its elements off their width, no whole line), by regular and by
    non-temporal stores (``_stream_row``): the bits a Python loop writes."""
    rng = np.random.default_rng(shift + 7 * stream)
    source = rng.integers(0, np.iinfo(dtype).max, 4 * 300, dtype=dtype, endpoint=True)
    constant = int(np.array(np.iinfo(dtype).max - 1, dtype).astype(np.uint64).view(np.int64))
    # (output start, source position in the row (the constant's bits for step 2), size, step)
    pieces = [(0, 5, 1, 1), (1, 130, 67, -1), (68, 9, 3, 0), (71, constant, 129, 2),
              (200, 7, 150, 1), (350, 299, 64, -1), (414, 0, 1, 2)]  # fmt: skip
    width = 415
    rows = 4
    segments = np.array([[piece[i] for piece in pieces] for i in range(4)], np.int64).reshape(-1)
    item = np.dtype(dtype).itemsize
    buffer = np.zeros(rows * width * item + 64 + shift, np.uint8)
    start = (-buffer.ctypes.data) % 64 + shift
    out = buffer[start : start + rows * width * item].view(dtype)
    table = np.array([rows, 300, width], np.int64)
    compiled.pad_rows(source, out, table, segments, 0, 0, stream)
    expected = np.zeros(rows * width, dtype)
    for row in range(rows):
        for first, at, size, step in pieces:
            for e in range(size):
                if step == 2:
                    value = np.array(at, np.int64).astype(np.uint64).astype(dtype)
                else:
                    value = source[row * 300 + at + step * e]
                expected[row * width + first + e] = value
    assert out.tobytes() == expected.tobytes()
