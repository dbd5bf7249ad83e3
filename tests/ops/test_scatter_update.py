"""ScatterUpdate-3: the spec's examples, its rules, every element type, and OpenVINO's CPU plugin.

The differential part generates ``DIFFERENTIAL_CASES`` legal cases from a fixed seed (every
element type, data ranks 1-4, every axis in both signs and every axis type, indices of every
integer type and of ranks 0-2, repeated indices, empty dimensions, strided inputs, NaN payloads
and -0.0). OpenVINO's CPU plugin is given *positions* instead of values: data 1..n and updates
-1..-m (int32), so its output says where each element came from, and the expected output is
taken from the case's own bits (bit-exact for every type). Indices go to it as int64 (every
legal value fits). It is never given an out-of-bounds index: a negative one crashes its
process (``free(): invalid next size``). Cases with an empty tensor are checked against an
independent loop over the spec's formula only.
"""

import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset1 as ov_opset1
import openvino.opset3 as ov_opset3
import pytest
from openvino import op as ov_op

from app.ops.errors import SpecError
from app.ops.scatter_update import OP, scatter_update, scatter_update_plan
from tests.cases import DATA_TYPES, INDEX_TYPES, make_data, raw, special_bits
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    BenchmarkCase,
    constant,
    plugin_model,
    short,
    square,
)
from tests.support import assert_same_bits

SEED = 20261130
DIFFERENTIAL_CASES = 300


def reference(
    data: npt.NDArray[Any], indices: npt.NDArray[Any], updates: npt.NDArray[Any], axis: Any
) -> Any:
    """The spec's formula applied index by index in row-major order (so the last repeated
    index wins), on the raw bits."""
    out = raw(data).copy()
    source = raw(updates.astype(data.dtype))
    value = int(np.asarray(axis).item())
    value = value + data.ndim if value < 0 else value
    before: tuple[Any, ...] = (slice(None),) * value
    for place in np.ndindex(*indices.shape):
        out[(*before, int(indices[place]))] = source[(*before, *place)]
    return out


def check(data: Any, indices: Any, updates: Any, axis: Any) -> npt.NDArray[Any]:
    data, indices, updates = np.asarray(data), np.asarray(indices), np.asarray(updates)
    got = scatter_update(data, indices, updates, axis)
    assert got.dtype == data.dtype
    np.testing.assert_array_equal(raw(got), reference(data, indices, updates, axis))
    return got


@pytest.mark.parametrize("name", sorted(OP.examples))
def test_declared_examples(name: str) -> None:
    request = dict(OP.examples[name]["value"])
    dtype = request.get("dtype")
    got = check(
        np.array(request["data"], dtype=dtype),
        np.array(request["indices"]),
        np.array(request["updates"], dtype=dtype),
        np.array(request["axis"]),
    )
    assert got.tolist() == OP.examples[name]["x-expected-output"]


def test_example_1_shapes() -> None:
    data = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (1000, 256, 10, 15), (0,) * 4)
    updates = np.lib.stride_tricks.as_strided(
        np.zeros(1, np.float32), (1000, 125, 20, 10, 15), (0,) * 5
    )
    plan = scatter_update_plan(data, np.zeros((125, 20), np.int64), updates, np.array([1]))
    assert plan.output_shape == (1000, 256, 10, 15)


def test_the_three_axis_0_forms() -> None:
    data = np.arange(12).reshape(4, 3)
    assert check(data, np.int64(2), [-1, -2, -3], 0)[2].tolist() == [-1, -2, -3]
    check(data, [3, 0], [[7, 7, 7], [8, 8, 8]], 0)
    check(data, [[3, 0], [1, 2]], -np.arange(12).reshape(2, 2, 3), 0)


def test_inner_axes() -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(0, 100, (3, 4, 5))
    for axis in (1, 2, -1, -2):
        normal = axis % 3
        indices = rng.permutation(data.shape[normal])[:2].reshape(2, 1)
        shape = data.shape[:normal] + indices.shape + data.shape[normal + 1 :]
        check(data, indices, rng.integers(-100, 0, shape), np.array([axis], dtype=np.int8))


def test_repeated_indices_last_wins() -> None:
    assert check([0, 0, 0, 0], [[3, 1], [3, 0]], [[5, 6], [7, 8]], 0).tolist() == [8, 6, 0, 7]
    data = np.zeros((2, 5))
    out = check(data, [4, 4, 4, 1], [[1.0, 2, 3, 4], [5, 6, 7, 8]], 1)
    assert out.tolist() == [[0, 4, 0, 0, 3], [0, 8, 0, 0, 7]]


def test_large_repeated_indices_in_chunks() -> None:
    rng = np.random.default_rng(2)
    data = rng.integers(0, 255, (3000, 50), dtype=np.uint8)
    indices = rng.integers(0, 50, 700)
    updates = rng.integers(0, 255, (3000, 700), dtype=np.uint8)
    check(data, indices, updates, 1)


@pytest.mark.parametrize("inner", [1, 2, 3, 4, 8, 31, 32, 33, 100])
@pytest.mark.parametrize("repeats", [False, True])
def test_every_slice_width(inner: int, repeats: bool) -> None:
    # Slices of 1-8 bytes move as unsigned integers, of up to 255 as raw bytes, longer ones whole.
    rng = np.random.default_rng(inner)
    data = rng.integers(0, 2**63, (3, 9, inner), dtype=np.int64).view(np.float64)
    indices = rng.integers(0, 9, 12) if repeats else rng.permutation(9)[:5]
    updates = rng.integers(0, 2**63, (3, indices.size, inner), dtype=np.int64).view(np.float64)
    check(data, indices, updates, 1)
    check(data.view(np.uint8), indices, updates.view(np.uint8), 1)


@pytest.mark.parametrize("index_type", INDEX_TYPES, ids=lambda t: t.name)
def test_every_index_and_axis_type(index_type: np.dtype[Any]) -> None:
    data = np.arange(12.0).reshape(3, 4)
    check(data, np.array([3, 0], dtype=index_type), [[1.0, 2.0]] * 3, np.array(1, index_type))
    swapped = np.array([2], dtype=index_type.newbyteorder(">"))
    check(data, swapped, [[9.0, 9.0, 9.0, 9.0]], np.array([0], dtype=index_type))


@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
def test_every_element_type_bit_exact(dtype: np.dtype[Any]) -> None:
    specials = special_bits(dtype)
    size = max(8, specials.size)
    bits = np.resize(specials, size * 4)
    values = bits.astype(bool) if dtype.kind == "b" else bits.view(dtype)
    data, updates = values[: size * 2].reshape(2, size), values[size * 2 :][::-1].reshape(2, size)
    got = check(data, [1, 0], updates, 0)
    assert_same_bits(got, updates[::-1])


def test_byte_orders_and_strides() -> None:
    data = np.arange(20, dtype=">f8").reshape(4, 5)[:, ::2]
    updates = np.array([[-0.0, np.nan, 1.5]], dtype="<f8")
    got = check(data, [2], updates, 0)
    assert_same_bits(got[2], updates[0].astype(">f8"))
    out = np.zeros((4, 6), dtype=">f8")[:, ::2]
    assert scatter_update(data, [2], updates, 0, out=out) is out
    np.testing.assert_array_equal(out, got)


def test_empty_dimensions() -> None:
    check(np.zeros((0, 3)), np.zeros(0, np.int64), np.zeros((0, 3)), 0)
    check(np.zeros((2, 3)), np.zeros((0,), np.int64), np.zeros((0, 3)), 0)
    check(np.zeros((0, 3)), [1, 2], np.zeros((0, 2)), 1)
    check(np.zeros((2, 0)), [1], np.zeros((1, 0)), 0)


def test_input_is_not_modified() -> None:
    data = np.arange(4)
    scatter_update(data, [1], [9], 0)
    assert data.tolist() == [0, 1, 2, 3]


# ------------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    ("data", "indices", "updates", "axis", "field"),
    [
        (np.zeros(()), np.int64(0), np.zeros(()), 0, "axis"),  # no axis of a scalar
        (np.zeros(3), [0], np.zeros(1), 1, "axis"),
        (np.zeros(3), [0], np.zeros(1), -2, "axis"),
        (np.zeros(3), [0], np.zeros(1), np.array(2**64 - 1, np.uint64), "axis"),
        (np.zeros(3), [0], np.zeros(1), np.array([0, 0]), "axis"),
        (np.zeros(3), [0], np.zeros(1), np.array(0.0), "axis"),
        (np.zeros(3), np.zeros(1, np.float32), np.zeros(1), 0, "indices"),
        (np.zeros(3), [0], np.zeros(1, np.float32), 0, "updates"),  # not data's type
        (np.zeros(3), [0], np.zeros(2), 0, "updates"),
        (np.zeros((2, 3)), [0], np.zeros((1, 3, 1)), 0, "updates"),  # wrong rank
        (np.zeros((2, 3)), [[0]], np.zeros((2, 1)), 1, "updates"),
        (np.zeros(3), [3], np.zeros(1), 0, "indices"),
        (np.zeros(3), [-1], np.zeros(1), 0, "indices"),
        (np.zeros(3), [0, -(2**63)], np.zeros(2), 0, "indices"),
        (np.zeros(3), np.array([2**63], np.uint64), np.zeros(1), 0, "indices"),
        (np.zeros(3), np.array([2**64 - 1], np.uint64), np.zeros(1), 0, "indices"),
        (np.zeros((0, 3)), [0], np.zeros((1, 3)), 0, "indices"),
    ],
)
def test_refusals(data: Any, indices: Any, updates: Any, axis: Any, field: str) -> None:
    with pytest.raises(SpecError) as error:
        scatter_update(data, np.asarray(indices), updates, axis)
    assert error.value.field == field


# ------------------------------------------------------------------------------------------------
# Differential against OpenVINO's CPU plugin


@functools.cache
def compiled(data_rank: int, indices_rank: int, axis: int) -> Any:
    data = ov_op.Parameter(ov.Type.i32, ov.PartialShape([-1] * data_rank))
    indices = ov_op.Parameter(ov.Type.i64, ov.PartialShape([-1] * indices_rank))
    updates = ov_op.Parameter(ov.Type.i32, ov.PartialShape([-1] * (data_rank + indices_rank - 1)))
    node = ov_opset3.scatter_update(data, indices, updates, ov_op.Constant(np.array(axis)))
    model = ov.Model([node], [data, indices, updates])
    # One thread: repeated indices are written in the spec's order (several threads may write
    # them in any order, and a loaded machine makes them do so).
    return ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 1})


Case = tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]


def random_case(i: int) -> Case:
    rng = np.random.default_rng((SEED, i))
    dtype = DATA_TYPES[i % len(DATA_TYPES)]
    rank = 1 + i // len(DATA_TYPES) % 4
    lengths, weights = [0, 1, 2, 3, 4, 5, 6], [0.03, 0.2, 0.27, 0.2, 0.12, 0.1, 0.08]
    data_shape = tuple(int(d) for d in rng.choice(lengths, size=rank, p=weights))
    axis = int(rng.integers(-rank, rank))
    normal = axis % rank
    s = data_shape[normal]
    indices_shape = tuple(
        int(d) for d in rng.choice(lengths, size=int(rng.integers(0, 3)), p=weights)
    )
    if s == 0:
        indices_shape = (0, *indices_shape)
    index_type = INDEX_TYPES[int(rng.integers(0, len(INDEX_TYPES)))]
    count = math.prod(indices_shape)
    if rng.random() < 0.5 and count <= s:
        values = rng.permutation(s)[:count]  # distinct
    else:
        values = rng.integers(0, max(s, 1), count)  # repeats likely
    indices = values.astype(index_type).reshape(indices_shape)
    axis_type = INDEX_TYPES[int(rng.integers(0, len(INDEX_TYPES)))]
    if axis < 0 and axis_type.kind == "u":
        axis_type = np.dtype(np.int8)
    axis_array = np.array(axis if rng.random() < 0.5 else [axis], dtype=axis_type)
    updates_shape = data_shape[:normal] + indices_shape + data_shape[normal + 1 :]
    data = make_data(rng, dtype, data_shape, strided=bool(rng.random() < 0.2))
    updates = make_data(rng, dtype, updates_shape, strided=bool(rng.random() < 0.2))
    return data, indices, updates, axis_array


CASES = [random_case(i) for i in range(DIFFERENTIAL_CASES)]


def test_differential_cases_cover_what_they_should() -> None:
    assert {case[0].dtype for case in CASES} == set(DATA_TYPES)
    assert {case[1].dtype for case in CASES} == set(INDEX_TYPES)
    assert {case[1].ndim for case in CASES} == {0, 1, 2, 3}
    assert any(int(case[3].item()) < 0 for case in CASES)
    assert any(case[0].size == 0 for case in CASES)
    assert any(np.unique(case[1]).size < case[1].size for case in CASES)


def test_scatter_update_matches_openvino() -> None:
    sent = agreed = 0  # 259 sent, 259 agreed, 124 of them with repeated indices (seed 20261130)
    failures = []
    for number, (data, indices, updates, axis) in enumerate(CASES):
        got = scatter_update(data, indices, updates, axis)
        np.testing.assert_array_equal(
            raw(got), reference(data, indices, updates, axis), err_msg=f"case {number}"
        )
        if data.size == 0 or updates.size == 0:
            continue
        where = np.arange(1, data.size + 1, dtype=np.int32).reshape(data.shape)
        new = -np.arange(1, updates.size + 1, dtype=np.int32).reshape(updates.shape)
        normal = int(axis.item()) % data.ndim
        sent_indices = indices.astype(np.int64)
        if indices.ndim == 0:
            # The plugin takes no scalar indices: the equivalent one-element form.
            sent_indices, new = sent_indices.reshape(1), np.expand_dims(new, normal)
        model = compiled(data.ndim, sent_indices.ndim, int(axis.item()))
        answer = np.asarray(model([where, sent_indices, new])[0]).reshape(data.shape)
        sent += 1
        pool = np.concatenate([raw(updates).reshape(-1)[::-1], raw(data).reshape(-1)])
        # Position p > 0 is data's element p - 1; -q is updates' element q - 1.
        if answer.min(initial=0) >= -updates.size and answer.max(initial=0) <= data.size:
            theirs = pool[answer.reshape(-1) + updates.size - (answer.reshape(-1) > 0)]
            if np.array_equal(theirs.reshape(data.shape), raw(got)):
                agreed += 1
                continue
        failures.append(number)
    assert sent >= DIFFERENTIAL_CASES * 2 // 3
    assert not failures, f"OpenVINO disagreed on {failures} ({sent} sent, {agreed} agreed)"


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """ScatterUpdate of 16 rows of a matrix of ``nbytes`` (the copy dominates), float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """ScatterUpdate of 16 rows of a matrix of ``nbytes`` (the copy dominates)."""
    data = square(nbytes, dtype)
    indices = np.arange(16)
    updates = np.ones((16, data.shape[1]), dtype)

    def model() -> Any:
        import openvino.opset3 as ov_opset3  # noqa: PLC0415

        build = lambda p: ov_opset3.scatter_update(  # noqa: E731
            p, constant(indices), ov_opset1.constant(updates), constant(np.array(0))
        )
        return plugin_model(build, data)

    arrays = {"data": data, "indices": indices, "updates": updates, "axis": np.array(0)}
    return BenchmarkCase("scatter_update", f"16 rows, {short(dtype)}", arrays, {}, data.dtype,
                         2 * data.nbytes, model)  # fmt: skip
