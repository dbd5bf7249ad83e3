"""SpaceToDepth-1 (app/ops/space_to_depth.py): the spec's formula and example, every element type
to the bit, refusals naming the field, and OpenVINO's CPU plugin on generated cases."""

import itertools
from typing import Any

import numpy as np
import openvino.opset1 as ov_opset1
import pytest

from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.ops.space_to_depth import OP, space_to_depth, space_to_depth_shape
from app.registry import REGISTRY
from tests.ops.movement_support import (
    ELEMENT_TYPES,
    BenchmarkCase,
    assert_same_bits,
    cpu_plugin,
    from_positions,
    plugin_model,
    sample,
)


def run(data: Any, mode: str, block_size: int = 1) -> Any:
    plan = OP.plan({"data": np.asarray(data)}, {"mode": mode, "block_size": block_size})
    assert isinstance(plan, Plan)
    return plan.run(None)


def spec_formula(data: Any, block_size: int, mode: str) -> Any:
    """The spec's reshape, transpose, reshape, in NumPy, written from the spec's text."""
    n, c, *sizes = data.shape
    k = len(sizes)
    reduced = [s // block_size for s in sizes]
    x1 = data.reshape(n, c, *[a for s in reduced for a in (s, block_size)])
    blocks, spatial = [3 + 2 * i for i in range(k)], [2 + 2 * i for i in range(k)]
    order = [0, *blocks, 1, *spatial] if mode == "blocks_first" else [0, 1, *blocks, *spatial]
    return x1.transpose(order).reshape(n, c * block_size**k, *reduced)


def test_it_is_collected() -> None:
    assert REGISTRY["space_to_depth"] is OP


@pytest.mark.parametrize("name", ["example_1", "example_depth_first", "example_blocks_first"])
def test_the_specs_examples(name: str) -> None:
    request = OP.examples[name]["value"]
    got = run(np.array(request["data"]), request["mode"], request["block_size"])
    assert got.tolist() == OP.examples[name]["x-expected-output"]


def test_the_specs_example_shape() -> None:
    assert run(np.zeros((5, 7, 4, 6)), "blocks_first", 2).shape == (5, 28, 2, 3)


def test_one_element_by_the_definition() -> None:
    """out[n, b * C + c, q] = in[n, c, q * bs + b] (blocks_first), out[n, c * bs + b, q]
    (depth_first): the spec's reshapes read element by element, for a 1-D spatial case."""
    data = np.arange(2 * 2 * 6).reshape(2, 2, 6)
    for mode in ("blocks_first", "depth_first"):
        got = run(data, mode, 3)
        for n, c, q, b in itertools.product(range(2), range(2), range(2), range(3)):
            channel = b * 2 + c if mode == "blocks_first" else c * 3 + b
            assert got[n, channel, q] == data[n, c, q * 3 + b]


def test_depth_to_space_undoes_it() -> None:
    """DepthToSpace-1 is its inverse in the same mode (checked with the spec's formula)."""
    data = sample(np.dtype(np.uint16), (2, 3, 4, 6), seed=2)
    for mode in ("blocks_first", "depth_first"):
        moved = run(data, mode, 2)
        n, c, *sizes = moved.shape
        depth = c // 4
        if mode == "blocks_first":
            back = moved.reshape(n, 2, 2, depth, *sizes).transpose(0, 3, 4, 1, 5, 2)
        else:
            back = moved.reshape(n, depth, 2, 2, *sizes).transpose(0, 1, 4, 2, 5, 3)
        assert_same_bits(back.reshape(data.shape), data)


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (2, 3, 4, 6), seed=3)
    for mode in ("blocks_first", "depth_first"):
        expected = spec_formula(data, 2, mode)
        assert_same_bits(run(data, mode, 2), expected)
        assert_same_bits(space_to_depth(data, mode, 2), expected)


@pytest.mark.parametrize(
    ("shape", "block_size"),
    [
        ((1, 2, 3, 6, 9), 3),
        ((2, 4, 8), 2),
        ((1, 3, 8, 4), 4),
        ((1, 2, 32, 32), 16),
        ((3, 2, 1, 1, 1, 1), 1),
        ((1, 1, 8, 8, 8), 8),
    ],
)
def test_properties_against_numpy(shape: tuple[int, ...], block_size: int) -> None:
    data = sample(np.dtype(np.int32), shape, seed=len(shape))
    for mode in ("blocks_first", "depth_first"):
        assert_same_bits(run(data, mode, block_size), spec_formula(data, block_size, mode))


def test_block_size_1_passes_the_data_through() -> None:
    data = sample(np.dtype(np.float16), (2, 3, 4), seed=9)
    assert_same_bits(run(data, "blocks_first"), data.copy())


def test_empty_dimensions() -> None:
    assert run(np.zeros((0, 2, 2, 2), np.int8), "blocks_first", 2).shape == (0, 8, 1, 1)
    assert run(np.zeros((1, 0, 4, 4), np.int8), "depth_first", 2).shape == (1, 0, 2, 2)
    assert run(np.zeros((1, 3, 0, 5), np.int8), "depth_first", 5).shape == (1, 75, 0, 1)


def test_into_a_given_output_from_strided_big_endian_data() -> None:
    data = np.arange(2 * 3 * 4 * 8, dtype=">i4").reshape(2, 3, 4, 8)[:, :, :, ::2]
    out = np.empty((2, 12, 2, 2), ">i4")
    assert space_to_depth(data, "depth_first", 2, out) is out
    assert out.tolist() == spec_formula(np.ascontiguousarray(data), 2, "depth_first").tolist()


def test_the_shape_is_known_without_allocating() -> None:
    """A huge block_size on empty spatial dimensions: a depth no array can hold, in Python
    integers, for admission to refuse."""
    assert space_to_depth_shape((1, 3, 0, 0), 1 << 40, "blocks_first") == (1, 3 << 80, 0, 0)


@pytest.mark.parametrize(
    ("shape", "attributes", "field", "words"),
    [
        ((1, 4, 2), {"mode": "blocks_first", "block_size": 0}, "block_size", "positive integer"),
        ((1, 1, 4, 6), {"mode": "blocks_first", "block_size": 4}, "block_size", "dimension 3"),
        ((1, 1, 3, 4), {"mode": "depth_first", "block_size": 2}, "block_size", "evenly divided"),
        ((1, 4), {"mode": "blocks_first", "block_size": 2}, "data", "rank >= 3"),
        ((), {"mode": "depth_first", "block_size": 1}, "data", "rank >= 3"),
        ((1, 4, 2), {"mode": "blocks", "block_size": 2}, "mode", "depth_first"),
    ],
)
def test_refusals_name_the_field(
    shape: tuple[int, ...], attributes: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(SpecError) as refused:
        OP.plan({"data": np.zeros(shape)}, attributes)
    assert refused.value.field == field
    assert words in refused.value.message


def _cases() -> list[tuple[tuple[int, ...], int, str]]:
    rng = np.random.default_rng(23)
    cases = []
    for index in range(40):
        spatial = int(rng.integers(1, 4))
        block_size = int(rng.integers(1, 4))
        shape = (
            int(rng.integers(1, 3)),
            int(rng.integers(1, 4)),
            *(block_size * int(size) for size in rng.integers(1, 3, spatial)),
        )
        cases.append((shape, block_size, ("blocks_first", "depth_first")[index % 2]))
    return cases


@pytest.mark.parametrize(("shape", "block_size", "mode"), _cases())
def test_openvino_cpu_plugin_agrees(shape: tuple[int, ...], block_size: int, mode: str) -> None:
    dtype = ELEMENT_TYPES[sum(shape) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=sum(shape))
    build = lambda p: ov_opset1.space_to_depth(p, mode, block_size)  # noqa: E731
    moved = cpu_plugin(build, shape)()
    assert_same_bits(run(data, mode, block_size), from_positions(data, moved))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """SpaceToDepth of float32 and int8 [1, 16, H, H] of ``nbytes``, block_size 2,
    blocks_first."""
    return [
        _benchmark_case(nbytes, np.dtype(np.float32)),
        _benchmark_case(nbytes, np.dtype(np.int8)),
    ]


def _benchmark_case(nbytes: int, dtype: np.dtype[Any]) -> BenchmarkCase:
    side = int((nbytes // dtype.itemsize // 16) ** 0.5) // 2 * 2
    data = (np.arange(16 * side * side) % 5).astype(dtype).reshape(1, 16, side, side)
    attributes = {"mode": "blocks_first", "block_size": 2}

    def model() -> Any:
        return plugin_model(lambda p: ov_opset1.space_to_depth(p, "blocks_first", 2), data)

    label = f"[1, 16, H, W], bs 2, {'f32' if dtype == np.float32 else 'i8'}"
    return BenchmarkCase("space_to_depth", label, {"data": data},
                         attributes, data.dtype, 2 * data.nbytes, model)  # fmt: skip
