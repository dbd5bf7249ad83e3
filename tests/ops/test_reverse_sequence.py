"""ReverseSequence-1 (app/ops/reverse_sequence.py): the spec's example and reading, every element
type to the bit, refusals naming the field, and OpenVINO's CPU plugin on generated cases."""

from typing import Any

import numpy as np
import openvino.opset1 as ov_opset1
import pytest

from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.ops.reverse_sequence import OP, reverse_sequence
from app.registry import REGISTRY
from tensor_ops_wire.dtypes import BFLOAT16
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
)


def run(data: Any, seq_lengths: Any, batch_axis: int = 0, seq_axis: int = 1) -> Any:
    arrays = {"data": np.asarray(data), "seq_lengths": np.asarray(seq_lengths)}
    plan = OP.plan(arrays, {"batch_axis": batch_axis, "seq_axis": seq_axis})
    assert isinstance(plan, Plan)
    return plan.run(None)


def reading(data: Any, lengths: list[int], batch_axis: int, seq_axis: int) -> Any:
    """The spec's words, slice by slice: slice i along batch_axis, its first lengths[i]
    elements along seq_axis reversed."""
    out = data.copy()
    for index, length in enumerate(lengths):
        where: list[Any] = [slice(None)] * data.ndim
        where[batch_axis] = index
        part = data[tuple(where)]
        axis = seq_axis if seq_axis < batch_axis % data.ndim else seq_axis - 1
        axis %= part.ndim
        flipped = part.copy()
        head: list[Any] = [slice(None)] * part.ndim
        head[axis] = slice(0, length)
        flipped[tuple(head)] = np.flip(part[tuple(head)], axis)
        out[tuple(where)] = flipped
    return out


def test_it_is_collected() -> None:
    assert REGISTRY["reverse_sequence"] is OP


@pytest.mark.parametrize("name", ["example_1", "example_seq_first"])
def test_the_specs_examples(name: str) -> None:
    request = OP.examples[name]["value"]
    got = run(np.array(request["data"]), np.array(request["seq_lengths"]),
              request["batch_axis"], request["seq_axis"])  # fmt: skip
    assert got.tolist() == OP.examples[name]["x-expected-output"]


def test_the_specs_example_at_full_size() -> None:
    data = np.arange(4 * 10 * 100 * 200, dtype=np.int32).reshape(4, 10, 100, 200)
    got = run(data, [2, 4, 8, 10])
    assert got.shape == (4, 10, 100, 200)
    assert_same_bits(got[0, :2], data[0, 1::-1])
    assert_same_bits(got[0, 2:], data[0, 2:])
    assert_same_bits(got[2, :8], data[2, 7::-1])
    assert_same_bits(got[3], data[3, ::-1])


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (3, 5, 2), seed=5)
    lengths = [5, 1, 3]
    assert_same_bits(run(data, lengths), reading(data, lengths, 0, 1))
    assert_same_bits(reverse_sequence(data, lengths, 0, 1), reading(data, lengths, 0, 1))


@pytest.mark.parametrize(
    ("shape", "batch_axis", "seq_axis"),
    [((4, 6), 0, 1), ((6, 4), 1, 0), ((2, 3, 5), 2, 1), ((3, 2, 4, 2), -1, -2), ((5, 2, 3), 0, 2)],
)
def test_properties_against_the_specs_reading(
    shape: tuple[int, ...], batch_axis: int, seq_axis: int
) -> None:
    data = sample(np.dtype(np.float32), shape, seed=sum(shape))
    rng = np.random.default_rng(len(shape))
    lengths = [int(v) for v in rng.integers(1, shape[seq_axis] + 1, shape[batch_axis])]
    assert_same_bits(run(data, lengths, batch_axis, seq_axis),
                     reading(data, lengths, batch_axis % len(shape), seq_axis % len(shape)))  # fmt: skip


def test_many_slices_take_the_grouped_path() -> None:
    data = sample(np.dtype(np.uint16), (3000, 7, 2), seed=3)
    lengths = [1 + index % 7 for index in range(3000)]
    assert_same_bits(run(data, np.array(lengths, np.uint32)), reading(data, lengths, 0, 1))
    assert OP.workspace({"data": data, "seq_lengths": np.array(lengths)}, {}) >= data.nbytes


@pytest.mark.parametrize("dtype", ["int8", "uint64", "float16", "float32", "float64"])
def test_seq_lengths_of_any_numerical_type(dtype: str) -> None:
    data = np.arange(6).reshape(2, 3)
    assert run(data, np.array([3, 2], dtype)).tolist() == [[2, 1, 0], [4, 3, 5]]


def test_seq_lengths_in_bfloat16() -> None:
    data = np.arange(6).reshape(2, 3)
    assert run(data, np.array([3.0, 1.0], np.float32).astype(BFLOAT16)).tolist() == [
        [2, 1, 0],
        [3, 4, 5],
    ]


def test_empty_dimensions() -> None:
    assert run(np.zeros((0, 3)), np.zeros(0, np.int64)).shape == (0, 3)
    assert run(np.zeros((2, 3, 0)), [1, 3]).shape == (2, 3, 0)


def test_into_a_given_output_from_strided_big_endian_data() -> None:
    data = np.arange(2 * 8, dtype=">i4").reshape(2, 8)[:, ::2]
    out = np.empty((2, 4), ">i4")
    assert reverse_sequence(data, [4, 2], 0, 1, out) is out
    assert out.tolist() == [[6, 4, 2, 0], [10, 8, 12, 14]]


@pytest.mark.parametrize(
    ("shape", "lengths", "attributes", "field", "words"),
    [
        ((2, 3), [1, 4], {}, "seq_lengths", "[1, 3]; seq_lengths[1] = 4"),
        ((2, 3), [0, 1], {}, "seq_lengths", "[1, 3]; seq_lengths[0] = 0"),
        ((2, 3), [-1, 1], {}, "seq_lengths", "integer values"),
        ((2, 3), np.array([1.5, 1.0]), {}, "seq_lengths", "integer values"),
        ((2, 3), np.array([np.nan, 1.0]), {}, "seq_lengths", "integer values"),
        ((2, 3), np.array([True, True]), {}, "seq_lengths", "numerical type"),
        ((2, 3), [1, 1, 1], {}, "seq_lengths", "2 elements"),
        ((2, 3), [[1, 1]], {}, "seq_lengths", "1D tensor"),
        ((2, 3), [1, 1], {"batch_axis": 1, "seq_axis": 0}, "seq_lengths", "3 elements"),
        ((2, 3), [1, 1], {"batch_axis": 2}, "batch_axis", "[-2, 1]"),
        ((2, 3), [1, 1], {"seq_axis": -3}, "seq_axis", "[-2, 1]"),
        ((2, 3), [1, 1], {"seq_axis": 0}, "seq_axis", "different"),
        ((3,), [1, 1, 1], {}, "data", "rank greater or equal to 2"),
    ],
)
def test_refusals_name_the_field(
    shape: tuple[int, ...], lengths: Any, attributes: dict[str, int], field: str, words: str
) -> None:
    given = {"batch_axis": 0, "seq_axis": 1} | attributes
    with pytest.raises(SpecError) as refused:
        OP.plan({"data": np.zeros(shape), "seq_lengths": np.asarray(lengths)}, given)
    assert refused.value.field == field
    assert words in refused.value.message


def _cases() -> list[tuple[tuple[int, ...], int, int, list[int]]]:
    rng = np.random.default_rng(41)
    cases = []
    for _ in range(50):
        rank = int(rng.integers(2, 5))
        shape = tuple(int(size) for size in rng.integers(1, 5, rank))
        batch_axis, seq_axis = (int(axis) for axis in rng.choice(rank, 2, replace=False))
        lengths = [int(v) for v in rng.integers(1, shape[seq_axis] + 1, shape[batch_axis])]
        cases.append((shape, batch_axis, seq_axis, lengths))
    return cases


@pytest.mark.parametrize(("shape", "batch_axis", "seq_axis", "lengths"), _cases())
def test_openvino_cpu_plugin_agrees(
    shape: tuple[int, ...], batch_axis: int, seq_axis: int, lengths: list[int]
) -> None:
    dtype = ELEMENT_TYPES[sum(shape) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=sum(shape))
    given = np.array(lengths, np.int32)
    build = lambda p: ov_opset1.reverse_sequence(p, constant(given), batch_axis, seq_axis)  # noqa: E731
    moved = cpu_plugin(build, shape)()
    assert_same_bits(run(data, given, batch_axis, seq_axis), from_positions(data, moved))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """ReverseSequence of [64, T, 256] of ``nbytes``, lengths 1..T spread, float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """ReverseSequence of [64, T, 256] of ``nbytes``, lengths 1..T spread."""
    steps = nbytes // np.dtype(dtype).itemsize // 64 // 256
    data = (np.arange(64 * steps * 256) % 5).astype(dtype).reshape(64, steps, 256)
    lengths = np.linspace(1, steps, 64).astype(np.int32)

    def model() -> Any:
        build = lambda p: ov_opset1.reverse_sequence(p, constant(lengths), 0, 1)  # noqa: E731
        return plugin_model(build, data)

    return BenchmarkCase("reverse_sequence", f"[64, T, 256], {short(dtype)}", {"data": data,
                         "seq_lengths": lengths}, {"batch_axis": 0, "seq_axis": 1},
                         data.dtype, 2 * data.nbytes, model)  # fmt: skip
