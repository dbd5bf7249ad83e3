"""Unique-10's line loops (``slot_lines``, ``hash_lines`` with and without a small table) and
its inverse written into a ready output (``SplitPlan.into``): the same bits as the sort's way
and NumPy's, on every element type, with the ends of the output, misaligned outputs, NaNs,
-0.0, values first seen late, and groups past the small table's."""

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from app.ops import loops
from app.ops import unique as unique_module
from app.ops.declaration import SplitPlan
from app.ops.unique import OP, unique_plan
from tests.cases import DATA_TYPES, make_data
from tests.support import assert_same_bits

_INDEX = {"i32": np.int32, "i64": np.int64}


def _by_sort(
    data: npt.NDArray[Any], sort: bool, index: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[npt.NDArray[Any], ...]:
    plan = unique_plan(data, None, sort, index, "i64")
    with monkeypatch.context() as patch:
        patch.setattr(unique_module, "_countable", lambda _: False)
        patch.setattr(unique_module, "_hashed_groups", lambda *_: None)
        return unique_module.unique_planned(data, plan)


def _into_ready(
    data: npt.NDArray[Any], sort: bool, index: str, offset: int
) -> tuple[npt.NDArray[Any], ...]:
    """Unique with its inverse written into a ready array starting ``offset`` elements into a
    larger one (so its lines are misaligned), whose other elements must stay untouched."""
    plan = unique_plan(data, None, sort, index, "i64")
    store = np.full(data.size + offset + 40, -5, _INDEX[index])
    ready = store[offset : offset + data.size]
    got = unique_module.unique_planned(data, plan, ready)
    assert got[2] is ready
    assert (store[:offset] == -5).all() and (store[offset + data.size :] == -5).all()
    return got


def _values(dtype: np.dtype[Any], size: int, groups: int, late: bool, seed: int) -> Any:
    """``size`` elements of ``groups`` values of ``dtype`` (NaNs, both zeros among the float
    ones); with ``late``, one more value first seen in the last element."""
    rng = np.random.default_rng(seed)
    pool = make_data(rng, dtype, (4 * groups + 8,), False)
    pool = np.unique(pool.view(f"u{dtype.itemsize}") if dtype.itemsize > 1 else pool)
    pool = pool.view(dtype)[: groups + 1] if dtype != np.bool_ else pool.view(dtype)
    data = pool[rng.integers(0, max(1, pool.size - 1), size)]
    if late and size:
        data[-1] = pool[-1]
    return np.ascontiguousarray(data)


@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("groups", [3, 100, 300])
def test_into_a_ready_inverse_gives_what_the_sort_gives(
    dtype: np.dtype[Any], groups: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every element type, few groups (the small table), more than it takes (the gathers), a
    value first seen at the very end (the ranks made again), both orders and index types, the
    ready output misaligned by 0 to 3 elements, sizes with and without ends of lines."""
    assert loops.ready_module() is not None
    for size in (1, 17, 70000, 70037):
        for late in (False, True):
            data = _values(dtype, size, groups, late, size + groups)
            for sort in (True, False):
                for index in ("i64", "i32"):
                    expected = _by_sort(data, sort, index, monkeypatch)
                    for offset in (0, 1, 3):
                        got = _into_ready(data, sort, index, offset)
                        for have, want in zip(got, expected, strict=True):
                            assert_same_bits(have, want)
                    plain = unique_module.unique_planned(data, unique_plan(data, None, sort,
                                                                           index, "i64"))  # fmt: skip
                    for have, want in zip(plain, expected, strict=True):
                        assert_same_bits(have, want)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int32, np.uint32, np.float64])
def test_nan_and_signed_zero_lines(dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines with NaNs (groups of their own) and -0.0 (one group with +0.0) go an element at a
    time; the others by the lines: the same bits as the sort's way, every NaN payload kept."""
    rng = np.random.default_rng(7)
    data = rng.integers(-3, 4, 50000).astype(dtype)
    if np.dtype(dtype).kind == "f":
        data[rng.integers(0, data.size, 40)] = -0.0
        bits = data.view(f"u{np.dtype(dtype).itemsize}")
        nan_places = rng.integers(0, data.size, 30)
        info = np.finfo(dtype)
        exponent = ((1 << info.nexp) - 1) << info.nmant
        bits[nan_places] = exponent | (np.arange(30) + 1).astype(bits.dtype)
        bits[nan_places[::2]] |= bits.dtype.type(1) << bits.dtype.type(8 * bits.itemsize - 1)
    for sort in (True, False):
        for index in ("i64", "i32"):
            expected = _by_sort(data, sort, index, monkeypatch)
            got = _into_ready(data, sort, index, 1)
            for have, want in zip(got, expected, strict=True):
                assert_same_bits(have, want)


def test_the_small_table_is_a_perfect_hash_of_the_groups() -> None:
    """Each group's key sits in its own slot of the small table with its rank; none for keys
    of 8 bytes or more groups than it takes."""
    compiled = loops.compiled_module()
    if not compiled.SMALL_TABLES:
        pytest.skip("the small table's permutes are not compiled on this CPU")
    rng = np.random.default_rng(3)
    keys = np.unique(rng.integers(0, 2**32, 128, dtype=np.uint64))
    ranks = np.arange(keys.size)[::-1]
    small = unique_module._small_table(compiled, np.dtype(np.uint32), keys, ranks)
    assert small.size == compiled.SMALL_TABLE_WORDS
    buckets, slots = compiled.SMALL_BUCKETS, compiled.SMALL_SLOTS
    first, second = (int(factor) for factor in small[-2:])
    rank_bytes = small[buckets + slots : buckets + slots + slots // 4].view(np.uint8)
    for key, rank in zip(keys, ranks, strict=True):
        bucket = ((int(key) * first) % 2**32) >> 27
        slot = (((int(key) * second) % 2**32) >> 24) ^ int(small[bucket])
        assert small[buckets + slot] == key and rank_bytes[slot] == rank
    assert (rank_bytes >= 128).sum() == slots - keys.size
    assert unique_module._small_table(compiled, np.dtype(np.uint64), keys, ranks).size == 0
    more = np.arange(129, dtype=np.uint64)
    assert unique_module._small_table(compiled, np.dtype(np.uint32), more, more).size == 0
    high = np.arange(3, dtype=np.uint64), np.array([0, 1, 128])
    assert unique_module._small_table(compiled, np.dtype(np.uint32), *high).size == 0


@pytest.mark.parametrize("width", [np.uint8, np.uint16])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_slot_lines_look_up_and_count(width: Any, index: Any) -> None:
    """``slot_lines`` directly: ``out[i] = ranks[slots[i]]`` and each slot counted, for sizes
    with and without the ends of lines, misaligned inputs and outputs; nothing written outside."""
    compiled = loops.compiled_module()
    slots_count = 1 << (8 * np.dtype(width).itemsize)
    rng = np.random.default_rng(5)
    ranks = rng.integers(0, 1 << 30, slots_count).astype(index)
    for size in (0, 1, 7, 16, 33, 1000, 4099):
        buffer = rng.integers(0, slots_count, size + 8).astype(width)
        for start in (0, 1):
            slots = buffer[start : start + size]
            for offset in (0, 1, 5):
                store = np.full(size + offset + 20, -9, index)
                out = store[offset : offset + size]
                counts = np.zeros(4 * slots_count, np.int64)
                compiled.slot_lines(slots, ranks, counts, out)
                assert np.array_equal(out, ranks[slots])
                assert (store[:offset] == -9).all() and (store[offset + size :] == -9).all()
                total = counts.reshape(4, slots_count).sum(axis=0)
                assert np.array_equal(total, np.bincount(slots, minlength=slots_count))


def test_the_plan_writes_the_inverse_into_its_ready_array() -> None:
    """``SplitPlan.into``: the inverse is the ready array itself; the other outputs arrays of
    their own, as ``run`` gives them."""
    data = (np.arange(1000) * 7 % 13).astype(np.float32)
    plan = OP.plan({"data": data}, OP.attribute_defaults())
    assert isinstance(plan, SplitPlan) and plan.into is not None
    types = OP.output_types({"data": data}, OP.attribute_defaults(), 4)
    ready = [np.empty(shape, dtype) for shape, dtype in zip(plan.output_shapes, types, strict=True)]
    parts = plan.into(ready)
    assert parts[2] is ready[2]
    for have, want in zip(parts, plan.run(), strict=True):
        assert_same_bits(have, want)
    assert not any(parts[k] is ready[k] for k in (0, 1, 3))
