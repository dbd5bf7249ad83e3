"""VariadicSplit-1 (app/ops/variadic_split.py): pieces of given lengths (one -1), every element
type to the bit, the refusals, and OpenVINO's CPU plugin on generated cases."""

from typing import Any

import numpy as np
import openvino as ov
import openvino.opset1 as ov_opset1
import pytest

from app.ops.declaration import SplitPlan
from app.ops.errors import SpecError
from app.ops.variadic_split import OP, variadic_split
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


def run(data: Any, axis: Any, lengths: Any) -> list[Any]:
    arrays = {"data": np.asarray(data), "axis": np.asarray(axis),
              "split_lengths": np.asarray(lengths)}  # fmt: skip
    plan = OP.plan(arrays, {})
    assert isinstance(plan, SplitPlan)
    outputs = [np.array(item) for item in plan.run()]
    assert [item.shape for item in outputs] == list(plan.output_shapes)
    return outputs


def test_it_is_collected() -> None:
    assert REGISTRY["variadic_split"] is OP and OP.several_outputs


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (3, 7), seed=8)
    got = run(data, np.array([1], np.uint8), np.array([2, -1, 0, 4], np.int16))
    for ours, expected in zip(got, np.split(data, [2, 3, 3], 1), strict=True):
        assert_same_bits(ours, expected.copy())
    assert_same_bits(variadic_split(data, -2, [3])[0], data.copy())


def test_the_specs_examples() -> None:
    data = np.zeros((6, 12, 10, 24))
    assert [item.shape[0] for item in run(data, 0, [1, 2, 3])] == [1, 2, 3]
    assert [item.shape[0] for item in run(data, 0, [-1, 2])] == [4, 2]


@pytest.mark.parametrize(
    ("axis", "lengths", "field", "words"),
    [
        (0, [1, 2], "split_lengths", "must match data.shape[axis] = 6"),
        (0, [-1, -1], "split_lengths", "a single -1"),
        (0, [7, -1], "split_lengths", "more than data.shape[axis]"),
        (0, [-2, 8], "split_lengths", "0 or more"),
        (0, np.zeros(0, np.int64), "split_lengths", "at least one"),
        (0, [[6]], "split_lengths", "1D tensor"),
        (0, [6.0], "split_lengths", "integer type"),
        (2, [6], "axis", "out of range"),
        ([[0]], [6], "axis", "shape [1]"),
    ],
)
def test_refusals_name_the_field(axis: Any, lengths: Any, field: str, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        run(np.zeros((6, 2)), np.asarray(axis), np.asarray(lengths))
    assert refused.value.field == field
    assert words in refused.value.message


def _cases() -> list[tuple[tuple[int, ...], int, list[int]]]:
    rng = np.random.default_rng(31)
    cases = []
    for index in range(50):
        rank = int(rng.integers(1, 4))
        axis = int(rng.integers(-rank, rank))
        lengths = [int(value) for value in rng.integers(1, 3, int(rng.integers(1, 4)))]
        shape = [int(size) for size in rng.integers(1, 4, rank)]
        shape[axis] = sum(lengths)
        if index % 3 == 0:
            lengths[int(rng.integers(0, len(lengths)))] = -1
        cases.append((tuple(shape), axis, lengths))
    return cases


@pytest.mark.parametrize(("shape", "axis", "lengths"), _cases())
def test_openvino_cpu_plugin_agrees(shape: tuple[int, ...], axis: int, lengths: list[int]) -> None:
    dtype = ELEMENT_TYPES[(sum(shape) + len(lengths)) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=axis + 3)
    ours = run(data, axis, lengths)
    if 0 in shape or any(0 in item.shape for item in ours):
        pytest.skip("empty tensors are not given to the CPU plugin")
    parameter = ov_opset1.parameter(list(shape), ov.Type.i32)
    node = ov_opset1.variadic_split(
        parameter, ov_opset1.constant(np.int64(axis)), ov_opset1.constant(np.array(lengths))
    )
    compiled = ov.Core().compile_model(ov.Model(node.outputs(), [parameter]), "CPU")
    answers = compiled(positions(shape))
    for index, piece in enumerate(ours):
        assert_same_bits(piece, from_positions(data, np.asarray(answers[index])))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """VariadicSplit of a matrix of ``nbytes`` into a quarter and the rest, float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """VariadicSplit of a matrix of ``nbytes`` into a quarter and the rest."""
    data = square(nbytes, dtype)
    lengths = np.array([data.shape[0] // 4, -1])

    def model() -> Any:
        build = lambda p: ov_opset1.variadic_split(  # noqa: E731
            p, ov_opset1.constant(np.int64(0)), ov_opset1.constant(lengths)
        )
        return plugin_model(build, data)

    arrays = {"data": data, "axis": np.array(0), "split_lengths": lengths}
    return BenchmarkCase("variadic_split", f"[1/4, -1], {short(dtype)}", arrays, {}, data.dtype,
                         2 * data.nbytes, model)  # fmt: skip
