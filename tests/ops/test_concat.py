"""Concat-1 (app/ops/concat.py): the spec's rules, every element type to the bit, any number of
inputs, and OpenVINO's CPU plugin on generated cases."""

from typing import Any

import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset1 as ov_opset1
import pytest

from app.ops.concat import OP, concat
from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.registry import REGISTRY
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    ELEMENT_TYPES,
    BenchmarkCase,
    assert_same_bits,
    from_positions,
    plugin_model,
    positions,
    sample,
    short,
    square,
)


def run(inputs: list[Any], axis: int) -> Any:
    arrays = {f"data_{index}": np.asarray(item) for index, item in enumerate(inputs)}
    plan = OP.plan(arrays, {"axis": axis})
    assert isinstance(plan, Plan)
    return plan.run(None)


def test_it_is_collected() -> None:
    assert REGISTRY["concat"] is OP
    assert OP.variadic is not None and OP.output_type_from == "data_0"


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    parts = [sample(dtype, (2, size, 3), seed=size) for size in (1, 0, 4, 2)]
    assert_same_bits(run(parts, 1), np.concatenate(parts, 1))
    assert_same_bits(run(parts, -2), np.concatenate(parts, 1))
    assert_same_bits(concat(parts[:1], 0), parts[0].copy())


def test_the_specs_example() -> None:
    inputs = [np.zeros((1, size, 5, 5)) for size in (8, 16, 32)]
    assert run(inputs, 1).shape == (1, 56, 5, 5)
    assert run(inputs, -3).shape == (1, 56, 5, 5)


def test_byte_orders_are_one_type() -> None:
    little = np.arange(3, dtype="<i4")
    big = np.arange(3, 6, dtype=">i4")
    assert run([little, big], 0).tolist() == [0, 1, 2, 3, 4, 5]


def test_many_inputs_and_into_a_given_output() -> None:
    parts = [np.array([index % 256], np.uint8) for index in range(300)]
    assert run(parts, 0).tolist() == [index % 256 for index in range(300)]
    out = np.empty(4, np.int16)
    assert concat([np.array([1, 2], np.int16), np.array([3, 4], np.int16)], 0, out) is out


@pytest.mark.parametrize(
    ("inputs", "axis", "field", "words"),
    [
        ([np.zeros(2), np.zeros(2, np.float32)], 0, "data_1", "types of all inputs"),
        ([np.zeros((2, 2)), np.zeros(2)], 0, "data_1", "ranks of all inputs"),
        ([np.zeros((2, 2)), np.zeros((3, 3))], 0, "data_1", "except along axis 0"),
        ([np.float32(1), np.float32(2)], 0, "data_0", "scalars are not allowed"),
        ([np.zeros((2, 2))], 2, "axis", "out of range [-2, 1]"),
        ([np.zeros((2, 2))], -3, "axis", "out of range"),
    ],
)
def test_refusals_name_the_field(inputs: list[Any], axis: int, field: str, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        run(inputs, axis)
    assert refused.value.field == field
    assert words in refused.value.message


def _cases() -> list[tuple[list[tuple[int, ...]], int]]:
    rng = np.random.default_rng(17)
    cases = []
    for _ in range(50):
        rank = int(rng.integers(1, 5))
        axis = int(rng.integers(-rank, rank))
        base = [int(size) for size in rng.integers(1, 4, rank)]
        shapes = []
        for _ in range(int(rng.integers(1, 5))):
            shape = list(base)
            shape[axis] = int(rng.integers(1, 4))
            shapes.append(tuple(shape))
        cases.append((shapes, axis))
    return cases


@pytest.mark.parametrize(("shapes", "axis"), _cases())
def test_openvino_cpu_plugin_agrees(shapes: list[tuple[int, ...]], axis: int) -> None:
    dtype = ELEMENT_TYPES[(len(shapes) + axis) % len(ELEMENT_TYPES)]
    parts = [sample(dtype, shape, seed=index) for index, shape in enumerate(shapes)]
    # Each input's positions follow the previous ones': one numbering across all inputs.
    parameters = [ov_opset1.parameter(list(shape), ov.Type.i32) for shape in shapes]
    compiled = ov.Core().compile_model(
        ov.Model([ov_opset1.concat(parameters, axis)], parameters), "CPU"
    )
    offset, given = 0, []
    for shape in shapes:
        given.append(positions(shape) + offset)
        offset += int(np.prod(shape))
    moved = np.asarray(compiled(given)[0])
    flat = np.concatenate([part.reshape(-1) for part in parts])
    assert_same_bits(run(parts, axis), from_positions(flat, moved))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Concat of two halves of ``nbytes`` along the outer and the inner axis, float32 and
    int8."""
    found = []
    for dtype in BENCHMARK_DTYPES:
        whole = square(nbytes, dtype)
        label = short(dtype)
        found.append(_concat_case(f"2 halves, axis 0, {label}", whole[: whole.shape[0] // 2], 0))
        inner = np.ascontiguousarray(whole[:, : whole.shape[1] // 2])
        found.append(_concat_case(f"2 halves, inner axis, {label}", inner, 1))
    return found


def _concat_case(label: str, half: npt.NDArray[Any], axis: int) -> BenchmarkCase:
    def model() -> Any:
        return plugin_model(lambda p: ov_opset1.concat([p, p], axis), half)

    arrays = {"data_0": half, "data_1": half}
    return BenchmarkCase("concat", label, arrays, {"axis": axis}, half.dtype,
                         4 * half.nbytes, model)  # fmt: skip
