"""ShuffleChannels-1 (app/ops/shuffle_channels.py): the spec's formula and example, every numeric
type to the bit, refusals naming the field, and OpenVINO's CPU plugin on generated cases."""

from typing import Any

import numpy as np
import openvino.opset3 as ov_opset3
import pytest

from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.ops.shuffle_channels import OP, shuffle_channels
from app.registry import REGISTRY
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    ELEMENT_TYPES,
    BenchmarkCase,
    assert_same_bits,
    cpu_plugin,
    from_positions,
    plugin_model,
    sample,
    short,
)

NUMERIC = tuple(dtype for dtype in ELEMENT_TYPES if dtype.kind != "b")


def run(data: Any, axis: int = 1, group: int = 1) -> Any:
    plan = OP.plan({"data": np.asarray(data)}, {"axis": axis, "group": group})
    assert isinstance(plan, Plan)
    return plan.run(None)


def spec_formula(data: Any, axis: int, group: int) -> Any:
    """The spec's 4-D reading: [outer, group, C / group, inner], axes 1 and 2 swapped."""
    axis %= data.ndim
    outer = int(np.prod(data.shape[:axis]))
    inner = int(np.prod(data.shape[axis + 1 :]))
    x1 = data.reshape(outer, group, data.shape[axis] // group, inner)
    return x1.transpose(0, 2, 1, 3).reshape(data.shape)


def test_it_is_collected() -> None:
    assert REGISTRY["shuffle_channels"] is OP


@pytest.mark.parametrize("name", ["example_1", "example_last_axis"])
def test_the_specs_examples(name: str) -> None:
    request = OP.examples[name]["value"]
    got = run(np.array(request["data"]), request["axis"], request["group"])
    assert got.tolist() == OP.examples[name]["x-expected-output"]


def test_the_specs_example_at_full_size() -> None:
    data = np.arange(5 * 12 * 200 * 400, dtype=np.int32).reshape(5, 12, 200, 400)
    got = run(data, 1, 3)
    assert got.shape == (5, 12, 200, 400)
    # Channel c' * 3 + g of the output is channel g * 4 + c' of the input.
    assert_same_bits(got[:, 1], data[:, 4])
    assert_same_bits(got[:, 11], data[:, 11])
    assert_same_bits(got[:, 5], data[:, 9])
    assert_same_bits(got[:, 3], data[:, 1])


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
def test_every_numeric_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (2, 6, 3, 5), seed=4)
    for axis, group in ((1, 3), (-1, 5), (0, 2), (2, 1)):
        assert_same_bits(run(data, axis, group), spec_formula(data, axis, group))
    assert_same_bits(shuffle_channels(data, 1, 2), spec_formula(data, 1, 2))


@pytest.mark.parametrize(
    ("shape", "axis", "group"),
    [((12,), 0, 4), ((12,), -1, 12), ((3, 8), 1, 8), ((2, 3, 4, 5, 6), 3, 5), ((7, 1), 1, 1)],
)
def test_properties_against_numpy(shape: tuple[int, ...], axis: int, group: int) -> None:
    data = sample(np.dtype(np.float64), shape, seed=len(shape))
    assert_same_bits(run(data, axis, group), spec_formula(data, axis, group))


def test_group_and_the_per_group_count_swapped_undo_it() -> None:
    data = sample(np.dtype(np.int16), (2, 15, 3), seed=6)
    assert_same_bits(run(run(data, 1, 3), 1, 5), data)


def test_empty_dimensions_beside_the_channels() -> None:
    assert run(np.zeros((0, 4, 2), np.int8), 1, 2).shape == (0, 4, 2)
    assert run(np.zeros((2, 4, 0), np.int8), 1, 4).shape == (2, 4, 0)


def test_into_a_given_output_from_strided_big_endian_data() -> None:
    data = np.arange(4 * 12, dtype=">f4").reshape(4, 12)[:, ::2]
    out = np.empty((4, 6), ">f4")
    assert shuffle_channels(data, 1, 3, out) is out
    assert out.tolist() == spec_formula(np.ascontiguousarray(data), 1, 3).tolist()


@pytest.mark.parametrize(
    ("shape", "attributes", "field", "words"),
    [
        ((2, 6), {"axis": 2, "group": 1}, "axis", "[-2, 1]"),
        ((2, 6), {"axis": -3, "group": 1}, "axis", "[-2, 1]"),
        ((2, 6), {"axis": 1, "group": 0}, "group", "[1, 6]"),
        ((2, 6), {"axis": 1, "group": 7}, "group", "[1, 6]"),
        ((2, 6), {"axis": 1, "group": 4}, "group", "evenly divide"),
        ((2, 0), {"axis": 1, "group": 1}, "group", "[1, 0]"),
        ((), {"axis": 0, "group": 1}, "data", "rank greater or equal to 1"),
    ],
)
def test_refusals_name_the_field(
    shape: tuple[int, ...], attributes: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(SpecError) as refused:
        OP.plan({"data": np.zeros(shape)}, attributes)
    assert refused.value.field == field
    assert words in refused.value.message


def test_boolean_data_is_no_numeric_type() -> None:
    assert "bool" not in OP.inputs[0].element_types
    assert "float16" in OP.inputs[0].element_types


def _cases() -> list[tuple[tuple[int, ...], int, int]]:
    rng = np.random.default_rng(29)
    cases = []
    for _ in range(40):
        rank = int(rng.integers(1, 5))
        shape = [int(size) for size in rng.integers(1, 4, rank)]
        axis = int(rng.integers(-rank, rank))
        group = int(rng.integers(1, 4))
        shape[axis] = group * int(rng.integers(1, 4))
        cases.append((tuple(shape), axis, group))
    return cases


@pytest.mark.parametrize(("shape", "axis", "group"), _cases())
def test_openvino_cpu_plugin_agrees(shape: tuple[int, ...], axis: int, group: int) -> None:
    dtype = NUMERIC[sum(shape) % len(NUMERIC)]
    data = sample(dtype, shape, seed=sum(shape))
    moved = cpu_plugin(lambda p: ov_opset3.shuffle_channels(p, axis, group), shape)()
    assert_same_bits(run(data, axis, group), from_positions(data, moved))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """ShuffleChannels of [1, 64, H, H] of ``nbytes``, axis 1, group 4, float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """ShuffleChannels of [1, 64, H, H] of ``nbytes``, axis 1, group 4."""
    side = int((nbytes // np.dtype(dtype).itemsize // 64) ** 0.5)
    data = (np.arange(64 * side * side) % 5).astype(dtype).reshape(1, 64, side, side)

    def model() -> Any:
        return plugin_model(lambda p: ov_opset3.shuffle_channels(p, 1, 4), data)

    return BenchmarkCase("shuffle_channels", f"[1, 64, H, W], group 4, {short(dtype)}", {"data": data},
                         {"axis": 1, "group": 4}, data.dtype, 2 * data.nbytes, model)  # fmt: skip
