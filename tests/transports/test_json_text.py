"""Nested JSON text written from a flat encoding: the same JSON as orjson's own, for every
shape (empty and size-1 dimensions, rank 0 to 64) and element type, within its size bound."""

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.transports import json_text
from app.transports.json_text import nested_json, text_bytes

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
