"""Roll-7 kernel: the spec's examples, every rule of the spec, every element type."""

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from app.ops import SpecError, roll
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    BenchmarkCase,
    constant,
    plugin_model,
    short,
    square,
)
from tests.support import assert_same_bits

MATRIX = np.arange(1, 13, dtype=np.int64).reshape(4, 3)
ALL_TYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, ml_dtypes.bfloat16, np.float32, np.float64,
]  # fmt: skip


def test_example_1_scalar_shift_and_axis() -> None:
    expected = [[10, 11, 12], [1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert roll(MATRIX, np.int64(1), np.int64(0)).tolist() == expected


def test_example_2_shift_and_axes_pairs() -> None:
    out = roll(MATRIX, np.array([-1, 2]), np.array([0, 1]))
    assert out.tolist() == [[5, 6, 4], [8, 9, 7], [11, 12, 10], [2, 3, 1]]


def test_example_3_repeated_axis_adds_shifts() -> None:
    out = roll(MATRIX, np.array([1, 2, 1]), np.array([0, 1, 0]))
    assert out.tolist() == [[8, 9, 7], [11, 12, 10], [2, 3, 1], [5, 6, 4]]


def test_scalar_shift_applies_to_every_axis() -> None:
    out = roll(MATRIX, np.int32(1), np.array([0, 1], dtype=np.int32))
    assert out.tolist() == np.roll(MATRIX, (1, 1), (0, 1)).tolist()


@pytest.mark.parametrize("axis", [-1, -2])
def test_negative_axes_count_from_the_end(axis: int) -> None:
    assert roll(MATRIX, 1, axis).tolist() == np.roll(MATRIX, 1, axis).tolist()


@pytest.mark.parametrize(
    "shift",
    [0, 3, -3, 4, 5, -7, 1 << 40, -(1 << 40), np.iinfo(np.int64).max, np.iinfo(np.int64).min],
)
def test_shifts_of_any_size_and_sign(shift: int) -> None:
    data = np.arange(7 * 5, dtype=np.int32).reshape(7, 5)
    out = roll(data, np.int64(shift), np.int64(0))
    assert out.tolist() == np.roll(data, shift % 7, 0).tolist()


def test_repeated_extreme_shifts_do_not_overflow() -> None:
    # int64 max + int64 max would overflow int64; the spec's sum is the exact one.
    big = np.iinfo(np.int64).max
    data = np.arange(10, dtype=np.int8)
    out = roll(data, np.array([big, big, big]), np.array([0, 0, -1]))
    assert out.tolist() == np.roll(data, (3 * big) % 10).tolist()


def test_int32_shift_and_axes() -> None:
    out = roll(MATRIX, np.array([1, 1], dtype=np.int32), np.array([0, 1], dtype=np.int32))
    assert out.tolist() == np.roll(MATRIX, (1, 1), (0, 1)).tolist()


@pytest.mark.parametrize("dtype", ALL_TYPES, ids=lambda t: np.dtype(t).name)
def test_every_element_type_moves_bits_exactly(dtype: Any) -> None:
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(3, 4, 5 * np.dtype(dtype).itemsize), dtype=np.uint8)
    data = raw.view(dtype) if dtype is not np.bool_ else raw.astype(np.bool_)
    out = roll(data, np.array([2, -1]), np.array([2, 0]))
    expected = np.roll(data.view(f"u{data.dtype.itemsize}"), (2, -1), (2, 0))
    assert out.dtype == data.dtype
    assert_same_bits(out.view(expected.dtype), expected)


def test_nan_payloads_and_negative_zero_survive() -> None:
    data = np.array([0x7FC00001, 0xFFC12345, 0x80000000, 0x00000001], dtype=np.uint32)
    out = roll(data.view(np.float32), 1, 0)
    assert out.view(np.uint32).tolist() == np.roll(data, 1).tolist()


def test_big_endian_data_keeps_its_type_and_values() -> None:
    data = np.arange(6, dtype=">f4").reshape(2, 3)
    out = roll(data, 1, 1)
    assert out.dtype == np.dtype(">f4")
    assert out.tolist() == np.roll(data, 1, 1).tolist()


def test_strided_input() -> None:
    data = np.arange(60, dtype=np.float64).reshape(6, 10)[::2, ::3]
    assert roll(data, [1, 2], [0, 1]).tolist() == np.roll(data, (1, 2), (0, 1)).tolist()


def test_many_rolled_axes_take_the_mesh_path() -> None:
    data = np.arange(2 * 3 * 2 * 3 * 2 * 3 * 2 * 2, dtype=np.int16).reshape(2, 3, 2, 3, 2, 3, 2, 2)
    axes = np.arange(8)
    shifts = np.array([1, 2, 1, -1, 1, 1, 1, 1])
    out = roll(data, shifts, axes)
    assert out.tolist() == np.roll(data, tuple(shifts), tuple(axes)).tolist()


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 2)])
def test_empty_dimensions(shape: tuple[int, ...]) -> None:
    data = np.zeros(shape, dtype=np.float32)
    out = roll(data, 5, 0)
    assert out.shape == shape
    assert out.dtype == np.float32


def test_rank_0_data_with_no_axes() -> None:
    out = roll(np.float32(2.5), np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    assert out.shape == ()
    assert out.item() == 2.5


def test_scalar_shift_with_empty_axes_is_identity() -> None:
    assert roll(MATRIX, 3, np.array([], dtype=np.int64)).tolist() == MATRIX.tolist()


def test_output_is_a_new_array() -> None:
    data = MATRIX.copy()
    out = roll(data, 0, 0)
    out[0, 0] = 99
    assert data[0, 0] == 1


@pytest.mark.parametrize(
    ("shift", "axes", "field", "words"),
    [
        (1, 2, "axes", "axes = 2 is out of range for data of rank 2"),
        (1, -3, "axes", "axes = -3 is out of range for data of rank 2"),
        ([1, 1], [0, 5], "axes", "axes[1] = 5 is out of range for data of rank 2"),
        ([1, 2], [0], "shift", "axes must be a 1D tensor of the same size"),
        ([1], 0, "shift", "axes must be a 1D tensor of the same size"),
        ([[1]], [0], "shift", "shift must be a scalar or a 1D tensor"),
        (1, [[0]], "axes", "axes must be a scalar or a 1D tensor"),
    ],
)
def test_spec_violations_name_the_field_and_rule(
    shift: Any, axes: Any, field: str, words: str
) -> None:
    with pytest.raises(SpecError) as caught:
        roll(MATRIX, np.asarray(shift, dtype=np.int64), np.asarray(axes, dtype=np.int64))
    assert caught.value.field == field
    assert words in caught.value.message


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint32, np.uint64, np.float32, np.bool_])
def test_shift_and_axes_must_be_int32_or_int64(dtype: Any) -> None:
    with pytest.raises(SpecError, match="int32 or int64"):
        roll(MATRIX, np.array(1, dtype=dtype), 0)
    with pytest.raises(SpecError, match="int32 or int64"):
        roll(MATRIX, 1, np.array(0, dtype=dtype))


@pytest.mark.parametrize("axes", [0, -1, [0, -1, 0]])
def test_rank_0_data_takes_axes_0_and_minus_1_as_openvino_does(axes: Any) -> None:
    out = roll(np.float32(1.5), np.int64(3), np.asarray(axes, dtype=np.int64))
    assert out.shape == ()
    assert out.item() == 1.5


@pytest.mark.parametrize("axes", [1, -2])
def test_rank_0_data_refuses_other_axes(axes: int) -> None:
    with pytest.raises(
        SpecError, match=r"out of range for data of rank 0 \(allowed values: \[-1, 0\]\)"
    ):
        roll(np.float32(1), 1, axes)


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Roll along both axes of a matrix of ``nbytes``, float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """Roll along both axes of a matrix of ``nbytes``."""
    data = square(nbytes, dtype)
    shift, axes = np.array([1, -1]), np.array([0, 1])

    def model() -> Any:
        import openvino.opset7 as ov_opset7  # noqa: PLC0415

        build = lambda p: ov_opset7.roll(p, constant(shift), constant(axes))  # noqa: E731
        return plugin_model(build, data)

    arrays = {"data": data, "shift": shift, "axes": axes}
    return BenchmarkCase(
        "roll", f"both axes, {short(dtype)}", arrays, {}, data.dtype, 2 * data.nbytes, model
    )
