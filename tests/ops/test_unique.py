"""Unique-10: the spec's examples, its rules, every element type to the bit, an element-by-
element reading of the spec, NumPy's np.unique, and OpenVINO's CPU plugin.

The plugin is given ``DIFFERENTIAL_CASES`` generated cases (int8, uint8, int32, int64, float32;
flattened and along every axis; sorted and not; both index and count types) with small values,
so that repeats are common. Where it does not follow the spec (NaNs when sorting, unsigned
values sorted as signed, uninitialised indices and counts along an axis for 8-bit data) the
cases are pinned in ``test_known_disagreements`` or compared on what the plugin gets right.
"""

import functools
from typing import Any

import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset10 as ov_opset10
import pytest
from openvino import op as ov_op

from app.ops.declaration import SplitPlan
from app.ops.errors import SpecError
from app.ops.unique import OP, unique, unique_plan
from tests.cases import DATA_TYPES, make_data, raw
from tests.ops.movement_support import BENCHMARK_DTYPES, BenchmarkCase, plugin_model, short
from tests.support import assert_same_bits

SEED = 20261128
DIFFERENTIAL_CASES = 200
_BFLOAT16 = np.dtype("bfloat16")


def _is_nan(value: Any) -> bool:
    return bool(np.isnan(np.float64(value))) if value.dtype.kind not in "biu" else False


def reference(data: npt.NDArray[Any], axis: int | None, sort: bool) -> tuple[Any, ...]:
    """The spec read element by element: items (elements or slices) are the same when every
    value compares equal (IEEE: -0.0 == 0.0, NaN equals nothing)."""
    items = (
        list(data.reshape(-1))
        if axis is None
        else [np.take(data, k, axis=axis) for k in range(data.shape[axis])]
    )
    flat = [np.asarray(item).reshape(-1) for item in items]
    groups: list[int] = []  # each unique item's first index
    inverse = []
    for k, item in enumerate(flat):
        for g, first in enumerate(groups):
            if item.size == 0 or all(bool(a == b) for a, b in zip(item, flat[first], strict=True)):
                inverse.append(g)
                break
        else:
            groups.append(k)
            inverse.append(len(groups) - 1)
    counts = [inverse.count(g) for g in range(len(groups))]
    order = list(range(len(groups)))
    if sort:

        def key(g: int) -> tuple[Any, ...]:
            return tuple((1, 0) if _is_nan(v) else (0, int(v) if v.dtype.kind in "biu" else
                         float(v)) for v in flat[groups[g]])  # fmt: skip

        order.sort(key=key)
    rank = {g: r for r, g in enumerate(order)}
    firsts = [groups[g] for g in order]
    if axis is None:
        values = raw(np.ascontiguousarray(data)).reshape(-1)[firsts].view(data.dtype)
    else:
        values = np.take(raw(np.ascontiguousarray(data)), firsts, axis=axis).view(data.dtype)
    return values, firsts, [rank[g] for g in inverse], [counts[g] for g in order]


def check(data: Any, axis: int | None = None, sort: bool = True, index: str = "i64",
          count: str = "i64") -> tuple[npt.NDArray[Any], ...]:  # fmt: skip
    data = np.asarray(data)
    got = unique(data, None if axis is None else np.array(axis), sort, index, count)
    values, firsts, inverse, counts = reference(data, None if axis is None else axis % data.ndim,
                                                sort)  # fmt: skip
    assert_same_bits(got[0], values)
    assert got[1].dtype == got[2].dtype == np.dtype({"i64": np.int64, "i32": np.int32}[index])
    assert got[3].dtype == np.dtype({"i64": np.int64, "i32": np.int32}[count])
    assert got[1].tolist() == firsts
    assert got[2].tolist() == inverse
    assert got[3].tolist() == counts
    plan = unique_plan(data, None if axis is None else np.array(axis), sort, index, count)
    for output, bound in zip(got, plan.bounds, strict=True):
        assert output.ndim == len(bound)
        assert all(have <= most for have, most in zip(output.shape, bound, strict=True))
    return got


# ------------------------------------------------------------------------------------------------
# The spec's examples (3x3 float32 data; shapes and types only, no values given)

_DATA = np.array([[1, 2, 1], [1, 2, 1], [3, 1, 2]], np.float32)


def test_example_1_axis_zero_unsorted_i32_indices() -> None:
    got = check(_DATA, 0, False, "i32", "i64")
    assert got[0].tolist() == [[1, 2, 1], [3, 1, 2]]  # [-1, 3]
    assert [a.dtype.name for a in got] == ["float32", "int32", "int32", "int64"]
    assert got[2].shape == (3,)


def test_example_2_flattened_defaults() -> None:
    got = check(_DATA)
    assert got[0].tolist() == [1, 2, 3]
    assert [a.dtype.name for a in got] == ["float32", "int64", "int64", "int64"]
    assert got[2].shape == (9,)
    assert got[3].tolist() == [5, 3, 1]


def test_example_3_flattened_unsorted_i32_everywhere() -> None:
    got = check(_DATA, None, False, "i32", "i32")
    assert [a.dtype.name for a in got] == ["float32", "int32", "int32", "int32"]
    assert got[1].tolist() == [0, 1, 6]


# ------------------------------------------------------------------------------------------------
# Properties


def test_against_numpy_unique() -> None:
    rng = np.random.default_rng(5)
    for dtype in (np.int8, np.uint16, np.int64, np.float64):
        data = rng.integers(0, 7, (4, 5, 3)).astype(dtype)
        values, first, inverse, counts = unique(data)
        expected = np.unique(data, return_index=True, return_inverse=True, return_counts=True)
        for have, want in zip((values, first, inverse, counts), expected, strict=True):
            np.testing.assert_array_equal(have, want.reshape(-1))
        for axis in range(3):
            values, first, inverse, counts = unique(data, np.array(axis))
            expected = np.unique(data, True, True, True, axis=axis)
            for have, want in zip((values, first, inverse, counts), expected, strict=True):
                np.testing.assert_array_equal(have, want.reshape(have.shape))


@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
def test_every_element_type_bit_exact(dtype: np.dtype[Any]) -> None:
    rng = np.random.default_rng(6)
    data = make_data(rng, dtype, (5, 4), strided=True)
    data = np.concatenate([data, data[:2]])  # repeats, slices included
    for sort in (True, False):
        check(data, None, sort)
        check(data, 0, sort)
        check(data, -1, sort, "i32", "i32")
    if dtype.itemsize > 1:
        swapped = data.astype(dtype.newbyteorder(">"))
        assert_same_bits(unique(swapped)[0], unique(data)[0])


def test_signed_zeros_are_one_element_and_nans_each_their_own() -> None:
    nan = np.float32("nan")
    data = np.array([-0.0, 1.0, nan, 0.0, nan, -1.0], np.float32)
    values, first, inverse, counts = check(data)
    assert raw(values).tolist()[:3] == raw(np.array([-1.0, -0.0, 1.0], np.float32)).tolist()
    assert np.isnan(values[3:]).all() and first.tolist() == [5, 0, 1, 2, 4]
    assert counts.tolist() == [1, 2, 1, 1, 1]
    assert inverse.tolist() == [1, 2, 3, 1, 4, 0]


def test_unsigned_values_sort_as_unsigned() -> None:
    data = np.array([2**63, 1, 2**64 - 1, 1], np.uint64)
    assert check(data)[0].tolist() == [1, 2**63, 2**64 - 1]


def test_rank_0_and_empty() -> None:
    values, _, _, counts = check(np.float16(2.5))
    assert values.tolist() == [2.5] and counts.tolist() == [1]
    got = check(np.zeros((0, 3), np.int32))
    assert got[0].shape == (0,) and got[3].shape == (0,)
    got = check(np.zeros((0, 3), np.int32), 1)
    assert got[0].shape == (0, 1) and got[2].tolist() == [0, 0, 0]
    got = check(np.zeros((2, 0), np.int32), 0)
    assert got[0].shape == (1, 0) and got[3].tolist() == [2]
    got = check(np.zeros((0, 3), np.int32), 0)
    assert got[0].shape == (0, 3)


def test_bounds_before_anything_is_built() -> None:
    data = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), (10**6, 10**4), (0, 0))
    plan = unique_plan(data, np.array([1]))
    assert plan.bounds == ((10**6, 10**4), (10**4,), (10**4,), (10**4,))
    with pytest.raises(SpecError) as error:
        unique_plan(np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), (2**31,), (0,)),
                    None, True, "i32")  # fmt: skip
    assert error.value.field == "index_element_type"


# ------------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    ("data", "axis", "attributes", "field"),
    [
        (np.zeros(3), np.array(1), {}, "axis"),
        (np.zeros(3), np.array(-2), {}, "axis"),
        (np.zeros(()), np.array(0), {}, "axis"),
        (np.zeros((2, 2)), np.array([0, 1]), {}, "axis"),
        (np.zeros((2, 2)), np.array([[0]]), {}, "axis"),
        (np.zeros((2, 2)), np.array(0, np.int8), {}, "axis"),
        (np.zeros((2, 2)), np.array(0.0), {}, "axis"),
        (np.zeros(3), None, {"index_element_type": "i16"}, "index_element_type"),
        (np.zeros(3), None, {"count_element_type": "u64"}, "count_element_type"),
        (np.zeros(3), None, {"sort": "yes"}, "sorted"),
    ],
)
def test_refusals(data: Any, axis: Any, attributes: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as error:
        unique(data, axis, **attributes)
    assert error.value.field == field
    assert field in error.value.message


# ------------------------------------------------------------------------------------------------
# Differential against OpenVINO's CPU plugin

_PLUGIN_TYPES = tuple(np.dtype(t) for t in ("int8", "uint8", "int32", "int64", "float32"))
_OV = {"int8": ov.Type.i8, "uint8": ov.Type.u8, "int32": ov.Type.i32, "int64": ov.Type.i64,
       "float32": ov.Type.f32, "uint32": ov.Type.u32}  # fmt: skip


@functools.cache
def compiled(dtype: str, rank: int, axis: int | None, sort: bool, index: str, count: str) -> Any:
    data = ov_op.Parameter(_OV[dtype], ov.PartialShape([-1] * rank))
    node = ov_opset10.unique(
        data, None if axis is None else ov_op.Constant(np.array([axis])), sort, index, count
    )
    return ov.Core().compile_model(ov.Model(node.outputs(), [data]), "CPU")


def plugin(data: npt.NDArray[Any], axis: int | None, sort: bool, index: str, count: str) -> Any:
    answer = compiled(data.dtype.name, data.ndim, axis, sort, index, count)(data)
    return [np.asarray(answer[k]) for k in range(4)]


def random_case(i: int) -> tuple[npt.NDArray[Any], int | None, bool, str, str]:
    rng = np.random.default_rng((SEED, i))
    dtype = _PLUGIN_TYPES[i % len(_PLUGIN_TYPES)]
    rank = 1 + i // 5 % 3
    shape = tuple(int(d) for d in rng.integers(1, 5, rank))
    data = rng.integers(0 if dtype.kind == "u" else -3, 4, shape).astype(dtype)
    axis = None if rng.random() < 0.4 else int(rng.integers(-rank, rank))
    return data, axis, bool(i // 15 % 2), ("i64", "i32")[i % 2], ("i64", "i32")[i // 2 % 2]


CASES = [random_case(i) for i in range(DIFFERENTIAL_CASES)]


def test_differential_cases_cover_what_they_should() -> None:
    assert {case[0].dtype for case in CASES} == set(_PLUGIN_TYPES)
    assert {case[1] is None for case in CASES} == {True, False}
    assert {case[2] for case in CASES} == {True, False}
    assert {(case[3], case[4]) for case in CASES} == {(a, b) for a in ("i32", "i64")
                                                      for b in ("i32", "i64")}  # fmt: skip


def test_unique_matches_openvino() -> None:
    failures = []
    for number, (data, axis, sort, index, count) in enumerate(CASES):
        got = check(data, axis, sort, index, count)
        answer = plugin(data, axis, sort, index, count)
        if data.dtype.itemsize == 1 and axis is not None:
            # Along an axis with 8-bit data the plugin's indices and counts are uninitialised
            # memory (a disagreement docs/contract.md lists): its unique slices are compared.
            got, answer = got[:1], answer[:1]
        for have, theirs in zip(got, answer, strict=True):
            if have.dtype != theirs.dtype or not np.array_equal(have, theirs):
                failures.append(number)
                break
    assert not failures, f"OpenVINO disagreed on {failures} of {len(CASES)}"


def test_known_disagreements() -> None:
    """Reproducers of the plugin's disagreements with the spec (docs/contract.md lists them)."""
    # uint32 values at or above 2**31 are sorted as if signed: [2**31, 1] comes back as is.
    data = np.array([1, 2**31], np.uint32)
    assert plugin(data, None, True, "i64", "i64")[0].tolist() == [2**31, 1]
    assert unique(data)[0].tolist() == [1, 2**31]
    # Sorting with NaNs: the plugin's sort breaks (NaN compares false), values out of order.
    nan = np.float32("nan")
    data = np.array([1.0, nan, -0.0, 0.0, nan, -1.0], np.float32)
    theirs = plugin(data, None, True, "i64", "i64")[0]
    ours = unique(data)[0]
    assert not np.array_equal(raw(theirs), raw(ours))
    assert ours[:3].tolist() == [-1.0, 0.0, 1.0]


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Unique of values 0..99 in a tensor of ``nbytes`` (not a pure movement), float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """Unique of values 0..99 in a tensor of ``nbytes`` (a sort: not a pure movement)."""
    data = (np.arange(nbytes // np.dtype(dtype).itemsize) * 7919 % 100).astype(dtype)

    def model() -> Any:
        return plugin_model(ov_opset10.unique, data)

    attributes = {"sorted": True, "index_element_type": "i64", "count_element_type": "i64"}
    label = f"flattened, {short(dtype)}"
    return BenchmarkCase("unique", label, {"data": data}, attributes, data.dtype,
                         data.nbytes + 8 * data.size, model)  # fmt: skip


@pytest.mark.parametrize("name", sorted(OP.examples))
def test_declared_examples(name: str) -> None:
    request = OP.examples[name]["value"]
    got = check(np.array(request["data"], request["dtype"]), request.get("axis", [None])[0],
                request.get("sorted", True), request.get("index_element_type", "i64"),
                request.get("count_element_type", "i64"))  # fmt: skip
    assert [output.tolist() for output in got] == OP.examples[name]["x-expected-output"]


def test_the_plan_reserves_the_bounds_and_the_answer_shrinks() -> None:
    data = np.array([[1, 2, 1], [1, 2, 1]], np.int16)
    plan = OP.plan({"data": data}, OP.attribute_defaults())
    assert isinstance(plan, SplitPlan) and plan.bounded
    assert plan.output_shapes == ((6,), (6,), (6,), (6,))
    assert [output.shape for output in plan.run()] == [(2,), (2,), (6,), (2,)]
    assert OP.output_types({"data": data}, OP.attribute_defaults(), 4) == (
        np.dtype(np.int16),
        np.dtype(np.int64),
        np.dtype(np.int64),
        np.dtype(np.int64),
    )


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.bool_])
@pytest.mark.parametrize("size", [1, 7, 5000, 70000])
def test_values_counted_in_a_table_give_what_the_sort_gives(
    dtype: Any, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Booleans and integers of one or two bytes are grouped by a table of one slot a value (no
    sort): every output, sorted or in order of first occurrence, i32 or i64 indices, the same
    bits as the sort's, a value first seen at the very end included."""
    from app.ops import unique as unique_module  # noqa: PLC0415

    counted_calls: list[int] = []
    original = unique_module._counted_groups

    def watched(values: Any, plan: Any) -> Any:
        counted_calls.append(values.size)
        return original(values, plan)

    monkeypatch.setattr(unique_module, "_counted_groups", watched)
    rng = np.random.default_rng(size)
    if dtype == np.bool_:
        data = rng.integers(0, 2, size).astype(bool)
    else:
        info = np.iinfo(dtype)
        data = rng.integers(max(info.min, -40), min(info.max, 40) + 1, size).astype(dtype)
        data[-1] = info.max  # occurs once, last: the search for first places goes to the end
    for sort in (True, False):
        for index_type in ("i32", "i64"):
            for axis in (None, np.array(0)):
                plan = unique_plan(data, axis, sort, index_type, "i64")
                counted = unique_module.unique_planned(data, plan)
                with monkeypatch.context() as patch:
                    patch.setattr(unique_module, "_countable", lambda _: False)
                    sorted_ = unique_module.unique_planned(data, plan)
                for ours, theirs in zip(counted, sorted_, strict=True):
                    assert_same_bits(ours, theirs)
    assert counted_calls == [size] * 8  # the table's way each time, the sort's when told


def test_a_true_byte_other_than_one_is_true_in_the_table() -> None:
    """A bool byte of 2 is true (as NumPy and OpenVINO read it): one group with the 1s."""
    data = np.frombuffer(bytes([0, 2, 1, 0, 255]), dtype=np.bool_)
    values, first, inverse, counts = unique(data)
    assert values.tolist() == [False, True]
    assert first.tolist() == [0, 1] and inverse.tolist() == [0, 1, 1, 0, 1]
    assert counts.tolist() == [2, 3]


#: The types whose keys are packed with their positions when they are not counted in a table.
PACKED_TYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16",
                "float32")  # fmt: skip


@pytest.mark.parametrize("dtype", [np.dtype(name) for name in PACKED_TYPES], ids=str)
def test_keys_packed_with_their_positions_give_what_the_index_sort_gives(
    dtype: np.dtype[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Elements of at most 4 bytes are sorted as 64-bit words of their key and position: every
    output, sorted or in order of first occurrence, the same bits as the stable sort of indices
    by 64-bit keys, on bits of every kind (NaNs of every payload and sign, both zeros,
    infinities, subnormals, the extremes) with many repeats."""
    from app.ops import unique as unique_module  # noqa: PLC0415

    packed_calls: list[int] = []
    original = unique_module._packed_order

    def watched(values: Any) -> Any:
        packed_calls.append(values.size)
        return original(values)

    monkeypatch.setattr(unique_module, "_packed_order", watched)
    monkeypatch.setattr(unique_module, "_countable", lambda _: False)
    monkeypatch.setattr(unique_module, "_hashed_groups", lambda *_: None)
    rng = np.random.default_rng(dtype.itemsize)
    some = make_data(rng, dtype, (64,), False)
    data = some[rng.integers(0, some.size, 3000)]  # each value many times, in no order
    for sort in (True, False):
        plan = unique_plan(data, None, sort, "i64", "i64")
        packed = unique_module.unique_planned(data, plan)
        with monkeypatch.context() as patch:
            patch.setattr(unique_module, "_POSITIONS", 0)
            by_index = unique_module.unique_planned(data, plan)
        for ours, theirs in zip(packed, by_index, strict=True):
            assert_same_bits(ours, theirs)
    assert packed_calls == [data.size] * 2


# --- The compiled ways (a table of slots, a hash table) against the sort and NumPy's ways -------


def _three_ways(
    data: npt.NDArray[Any], axis: Any, sort: bool, index_type: str, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[npt.NDArray[Any], ...]]:
    """Unique of ``data`` three ways: as it runs (the compiled loops), with NumPy's stand-ins
    (the loops not compiled yet), and by the sort of keys (neither the table nor the hash)."""
    from app.ops import loops  # noqa: PLC0415
    from app.ops import unique as unique_module  # noqa: PLC0415

    plan = unique_plan(data, axis, sort, index_type, "i64")
    assert loops.ready_module() is not None
    compiled = unique_module.unique_planned(data, plan)
    with loops.numpy_stand_ins():
        stand_in = unique_module.unique_planned(data, plan)
    with monkeypatch.context() as patch:
        patch.setattr(unique_module, "_countable", lambda _: False)
        patch.setattr(unique_module, "_hashed_groups", lambda *_: None)
        by_sort = unique_module.unique_planned(data, plan)
    return [compiled, stand_in, by_sort]


def _watch_hash(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each call of ``_hashed_groups`` answered (True) or left the groups to the sort."""
    from app.ops import unique as unique_module  # noqa: PLC0415

    answered: list[bool] = []
    original = unique_module._hashed_groups

    def watched(values: Any, plan: Any) -> Any:
        groups = original(values, plan)
        answered.append(groups is not None)
        return groups

    monkeypatch.setattr(unique_module, "_hashed_groups", watched)
    return answered


@pytest.mark.parametrize("prefix", [None, 7], ids=["groups-first-found-early", "found-late"])
@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
def test_compiled_ways_give_the_bits_of_the_sort_and_of_numpy(
    dtype: np.dtype[Any], prefix: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every element type, sorted or in order of first occurrence, i32 or i64 indices, axis
    left out or given (1-D data, and slices of one element): the compiled table or hash table,
    NumPy's stand-ins and the sort give the same bits, on data with every special bit pattern
    (NaNs of every payload and sign, both zeros, infinities, subnormals, extremes) repeated.
    With a prefix of 7 elements, the hash table meets groups (and NaNs) it has not seen while
    it writes the groups, and starts again."""
    from app.ops import unique as unique_module  # noqa: PLC0415

    if prefix is not None:
        monkeypatch.setattr(unique_module, "_HASH_PREFIX", prefix)
    answered = _watch_hash(monkeypatch)
    rng = np.random.default_rng(dtype.itemsize + 17)
    some = make_data(rng, dtype, (40,), strided=True)
    # Each of its values once (NaNs among them: groups of their own), then its other values
    # many times: fewer groups than the hash table holds.
    repeated = np.flatnonzero(~np.array([_is_nan(value) for value in some]))
    data = np.concatenate([some, some[rng.choice(repeated, 2000)]])
    hashed = dtype.kind not in "biu" or dtype.itemsize > 2
    calls = 0
    for sort in (True, False):
        for index_type in ("i32", "i64"):
            for shaped, axis in ((data, None), (data, np.array(0)), (data[:, None], np.array(0))):
                compiled, stand_in, by_sort = _three_ways(
                    shaped, axis, sort, index_type, monkeypatch
                )
                calls += 2 if hashed else 0
                for ours, numpy_way, theirs in zip(compiled, stand_in, by_sort, strict=True):
                    assert_same_bits(ours, theirs)
                    assert_same_bits(numpy_way, theirs)
    # The hash table answered as it runs, and left the groups to the sort with the stand-ins.
    assert answered == [True, False] * (calls // 2)
    small = data[:9]
    assert_same_bits(unique(small)[2], check(small)[2])


def test_nans_and_zeros_through_the_hash_table() -> None:
    """Each NaN its own group, after +inf, in the order they occur (sorted) or where they first
    occur (not sorted); -0.0 and +0.0 one group given with the bits of the first."""
    nan = np.float64("nan")
    for dtype in (np.float16, _BFLOAT16, np.float32, np.float64):
        data = np.array([nan, 0.0, -np.inf, -0.0, nan, np.inf, 0.0, -nan, 2.5, -0.0], dtype)
        values, first, inverse, counts = check(data)
        assert first.tolist() == [2, 1, 8, 5, 0, 4, 7]
        assert raw(values[1:2]).tolist() == raw(np.array([0.0], dtype)).tolist()
        assert inverse.tolist() == [4, 1, 0, 1, 5, 3, 1, 6, 2, 1]
        assert counts.tolist() == [1, 4, 1, 1, 1, 1, 1]
        values, first, inverse, counts = check(data[1:], None, False)
        assert raw(values[0:1]).tolist() == raw(np.array([0.0], dtype)).tolist()
        assert first.tolist() == [0, 1, 3, 4, 6, 7]
        assert inverse.tolist() == [0, 1, 0, 2, 3, 0, 4, 5, 0]


@pytest.mark.parametrize("prefix", [None, 5], ids=["groups-first-found-early", "found-late"])
@pytest.mark.parametrize("sort", [True, False])
def test_more_groups_than_the_hash_table_holds_are_sorted(
    sort: bool, prefix: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MOST_HASHED_GROUPS groups (found only at the last element, or many NaNs), the hash
    table gives up and the sort answers, with the same bits; with one group fewer, it answers
    (its groups found in the first elements, or some of them after they were counted)."""
    from app.ops import unique as unique_module  # noqa: PLC0415

    if prefix is not None:
        monkeypatch.setattr(unique_module, "_HASH_PREFIX", prefix)
    answered = _watch_hash(monkeypatch)
    monkeypatch.setattr(unique_module, "MOST_HASHED_GROUPS", 8)
    for dtype in (np.int32, np.uint64, np.float32, np.float64):
        data = np.tile(np.arange(8).astype(dtype), 50)
        data = np.append(data, dtype(8))  # a ninth group, at the very end
        for shaped in (data, data[:-1]):
            compiled, stand_in, by_sort = _three_ways(shaped, None, sort, "i64", monkeypatch)
            for ours, numpy_way, theirs in zip(compiled, stand_in, by_sort, strict=True):
                assert_same_bits(ours, theirs)
                assert_same_bits(numpy_way, theirs)
    nans = np.full(9, np.nan, np.float32)  # nine NaNs: nine groups
    assert check(nans, None, sort)[3].tolist() == [1] * 9
    assert answered == [False, False, True, False] * 4 + [False]
    monkeypatch.undo()
    distinct = np.random.default_rng(3).permutation(70000).astype(np.int32)  # past 2**16 groups
    answered = _watch_hash(monkeypatch)
    values, first, inverse, counts = unique(distinct, None, sort)
    assert answered == [False]
    expected = np.arange(70000) if sort else distinct
    assert values.tolist() == expected.tolist() and counts.tolist() == [1] * 70000
    assert distinct[first].tolist() == values.tolist()
    assert values[inverse].tolist() == distinct.tolist()


def test_one_element_and_empty_through_the_compiled_ways() -> None:
    for dtype in DATA_TYPES:
        one = np.ones(1, dtype)
        values, first, inverse, counts = check(one)
        assert first.tolist() == [0] and inverse.tolist() == [0] and counts.tolist() == [1]
        assert_same_bits(values, one)
        got = check(np.zeros(0, dtype), None, False, "i32")
        assert [output.size for output in got] == [0, 0, 0, 0]


@pytest.mark.parametrize("dtype", [np.int8, np.float32, np.float64])
def test_the_compiled_ways_hold_no_more_than_the_declared_workspace(dtype: Any) -> None:
    """What the table's or the hash table's way holds (traced) stays within the workspace the op
    declares and its outputs' bounds, with the most groups the hash table takes."""
    import tracemalloc  # noqa: PLC0415

    from app.ops.unique import MOST_HASHED_GROUPS, unique_planned, unique_workspace_bytes  # noqa: PLC0415

    rng = np.random.default_rng(4)
    for size, groups in ((300, 300), (100_000, MOST_HASHED_GROUPS), (100_000, 5)):
        data = rng.permutation(np.arange(size) % groups).astype(dtype)
        plan = unique_plan(data)
        bounds = sum(int(np.prod(shape)) * 8 for shape in plan.bounds)
        tracemalloc.start()
        try:
            unique_planned(data, plan)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= bounds + unique_workspace_bytes(data, plan)
