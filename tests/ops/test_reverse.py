"""Reverse-1 (app/ops/reverse.py): the spec's rules, every element type to the bit, and OpenVINO's
CPU plugin on generated cases."""

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from openvino.utils.node_factory import NodeFactory

from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.ops.reverse import OP, reverse
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
    watch_stream_flags,
)


def run(data: Any, axis: Any, mode: str) -> Any:
    plan = OP.plan({"data": np.asarray(data), "axis": np.asarray(axis)}, {"mode": mode})
    assert isinstance(plan, Plan)
    return plan.run(None)


def test_it_is_collected() -> None:
    assert REGISTRY["reverse"] is OP


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (3, 4, 5), seed=1)
    expected = np.flip(data, (0, 2)).copy()
    assert_same_bits(run(data, np.array([0, -1], np.int8), "index"), expected)
    assert_same_bits(run(data, [True, False, True], "mask"), expected)
    assert_same_bits(reverse(data, [2, 0], "index"), expected)


def test_into_a_given_output_and_from_strided_or_big_endian_data() -> None:
    data = np.arange(24, dtype=">i4").reshape(4, 6)[:, ::2]
    out = np.empty((4, 3), ">i4")
    assert reverse(data, [1], "index", out) is out
    assert out.tolist() == np.flip(data, 1).tolist()


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.float64], ids=str)
def test_a_large_output_by_non_temporal_stores_to_the_bit(
    dtype: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reverse of a large output of long rows writes its whole 64-byte lines by non-temporal
    stores (``raw.STREAM_BYTES`` and ``raw.STREAM_ROW_BYTES``, lowered here to 0): rows
    reversed and forward, of lengths that start and end off a line, in 8-byte words and in
    elements; the same bits as NumPy's flip."""
    from app.ops import compiled, loops, raw  # noqa: PLC0415

    assert loops.ready_module() is compiled
    monkeypatch.setattr(raw, "STREAM_BYTES", 0)
    monkeypatch.setattr(raw, "STREAM_ROW_BYTES", 0)
    streamed = watch_stream_flags(monkeypatch, compiled, "strided_copy")
    for seed, (shape, axes) in enumerate([((7, 333), [1]), ((7, 333), [0, 1]), ((6, 5, 256), [0]),
                                          ((3, 1001), [0]), ((2001,), [0])]):  # fmt: skip
        data = sample(np.dtype(dtype), shape, seed=seed)
        assert_same_bits(run(data, axes, "index"), np.flip(data, tuple(axes)))
    assert streamed and set(streamed) == {1}


@pytest.mark.parametrize("mode", ["index", "mask"])
def test_no_axis_passes_the_data_through(mode: str) -> None:
    data = sample(np.dtype(np.float32), (2, 3))
    axis = np.zeros(0, np.int64) if mode == "index" else [False, False]
    assert_same_bits(run(data, axis, mode), data.copy())


def test_rank_0_and_empty_dimensions() -> None:
    assert run(np.float32(1.5), np.zeros(0, np.int64), "index").tolist() == 1.5
    assert run(np.float32(1.5), np.zeros(0, np.bool_), "mask").tolist() == 1.5
    assert run(np.zeros((0, 3)), [1], "index").shape == (0, 3)


def test_an_axis_given_twice_is_reversed_once() -> None:
    assert run([[1, 2], [3, 4]], [1, -1], "index").tolist() == [[2, 1], [4, 3]]


@pytest.mark.parametrize(
    ("axis", "mode", "words"),
    [
        ([2], "index", "out of range"),
        ([-3], "index", "out of range"),
        ([0, 1, 0], "index", "from 0 to 2"),
        ([True, False], "index", "integer type"),
        ([0, 1], "mask", "boolean type"),
        ([True], "mask", "as many elements"),
        (0, "index", "1D tensor"),
        ([[0]], "index", "1D tensor"),
        ([0], "both", "index"),
    ],
)
def test_refusals_name_the_field(axis: Any, mode: str, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        run(np.zeros((2, 2)), np.asarray(axis), mode)
    assert refused.value.field == ("mode" if mode == "both" else "axis")
    assert words in refused.value.message


def _cases() -> list[tuple[tuple[int, ...], list[int] | list[bool], str]]:
    rng = np.random.default_rng(7)
    cases: list[tuple[tuple[int, ...], list[int] | list[bool], str]] = []
    for index in range(80):
        rank = int(rng.integers(1, 6))
        shape = tuple(int(size) for size in rng.integers(1, 5, rank))
        if index % 2:
            mask = [bool(flag) for flag in rng.integers(0, 2, rank)]
            cases.append((shape, mask, "mask"))
        else:
            count = int(rng.integers(0, rank + 1))
            chosen = rng.choice(rank, count, replace=False)
            # Each axis once, some counted from the end.
            axes = [int(axis) - rank * int(rng.integers(0, 2)) for axis in chosen]
            cases.append((shape, axes, "index"))
    return cases


@pytest.mark.parametrize(("shape", "axis", "mode"), _cases())
def test_openvino_cpu_plugin_agrees(shape: tuple[int, ...], axis: Any, mode: str) -> None:
    dtype = ELEMENT_TYPES[sum(shape) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=sum(shape))
    axis_array = np.array(axis, np.bool_ if mode == "mask" else np.int64)
    factory = NodeFactory("opset1")

    def build(parameter: Any) -> Any:
        axes = constant(axis_array)
        return factory.create("Reverse", [parameter.output(0), axes.output(0)], {"mode": mode})

    moved = cpu_plugin(build, shape)()
    assert_same_bits(run(data, axis_array, mode), from_positions(data, moved))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Reverse along the inner axis and along both axes of a matrix of ``nbytes``, float32 and
    int8."""
    found = []
    for dtype in BENCHMARK_DTYPES:
        data = square(nbytes, dtype)
        for label, axis in (("inner axis", np.array([1])), ("both axes", np.array([0, 1]))):
            found.append(_reverse_case(f"{label}, {short(dtype)}", data, axis))
    return found


def _reverse_case(label: str, data: npt.NDArray[Any], axis: npt.NDArray[Any]) -> BenchmarkCase:
    def model() -> Any:
        factory = NodeFactory("opset1")
        build = lambda p: factory.create("Reverse", [p.output(0), constant(axis).output(0)],  # noqa: E731
                                         {"mode": "index"})  # fmt: skip
        return plugin_model(build, data)

    return BenchmarkCase("reverse", label, {"data": data, "axis": axis},
                         {"mode": "index"}, data.dtype, 2 * data.nbytes, model)  # fmt: skip
