"""DepthToSpace-1 (app/ops/depth_to_space.py): the spec's formula and example, every element type
to the bit, refusals naming the field, and OpenVINO's CPU plugin on generated cases."""

import itertools
from typing import Any

import numpy as np
import openvino.opset1 as ov_opset1
import pytest

from app.ops.declaration import Plan
from app.ops.depth_to_space import OP, depth_to_space, depth_to_space_shape
from app.ops.errors import SpecError
from app.registry import REGISTRY
from tests.ops.movement_support import (
    ELEMENT_TYPES,
    BenchmarkCase,
    assert_same_bits,
    cpu_plugin,
    from_positions,
    plugin_model,
    sample,
    short,
)


def run(data: Any, mode: str, block_size: int = 1) -> Any:
    plan = OP.plan({"data": np.asarray(data)}, {"mode": mode, "block_size": block_size})
    assert isinstance(plan, Plan)
    return plan.run(None)


def spec_formula(data: Any, block_size: int, mode: str) -> Any:
    """The spec's reshape, transpose, reshape, in NumPy, written from the spec's text."""
    n, c, *sizes = data.shape
    k = len(sizes)
    depth = c // block_size**k
    if mode == "blocks_first":
        x1 = data.reshape(n, *[block_size] * k, depth, *sizes)
        order = [0, k + 1] + [a for i in range(k) for a in (k + 2 + i, 1 + i)]
    else:
        x1 = data.reshape(n, depth, *[block_size] * k, *sizes)
        order = [0, 1] + [a for i in range(k) for a in (k + 2 + i, 2 + i)]
    return x1.transpose(order).reshape(n, depth, *(s * block_size for s in sizes))


def test_it_is_collected() -> None:
    assert REGISTRY["depth_to_space"] is OP


@pytest.mark.parametrize("name", ["example_1", "example_depth_first", "example_blocks_first"])
def test_the_specs_examples(name: str) -> None:
    request = OP.examples[name]["value"]
    got = run(np.array(request["data"]), request["mode"], request["block_size"])
    assert got.tolist() == OP.examples[name]["x-expected-output"]


def test_the_specs_example_shape() -> None:
    assert run(np.zeros((5, 28, 2, 3)), "blocks_first", 2).shape == (5, 7, 4, 6)


def test_one_element_by_the_definition() -> None:
    """out[n, c', d*bs + b] = in[n, b * C' + c', d] (blocks_first), in[n, c' * bs + b, d]
    (depth_first): the spec's reshapes read element by element, for a 1-D spatial case."""
    data = np.arange(2 * 6 * 3).reshape(2, 6, 3)
    for mode in ("blocks_first", "depth_first"):
        got = run(data, mode, 3)
        for n, c, d, b in itertools.product(range(2), range(2), range(3), range(3)):
            channel = b * 2 + c if mode == "blocks_first" else c * 3 + b
            assert got[n, c, d * 3 + b] == data[n, channel, d]


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (2, 8, 3, 5), seed=3)
    for mode in ("blocks_first", "depth_first"):
        expected = spec_formula(data, 2, mode)
        assert_same_bits(run(data, mode, 2), expected)
        assert_same_bits(depth_to_space(data, mode, 2), expected)


@pytest.mark.parametrize(
    ("shape", "block_size"),
    [
        ((1, 27, 2, 2, 2), 3),
        ((2, 4, 7), 2),
        ((1, 16, 3, 3), 4),
        ((1, 512, 2, 2), 16),
        ((3, 2, 1, 1, 1, 1), 1),
        ((1, 1024, 1, 1, 1), 8),
    ],
)
def test_properties_against_numpy(shape: tuple[int, ...], block_size: int) -> None:
    data = sample(np.dtype(np.int32), shape, seed=len(shape))
    for mode in ("blocks_first", "depth_first"):
        assert_same_bits(run(data, mode, block_size), spec_formula(data, block_size, mode))


def test_block_size_1_passes_the_data_through() -> None:
    data = sample(np.dtype(np.float16), (2, 3, 4), seed=9)
    assert_same_bits(run(data, "depth_first"), data.copy())


def test_empty_dimensions() -> None:
    assert run(np.zeros((0, 8, 2, 2), np.int8), "blocks_first", 2).shape == (0, 2, 4, 4)
    assert run(np.zeros((1, 0, 2, 2), np.int8), "blocks_first", 5).shape == (1, 0, 10, 10)
    assert run(np.zeros((1, 4, 0, 2), np.int8), "depth_first", 2).shape == (1, 1, 0, 4)


def test_into_a_given_output_from_strided_big_endian_data() -> None:
    data = np.arange(2 * 8 * 3 * 4, dtype=">i4").reshape(2, 8, 3, 4)[:, :, :, ::2]
    out = np.empty((2, 2, 6, 4), ">i4")
    assert depth_to_space(data, "depth_first", 2, out) is out
    assert out.tolist() == spec_formula(np.ascontiguousarray(data), 2, "depth_first").tolist()


def test_the_shape_is_known_without_allocating() -> None:
    """A huge block_size on an empty depth: the shape in Python integers, for admission."""
    assert depth_to_space_shape((1, 0, 3, 3), 1 << 40, "blocks_first") == (1, 0, 3 << 40, 3 << 40)


@pytest.mark.parametrize(
    ("shape", "attributes", "field", "words"),
    [
        ((1, 4, 2), {"mode": "blocks_first", "block_size": 0}, "block_size", "positive integer"),
        ((1, 4, 2), {"mode": "blocks_first", "block_size": -2}, "block_size", "positive"),
        ((1, 6, 2, 2), {"mode": "blocks_first", "block_size": 2}, "block_size", "evenly divided"),
        ((1, 4), {"mode": "blocks_first", "block_size": 2}, "data", "rank >= 3"),
        ((), {"mode": "depth_first", "block_size": 1}, "data", "rank >= 3"),
        ((1, 4, 2), {"mode": "depth", "block_size": 2}, "mode", "blocks_first"),
        (
            (1, 1 << 20, 1, 1),
            {"mode": "blocks_first", "block_size": 1 << 62},
            "block_size",
            "evenly divided",
        ),
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
    rng = np.random.default_rng(21)
    cases = []
    for index in range(40):
        spatial = int(rng.integers(1, 4))
        block_size = int(rng.integers(1, 4))
        depth = int(rng.integers(1, 3))
        shape = (
            int(rng.integers(1, 3)),
            depth * block_size**spatial,
            *(int(size) for size in rng.integers(1, 4, spatial)),
        )
        cases.append((shape, block_size, ("blocks_first", "depth_first")[index % 2]))
    return cases


@pytest.mark.parametrize(("shape", "block_size", "mode"), _cases())
def test_openvino_cpu_plugin_agrees(shape: tuple[int, ...], block_size: int, mode: str) -> None:
    dtype = ELEMENT_TYPES[sum(shape) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=sum(shape))
    build = lambda p: ov_opset1.depth_to_space(p, mode, block_size)  # noqa: E731
    moved = cpu_plugin(build, shape)()
    assert_same_bits(run(data, mode, block_size), from_positions(data, moved))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """DepthToSpace of float32 and int8 [1, 64, H, H] of ``nbytes``, block_size 2,
    blocks_first."""
    return [
        _benchmark_case(nbytes, np.dtype(np.float32)),
        _benchmark_case(nbytes, np.dtype(np.int8)),
    ]


def _benchmark_case(nbytes: int, dtype: np.dtype[Any]) -> BenchmarkCase:
    side = int((nbytes // dtype.itemsize // 64) ** 0.5)
    data = (np.arange(64 * side * side) % 5).astype(dtype).reshape(1, 64, side, side)
    attributes = {"mode": "blocks_first", "block_size": 2}

    def model() -> Any:
        return plugin_model(lambda p: ov_opset1.depth_to_space(p, "blocks_first", 2), data)

    label = f"[1, 64, H, W], bs 2, {short(dtype)}"
    return BenchmarkCase("depth_to_space", label, {"data": data},
                         attributes, data.dtype, 2 * data.nbytes, model)  # fmt: skip
