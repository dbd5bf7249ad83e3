"""Split-1 (app/ops/split.py): equal pieces along an axis, every element type to the bit, the
refusals, and OpenVINO's CPU plugin on generated cases."""

from typing import Any

import numpy as np
import openvino as ov
import openvino.opset1 as ov_opset1
import pytest

from app.ops.declaration import SplitPlan
from app.ops.errors import SpecError
from app.ops.split import OP, split
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
    watch_stream_flags,
)


def run(data: Any, axis: Any, num_splits: int) -> list[Any]:
    plan = OP.plan({"data": np.asarray(data), "axis": np.asarray(axis)}, {"num_splits": num_splits})
    assert isinstance(plan, SplitPlan)
    outputs = [np.array(item) for item in plan.run()]
    assert [item.shape for item in outputs] == list(plan.output_shapes)
    return outputs


def test_it_is_collected() -> None:
    assert REGISTRY["split"] is OP and OP.several_outputs


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (2, 6, 3), seed=6)
    for got, expected in zip(run(data, np.int8(1), 3), np.split(data, 3, 1), strict=True):
        assert_same_bits(got, expected.copy())
    for got, expected in zip(split(data, -1, 3), np.split(data, 3, 2), strict=True):
        assert_same_bits(got, expected.copy())


def test_the_specs_example_and_one_piece() -> None:
    outputs = run(np.zeros((6, 12, 10, 24)), 1, 3)
    assert [item.shape for item in outputs] == [(6, 4, 10, 24)] * 3
    [whole] = run(np.arange(4), 0, 1)
    assert whole.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("data", "axis", "num_splits", "field", "words"),
    [
        (np.zeros(6), 0, 4, "num_splits", "evenly divisible"),
        (np.zeros(6), 0, 0, "num_splits", "[1, 6]"),
        (np.zeros(6), 0, 7, "num_splits", "[1, 6]"),
        (np.zeros((0, 2)), 0, 1, "num_splits", "[1, 0]"),
        (np.zeros(6), 1, 1, "axis", "out of range"),
        (np.zeros(6), [0], 1, "axis", "scalar"),
        (np.zeros(6), 0.0, 1, "axis", "integer type"),
        (np.float32(1), 0, 1, "data", "rank 1 or more"),
    ],
)
def test_refusals_name_the_field(
    data: Any, axis: Any, num_splits: int, field: str, words: str
) -> None:
    with pytest.raises(SpecError) as refused:
        run(data, np.asarray(axis), num_splits)
    assert refused.value.field == field
    assert words in refused.value.message


def _cases() -> list[tuple[tuple[int, ...], int, int]]:
    rng = np.random.default_rng(29)
    cases = []
    for _ in range(50):
        rank = int(rng.integers(1, 5))
        axis = int(rng.integers(-rank, rank))
        num_splits = int(rng.integers(1, 4))
        shape = [int(size) for size in rng.integers(1, 4, rank)]
        shape[axis] = num_splits * int(rng.integers(1, 3))
        cases.append((tuple(shape), axis, num_splits))
    return cases


@pytest.mark.parametrize(("shape", "axis", "num_splits"), _cases())
def test_openvino_cpu_plugin_agrees(shape: tuple[int, ...], axis: int, num_splits: int) -> None:
    dtype = ELEMENT_TYPES[(sum(shape) + num_splits) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=axis + 5)
    parameter = ov_opset1.parameter(list(shape), ov.Type.i32)
    node = ov_opset1.split(parameter, ov_opset1.constant(np.int64(axis)), num_splits)
    compiled = ov.Core().compile_model(ov.Model(node.outputs(), [parameter]), "CPU")
    answers = compiled(positions(shape))
    moved = [np.asarray(answers[index]) for index in range(num_splits)]
    for ours, theirs in zip(run(data, axis, num_splits), moved, strict=True):
        assert_same_bits(ours, from_positions(data, theirs))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Split of a matrix of ``nbytes`` in 4 along the inner axis, float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """Split of a matrix of ``nbytes`` in 4 along the inner axis."""
    data = square(nbytes, dtype)
    data = data[:, : data.shape[1] // 4 * 4]

    def model() -> Any:
        return plugin_model(lambda p: ov_opset1.split(p, ov_opset1.constant(np.int64(1)), 4), data)

    return BenchmarkCase("split", f"4 along axis 1, {short(dtype)}", {"data": data, "axis": np.array(1)},
                         {"num_splits": 4}, data.dtype, 2 * data.nbytes, model)  # fmt: skip


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_pieces_written_into_ready_arrays(dtype: np.dtype[Any], monkeypatch: Any) -> None:
    """``SplitPlan.into`` (what an answer asks for): each piece written into its ready array,
    and that array given back, by the compiled copy written by non-temporal stores (the
    thresholds lowered to 0 here) where data is native, by NumPy's where it is big-endian, a
    view where no array is given; the same bits as the views, NaN payloads and -0.0 kept."""
    from app.ops import compiled, loops, raw  # noqa: PLC0415

    assert loops.wait_compiled(120) and loops.ready_module() is compiled
    for name in ("STREAM_BYTES", "STREAM_ROW_BYTES", "COPY_VIEW_FROM"):
        monkeypatch.setattr(raw, name, 0)
    streamed = watch_stream_flags(monkeypatch, compiled, "strided_copy")
    data = sample(dtype, (5, 12, 7), seed=8)
    for given in (data, data.astype(data.dtype.newbyteorder(">"))):
        plan = OP.plan({"data": given, "axis": np.array(1)}, {"num_splits": 4})
        assert isinstance(plan, SplitPlan) and plan.into is not None
        ready = [np.empty(shape, dtype.newbyteorder("=")) for shape in plan.output_shapes]
        before = len(streamed)
        parts = plan.into([ready[0], None, ready[2], ready[3]])
        assert parts[0] is ready[0] and parts[2] is ready[2] and parts[3] is ready[3]
        assert np.shares_memory(parts[1], given)  # no array given: the view
        for part, expected in zip(parts, np.split(data, 4, 1), strict=True):
            assert_same_bits(np.ascontiguousarray(part).astype(dtype), expected.copy())
        native = given.dtype.isnative
        assert (len(streamed) > before) == native
        assert set(streamed[before:]) <= {1}
