"""Gather-8 kernel: the spec's examples, every rule of the spec, every element type."""

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from app.ops import SpecError, gather, gather_plan
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    BenchmarkCase,
    constant,
    plugin_model,
    short,
    square,
)
from tests.support import assert_same_bits

BATCHES = np.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
INDEX_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
ALL_TYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, ml_dtypes.bfloat16, np.float32, np.float64,
]  # fmt: skip


def test_example_1_default_batch_dims() -> None:
    assert gather([1, 2, 3, 4, 5], [0, 0, 4], 0).tolist() == [1, 1, 5]


def test_example_2_batch_dims_1() -> None:
    out = gather(BATCHES, [[0, 0, 4], [4, 0, 0]], 1, batch_dims=1)
    assert out.tolist() == [[1, 1, 5], [10, 6, 6]]


def test_example_3_batch_dims_2() -> None:
    data = np.arange(1, 21).reshape(2, 2, 5)
    indices = [[[0, 0, 4], [4, 0, 0]], [[1, 2, 4], [4, 3, 2]]]
    out = gather(data, indices, 2, batch_dims=2)
    assert out.tolist() == [[[1, 1, 5], [10, 6, 6]], [[12, 13, 15], [20, 19, 18]]]


def test_example_4_axis_greater_than_batch_dims() -> None:
    data = np.arange(1, 41).reshape(2, 1, 5, 4)
    out = gather(data, [[1, 2, 4], [4, 3, 2]], 2, batch_dims=1)
    assert out.shape == (2, 1, 3, 4)
    assert out.tolist() == [
        [[[5, 6, 7, 8], [9, 10, 11, 12], [17, 18, 19, 20]]],
        [[[37, 38, 39, 40], [33, 34, 35, 36], [29, 30, 31, 32]]],
    ]


def test_example_5_negative_batch_dims() -> None:
    out = gather(BATCHES, [[0, 0, 4], [4, 0, 0]], 1, batch_dims=-1)
    assert out.tolist() == [[1, 1, 5], [10, 6, 6]]


def test_example_6_negative_indices() -> None:
    assert gather([1, 2, 3, 4, 5], [0, -2, -1], 0).tolist() == [1, 4, 5]


def test_example_7_out_of_range_indices_give_zeros() -> None:
    assert gather([1, 2, 3, 4, 5], [3, 10, -20], 0).tolist() == [4, 0, 0]


def test_range_edges() -> None:
    data = np.arange(1, 6)
    assert gather(data, [-5, 4, -6, 5], 0).tolist() == [1, 5, 0, 0]


@pytest.mark.parametrize("index_type", INDEX_TYPES, ids=lambda t: np.dtype(t).name)
def test_every_index_type(index_type: Any) -> None:
    info = np.iinfo(index_type)
    indices = np.array([0, 2, info.max, info.min, 1], dtype=index_type)
    out = gather(np.array([10, 20, 30]), indices, 0)
    # info.min is -128.. for signed types (out of range) and 0 for unsigned (in range).
    assert out.tolist() == [10, 30, 0, 0 if info.min < -3 else 10, 20]


def test_uint64_indices_are_not_wrapped_to_negatives() -> None:
    indices = np.array([2**64 - 1, 2**63, 1], dtype=np.uint64)
    assert gather(np.array([1.0, 2.0, 3.0]), indices, 0).tolist() == [0.0, 0.0, 2.0]


@pytest.mark.parametrize("axis_type", INDEX_TYPES, ids=lambda t: np.dtype(t).name)
def test_axis_of_any_integer_type_scalar_or_one_element(axis_type: Any) -> None:
    data = np.arange(12).reshape(3, 4)
    expected = np.take(data, [3, 0], axis=1).tolist()
    assert gather(data, [3, 0], np.array(1, dtype=axis_type)).tolist() == expected
    assert gather(data, [3, 0], np.array([1], dtype=axis_type)).tolist() == expected


def test_negative_axis() -> None:
    data = np.arange(24).reshape(2, 3, 4)
    assert gather(data, [1, -1], -1).tolist() == np.take(data, [1, 3], axis=2).tolist()


def test_scalar_indices_drop_the_axis() -> None:
    data = np.arange(12).reshape(3, 4)
    out = gather(data, np.int64(2), 0)
    assert out.shape == (4,)
    assert out.tolist() == [8, 9, 10, 11]


def test_scalar_index_out_of_range_gives_zeros() -> None:
    out = gather(np.arange(12.0).reshape(3, 4), np.int32(-4), 0)
    assert out.tolist() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=lambda t: np.dtype(t).name)
def test_every_element_type_bit_exact(dtype: Any) -> None:
    rng = np.random.default_rng(3)
    width = np.dtype(dtype).itemsize
    raw = rng.integers(0, 256, size=(4, 6 * width), dtype=np.uint8)
    data = raw.view(dtype) if dtype is not np.bool_ else raw.astype(np.bool_)
    indices = np.array([[5, -1, 9], [0, -7, 2]])
    out = gather(data, indices, 1)
    unsigned = data.view(f"u{width}")
    expected = np.take(unsigned, np.clip(np.where(indices < 0, indices + 6, indices), 0, 5), 1)
    expected[:, ((indices >= 6) | (indices < -6))] = 0
    assert out.dtype == data.dtype
    assert_same_bits(out.view(expected.dtype), expected)


def test_zero_fill_is_positive_zero_for_floats() -> None:
    out = gather(np.array([-0.0, np.nan], dtype=np.float32), [0, 1, 2], 0)
    assert out.view(np.uint32).tolist()[0] == 0x80000000
    assert out.view(np.uint32).tolist()[2] == 0
    assert np.isnan(out[1])


def test_batch_dims_against_take_along_axis() -> None:
    rng = np.random.default_rng(5)
    data = rng.standard_normal((3, 4, 7, 2))
    indices = rng.integers(-9, 9, size=(3, 4, 5))
    out = gather(data, indices, 2, batch_dims=2)
    valid = (indices >= -7) & (indices < 7)
    positions = np.where(indices < 0, indices + 7, indices) * valid
    expected = np.take_along_axis(data, positions[..., None], axis=2) * valid[..., None]
    assert out.shape == (3, 4, 5, 2)
    np.testing.assert_array_equal(out, expected)


def test_batch_dims_equal_to_indices_rank() -> None:
    data = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    indices = np.array([[1, 0, 2], [3, 3, 3]])
    out = gather(data, indices, 2, batch_dims=2)
    assert out.shape == (2, 3)
    assert out.tolist() == [[1, 4, 10], [15, 19, 23]]


@pytest.mark.parametrize(
    ("data_shape", "indices_shape", "axis", "batch_dims", "out_shape"),
    [
        ((0,), (3,), 0, 0, (3,)),
        ((5,), (0,), 0, 0, (0,)),
        ((2, 0, 3), (4,), 1, 0, (2, 4, 3)),
        ((2, 0, 3), (2, 1), 1, 1, (2, 1, 3)),
        ((0, 3), (0, 2), 1, 1, (0, 2)),
    ],
)
def test_empty_dimensions(
    data_shape: tuple[int, ...],
    indices_shape: tuple[int, ...],
    axis: int,
    batch_dims: int,
    out_shape: tuple[int, ...],
) -> None:
    data = np.ones(data_shape, dtype=np.float32)
    indices = np.zeros(indices_shape, dtype=np.int64)
    out = gather(data, indices, axis, batch_dims)
    assert out.shape == out_shape
    # Any index into an empty axis is out of range: zeros.
    assert not out.any()


@pytest.mark.parametrize(
    ("data_shape", "indices_shape", "axis", "batch_dims", "field", "words"),
    [
        ((2, 3), (2,), 2, 0, "axis", "axis = 2 is out of range for data of rank 2"),
        ((2, 3), (2,), -3, 0, "axis", "axis = -3 is out of range"),
        ((), (2,), 0, 0, "axis", "out of range for data of rank 0"),
        ((2, 3), (2, 2), 1, 3, "batch_dims", "batch_dims = 3 is out of range [-2, 2]"),
        ((2, 3), (2, 2), 1, -3, "batch_dims", "batch_dims = -3 is out of range [-2, 2]"),
        ((2, 3), (2, 3), 0, 1, "batch_dims", "must not be greater than axis"),
        ((2, 3), (3, 3), 1, 1, "indices", "first batch_dims = 1 dimensions"),
        ((2, 3), (2, 2, 2), 1, -1, "batch_dims", "must not be greater than axis"),
    ],
)
def test_spec_violations_name_the_field_and_rule(
    data_shape: tuple[int, ...],
    indices_shape: tuple[int, ...],
    axis: int,
    batch_dims: int,
    field: str,
    words: str,
) -> None:
    with pytest.raises(SpecError) as caught:
        gather(np.zeros(data_shape), np.zeros(indices_shape, dtype=np.int64), axis, batch_dims)
    assert caught.value.field == field
    assert words in caught.value.message


def test_axis_with_two_elements_is_refused() -> None:
    with pytest.raises(SpecError, match="one element") as caught:
        gather(np.zeros((2, 3)), [0], np.array([0, 1]))
    assert caught.value.field == "axis"


@pytest.mark.parametrize("bad", [np.array([0.0]), np.array([True])], ids=["float", "bool"])
def test_indices_must_be_integers(bad: Any) -> None:
    with pytest.raises(SpecError, match="integer type") as caught:
        gather(np.zeros(3), bad, 0)
    assert caught.value.field == "indices"


def test_axis_must_be_an_integer() -> None:
    with pytest.raises(SpecError, match="integer type"):
        gather(np.zeros(3), [0], np.float32(0))


def test_plan_gives_the_output_shape_without_data() -> None:
    plan = gather_plan((10**6, 10**6), (10**6,), np.dtype(np.int64), np.int64(1), 0)
    assert plan.output_shape == (10**6, 10**6)
    assert (plan.axis, plan.batch_dims) == (1, 0)


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Gather along the inner axis of a matrix of ``nbytes`` (every column, shuffled), float32
    and int8."""
    return [_gather_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _gather_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    data = square(nbytes, dtype)
    indices = np.random.default_rng(0).permutation(data.shape[1]).astype(np.int32)
    axis = np.array(1)

    def model() -> Any:
        import openvino.opset8 as ov_opset8  # noqa: PLC0415

        build = lambda p: ov_opset8.gather(p, constant(indices), constant(axis.reshape(1)), 0)  # noqa: E731
        return plugin_model(build, data)

    arrays = {"data": data, "indices": indices, "axis": axis}
    return BenchmarkCase("gather", f"inner axis, {short(dtype)}", arrays, {"batch_dims": 0}, data.dtype,
                         2 * data.nbytes, model)  # fmt: skip
