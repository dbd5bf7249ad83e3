"""Nested JSON text, written whole by orjson or in pieces from a flat encoding: the same JSON as
orjson's own, byte for byte either way, for every shape (empty and size-1 dimensions, rank 0 to
64) and element type, within its size bound; floats read back to the same bits."""

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.codecs import json_text
from app.codecs.json_form import decode_json_data
from app.codecs.json_text import nested_json, text_bytes, writes_whole, writing_bytes

TYPES = [np.bool_, np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64]
TYPES += [np.float16, np.float32, np.float64]


def written(array: npt.NDArray[Any]) -> bytes:
    return b"".join(bytes(piece) for piece in nested_json(array))


def values(shape: tuple[int, ...], dtype: Any, seed: int) -> npt.NDArray[Any]:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    if info is None:
        return rng.integers(0, 2, shape).astype(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _small(shape: tuple[int, ...]) -> bool:
    return math.prod(shape) <= 4096


# Any rank up to 12 with small dimensions (empty ones too), or ranks 20-64 of mostly size 1.
shapes = (
    st.lists(st.integers(0, 4), max_size=12).map(tuple)
    | st.lists(st.sampled_from([1, 1, 1, 1, 1, 2, 3]), min_size=20, max_size=64).map(tuple)
).filter(_small)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(shape=shapes, dtype=st.sampled_from(TYPES), seed=st.integers(0, 2**32 - 1))
def test_same_json_as_nested_lists(shape: tuple[int, ...], dtype: Any, seed: int) -> None:
    array = values(shape, dtype, seed)
    text = written(array)
    # The same JSON as orjson's own (slow at high rank) serialisation of the array.
    whole = array.item() if array.ndim == 0 else array
    assert orjson.loads(text) == orjson.loads(
        orjson.dumps(whole, option=orjson.OPT_SERIALIZE_NUMPY)
    )
    assert len(text) <= text_bytes(array.shape, array.dtype)
    if array.ndim >= 2:
        # Written whole or in pieces, the same bytes.
        assert text == b"".join(bytes(piece) for piece in json_text._in_pieces(array))


@pytest.mark.parametrize(
    "shape", [(4, 5, 3), (2,) * 8, (10, 1, 3), (3, 0), (0, 3), (2, 0, 4), (300, 1, 1)]
)
def test_pieces_join_at_any_boundary(
    shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(json_text, "PIECE_BYTES", 1)
    monkeypatch.setattr(json_text, "MIN_PIECE_ELEMENTS", 7)
    array = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    assert orjson.loads(written(array)) == array.tolist()


def test_the_bound_counts_every_bracket() -> None:
    # A rank-31 tensor of size-1 dimensions: 30 lists around each element, on each side.
    shape = (1000,) + (1,) * 30
    array = np.zeros(shape, dtype=np.int8)
    text = written(array)
    assert len(text) == 1000 * (1 + 60 + 1) - 1 + 2
    assert len(text) <= text_bytes(shape, array.dtype) < 2 * len(text)


def test_an_empty_dimension_writes_empty_lists_only() -> None:
    # 2**31 elements are not there, but 5 empty lists are, whatever the dimension after the 0.
    shape = (5, 0, 2**31)
    assert text_bytes(shape, np.dtype(np.float64)) < 100
    assert orjson.loads(written(np.zeros(shape, dtype=np.float64))) == [[]] * 5


def edge_values(dtype: Any, count: int, seed: int) -> npt.NDArray[Any]:
    """``count`` values of ``dtype``: every kind of edge first (zeros of both signs, the
    smallest subnormal and normal, the largest, one past a power of ten...), then random bit
    patterns (finite ones, for floats)."""
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, count).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        ends = [info.min, info.max, 0, 1, info.max - 1, info.min + 1]
        random = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
        return np.concatenate([np.array(ends, dtype=dtype), random])[:count]
    finfo = np.finfo(dtype)
    edges = [0.0, -0.0, finfo.smallest_subnormal, -finfo.smallest_subnormal, finfo.tiny]
    edges += [finfo.max, finfo.min, finfo.eps, 1 / 3, 0.1, 1e-7, 123456789.0, 65504.0, 1e16]
    with np.errstate(over="ignore"):
        fixed = np.array(edges, dtype=np.float64).astype(dtype)
    bits = rng.integers(0, 1 << (8 * dtype.itemsize), 4 * count, dtype=np.uint64)
    random = bits.astype(f"u{dtype.itemsize}").view(dtype)
    both = np.concatenate([fixed[np.isfinite(fixed)], random[np.isfinite(random)]])
    return both[:count]


@pytest.mark.parametrize("dtype", TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shape", [(3, 4), (7, 1, 5), (2, 3, 4, 5), (1, 1), (64, 33), (2, 0, 3)])
def test_whole_and_pieces_write_the_same_bytes(dtype: Any, shape: tuple[int, ...]) -> None:
    # orjson's whole array and the pieces written flat: the same text, byte for byte, edge
    # values and random bit patterns alike (floats in their shortest round-trip form).
    array = edge_values(dtype, math.prod(shape), seed=len(shape)).reshape(shape)
    pieces = b"".join(bytes(piece) for piece in json_text._in_pieces(array))
    assert orjson.dumps(array, option=orjson.OPT_SERIALIZE_NUMPY) == pieces


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_json_form_carries_every_float_bit_for_bit(dtype: Any) -> None:
    # What the service writes, read back as the service reads it: the same bits, -0.0, the
    # subnormals and the extremes included (float16: every finite value).
    if np.dtype(dtype).itemsize == 2:
        everything = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
        array = everything[np.isfinite(everything)].reshape(-1, 8)
    else:
        array = edge_values(dtype, 1 << 16, seed=7).reshape(-1, 16)
    text = written(array)
    back = decode_json_data(orjson.loads(text), np.dtype(dtype))
    bits = f"u{np.dtype(dtype).itemsize}"
    assert back.view(bits).tolist() == array.view(bits).tolist()


def test_orjson_writes_the_whole_array_where_its_lists_are_few() -> None:
    float32, int8 = np.dtype(np.float32), np.dtype(np.int8)
    assert writes_whole((1000, 1000), float32)
    assert writes_whole((200, 200, 250), float32)
    assert writes_whole((10**7,), int8)
    # A list an element or so: orjson would hold 100-250 bytes each; the pieces are bounded.
    assert not writes_whole((10**6, 1), float32)
    assert not writes_whole((2,) * 20, int8)
    assert not writes_whole((1000,) + (1,) * 30, int8)
    # The estimate counts orjson's lists where it writes whole, and never less than a piece.
    for shape in [(1000, 1000), (16, 32768), (300_000, 33), (2,) * 20, (4, 4)]:
        assert writing_bytes(shape, float32) >= json_text._piece_elements(shape, float32)[1]
    assert writing_bytes((300_000, 33), float32) > 300_000 * json_text.WHOLE_LIST_BYTES


def test_a_whole_array_is_one_piece() -> None:
    array = np.arange(12, dtype=np.int64).reshape(3, 4)
    pieces = nested_json(array)
    assert pieces == [b"[[0,1,2,3],[4,5,6,7],[8,9,10,11]]"]
