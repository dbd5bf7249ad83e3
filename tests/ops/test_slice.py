"""Slice-8 (app/ops/slice.py): Python's slicing rules on every integer, every element type to the
bit, the refusals, and OpenVINO's CPU plugin on generated cases."""

from typing import Any

import numpy as np
import openvino.opset8 as ov_opset8
import pytest

from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.ops.slice import OP, slice_
from app.registry import REGISTRY
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    ELEMENT_TYPES,
    BenchmarkCase,
    assert_same_bits,
    constant,
    cpu_plugin,
    from_positions,
    plugin_model,
    sample,
    short,
    square,
)

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def run(data: Any, start: Any, stop: Any, step: Any, axes: Any = None) -> Any:
    arrays = {"data": np.asarray(data), "start": np.asarray(start), "stop": np.asarray(stop),
              "step": np.asarray(step)}  # fmt: skip
    if axes is not None:
        arrays["axes"] = np.asarray(axes)
    plan = OP.plan(arrays, {})
    assert isinstance(plan, Plan)
    return plan.run(None)


def test_it_is_collected() -> None:
    assert REGISTRY["slice"] is OP
    assert [item.name for item in OP.inputs if item.optional] == ["axes"]


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (4, 5, 6), seed=2)
    got = run(data, np.array([3, 1], np.int32), np.array([-5, 5], np.int8), [-2, 3], [0, -1])
    assert_same_bits(got, data[3:-5:-2, :, 1:5:3].copy())


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_other_element_of_a_large_output_by_non_temporal_stores(
    dtype: np.dtype[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slice read two apart along its inner axis, its output large (``raw.STREAM_BYTES``,
    ``raw.STREAM_ROW_BYTES`` and ``raw.COPY_VIEW_FROM`` lowered to 0 here), is the strided
    copy's step-2 rows written by non-temporal stores: rows one after another (one long row)
    and rows apart, starting at either parity, ending on the data's last element or not; the
    same bits as NumPy's slice, NaN payloads and -0.0 kept."""
    from app.ops import compiled, loops, raw  # noqa: PLC0415

    assert loops.ready_module() is compiled
    for name in ("STREAM_BYTES", "STREAM_ROW_BYTES", "COPY_VIEW_FROM"):
        monkeypatch.setattr(raw, name, 0)
    streamed: list[tuple[int, int]] = []
    original = compiled.strided_copy

    def watched(*arguments: Any) -> None:
        streamed.append((int(arguments[6]), int(arguments[-1])))
        original(*arguments)

    monkeypatch.setattr(compiled, "strided_copy", watched)
    for seed, (shape, start, stop) in enumerate([((7, 334), 0, 334), ((7, 333), 1, 333),
                                                 ((5, 301), 0, 300), ((2001,), 0, 2001),
                                                 ((3, 4, 130), 1, 129)]):  # fmt: skip
        data = sample(dtype, shape, seed=seed)
        got = run(data, [start], [stop], [2], [-1])
        assert_same_bits(got, data[..., start:stop:2].copy())
    assert streamed and set(streamed) == {(2, 1)}


@pytest.mark.parametrize("start", [INT64_MIN, -11, -3, 0, 4, 10, INT64_MAX])
@pytest.mark.parametrize("stop", [INT64_MIN, -11, -3, 0, 4, 10, INT64_MAX])
@pytest.mark.parametrize("step", [INT64_MIN, -3, -1, 1, 2, INT64_MAX])
def test_python_slicing_rules(start: int, stop: int, step: int) -> None:
    data = np.arange(10)
    assert run(data, [start], [stop], [step]).tolist() == data[start:stop:step].tolist()


def test_unsigned_values_past_int64_are_clamped() -> None:
    data = np.arange(10)
    got = run(data, np.array([2**64 - 1], np.uint64), np.array([0], np.uint64), [-1])
    assert got.tolist() == data[2**64 - 1 : 0 : -1].tolist()


def test_axes_left_out_kept_whole_and_empty_results() -> None:
    data = np.arange(24).reshape(2, 3, 4)
    assert run(data, [1], [3], [1]).shape == (1, 3, 4)
    assert run(data, [0, 0], [1, 2], [1, 1], [2, 0]).tolist() == data[0:2, :, 0:1].tolist()
    assert run(data, [3], [1], [1], [1]).shape == (2, 0, 4)
    assert run(np.zeros((0, 2)), [0], [5], [1]).shape == (0, 2)
    assert slice_(data, [1], [2], [1], [-3]).tolist() == data[1:2].tolist()


@pytest.mark.parametrize(
    ("start", "stop", "step", "axes", "field", "words"),
    [
        ([0], [1], [0], [0], "step", "cannot be 0"),
        ([0, 0], [1], [1, 1], None, "stop", "same number of elements"),
        ([0], [1], [1], [0, 1], "axes", "as many elements"),
        ([0, 0], [1, 1], [1, 1], [0, -2], "axes", "unique"),
        ([0], [1], [1], [2], "axes", "out of range"),
        ([0, 0, 0], [1, 1, 1], [1, 1, 1], None, "start", "more than data has dimensions"),
        (0, [1], [1], None, "start", "1D tensor"),
        ([0.5], [1], [1], None, "start", "integer type"),
    ],
)
def test_refusals_name_the_field(
    start: Any, stop: Any, step: Any, axes: Any, field: str, words: str
) -> None:
    with pytest.raises(SpecError) as refused:
        run(np.zeros((3, 3)), start, stop, step, axes)
    assert refused.value.field == field
    assert words in refused.value.message


def test_a_scalar_is_refused() -> None:
    with pytest.raises(SpecError) as refused:
        run(np.float32(1), [0], [1], [1])
    assert refused.value.field == "data"


def _cases() -> list[tuple[tuple[int, ...], list[int], list[int], list[int], list[int]]]:
    rng = np.random.default_rng(19)
    cases: list[tuple[tuple[int, ...], list[int], list[int], list[int], list[int]]] = []
    while len(cases) < 80:
        rank = int(rng.integers(1, 5))
        shape = tuple(int(size) for size in rng.integers(2, 6, rank))
        count = int(rng.integers(1, rank + 1))
        axes = [int(axis) for axis in rng.choice(rank, count, replace=False)]
        step = [int(value) or 1 for value in rng.integers(-3, 4, count)]
        start, stop = [], []
        for axis, pace in zip(axes, step, strict=True):
            size = shape[axis]
            # Ends within a dimension and a little past it, mostly in the step's direction.
            low, high = sorted(int(v) for v in rng.integers(-size - 2, size + 2, 2))
            start.append(low if pace > 0 else high)
            stop.append(high if pace > 0 else low)
        data = np.zeros(shape)
        index = [slice(None)] * rank
        for axis, first, last, pace in zip(axes, start, stop, step, strict=True):
            index[axis] = slice(first, last, pace)
        if data[tuple(index)].size:  # an empty slice is not asked of the plugin
            cases.append((shape, start, stop, step, axes))
    return cases


@pytest.mark.parametrize(("shape", "start", "stop", "step", "axes"), _cases())
def test_openvino_cpu_plugin_agrees(
    shape: tuple[int, ...], start: list[int], stop: list[int], step: list[int], axes: list[int]
) -> None:
    dtype = ELEMENT_TYPES[(sum(shape) + len(axes)) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=sum(start) % 97)
    ours = run(data, start, stop, step, axes)
    values = [np.array(item, np.int64) for item in (start, stop, step, axes)]
    moved = cpu_plugin(lambda p: ov_opset8.slice(p, *(constant(v) for v in values)), shape)()
    assert_same_bits(ours, from_positions(data, moved))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Slice of every other column of a matrix of ``nbytes``, float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """Slice of every other column of a matrix of ``nbytes``."""
    data = square(nbytes, dtype)
    start, stop, step = np.array([0, 0]), np.array(data.shape), np.array([1, 2])

    def model() -> Any:
        values = (start, stop, step, np.array([0, 1]))
        return plugin_model(lambda p: ov_opset8.slice(p, *(constant(v) for v in values)), data)

    arrays = {"data": data, "start": start, "stop": stop, "step": step}
    return BenchmarkCase(
        "slice", f"step 2 inner, {short(dtype)}", arrays, {}, data.dtype, data.nbytes, model
    )
