"""BatchToSpace-2 (app/ops/batch_to_space.py): the spec's formula and examples, every element type
to the bit, refusals naming the input, sizes known before allocating, and OpenVINO's CPU plugin
on generated cases."""

import asyncio
import math
from typing import Any

import httpx
import numpy as np
import openvino.opset2 as ov_opset2
import pytest

from app.main import create_app
from app.ops.batch_to_space import OP, batch_to_space, batch_to_space_layout
from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.registry import REGISTRY
from app.settings import Settings
from tests.ops.movement_support import (
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
from tests.support import npy_b64


def run(data: Any, block_shape: Any, crops_begin: Any, crops_end: Any) -> Any:
    arrays = {
        "data": np.asarray(data),
        "block_shape": np.asarray(block_shape),
        "crops_begin": np.asarray(crops_begin),
        "crops_end": np.asarray(crops_end),
    }
    plan = OP.plan(arrays, {})
    assert isinstance(plan, Plan)
    return plan.run(None)


def spec_formula(data: Any, blocks: list[int], begins: list[int], ends: list[int]) -> Any:
    """Reshape, transpose, reshape, crop: the spec's four steps in NumPy."""
    k = data.ndim - 1
    batch = data.shape[0] // math.prod(blocks)
    x1 = data.reshape(*blocks[1:], batch, *data.shape[1:])
    order = [k] + [a for i in range(k) for a in (k + 1 + i, i)]
    x3 = x1.transpose(order).reshape(batch, *(data.shape[i] * blocks[i] for i in range(1, k + 1)))
    return x3[(slice(None), *(slice(begins[i], x3.shape[i] - ends[i]) for i in range(1, k + 1)))]


def test_it_is_collected() -> None:
    assert REGISTRY["batch_to_space"] is OP


@pytest.mark.parametrize("name", ["example_2d", "example_5d"])
def test_the_specs_examples(name: str) -> None:
    request = OP.examples[name]["value"]
    names = ("data", "block_shape", "crops_begin", "crops_end")
    got = run(*(np.array(request[key]) for key in names))
    assert got.tolist() == OP.examples[name]["x-expected-output"]


def test_the_specs_example_shapes() -> None:
    assert run(np.zeros((10, 2)), [1, 5], [0, 2], [0, 0]).shape == (2, 8)
    got = run(np.zeros((48, 3, 3, 1, 3)), [1, 2, 4, 3, 1], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0])
    assert got.shape == (2, 6, 10, 3, 3)


def test_it_is_the_reverse_of_space_to_batch() -> None:
    """SpaceToBatch-2 by the spec's formula, then BatchToSpace-2 cropping the padding away."""
    data = sample(np.dtype(np.float32), (2, 3, 4), seed=8)
    blocks, pads_begin, pads_end = [1, 2, 3], [0, 1, 1], [0, 0, 1]
    x = np.pad(data, list(zip(pads_begin, pads_end, strict=True)))
    moved = x.reshape(2, 2, 2, 2, 3).transpose(2, 4, 0, 1, 3).reshape(12, 2, 2)
    assert_same_bits(run(moved, blocks, pads_begin, pads_end), data)


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (12, 3, 5), seed=7)
    args = ([1, 2, 3], [0, 1, 2], [0, 0, 2])
    assert_same_bits(run(data, *args), spec_formula(data, *args))
    assert_same_bits(batch_to_space(data, *args), spec_formula(data, *args))


@pytest.mark.parametrize(
    ("shape", "blocks", "begins", "ends"),
    [
        ((4, 1), [1, 4], [0, 0], [0, 0]),
        ((12, 5, 1, 2), [1, 2, 3, 1], [0, 3, 1, 0], [0, 0, 1, 1]),
        ((32, 1, 1, 1, 1), [1, 2, 2, 2, 2], [0, 1, 0, 1, 0], [0, 0, 1, 0, 1]),
        ((1, 2, 3), [1, 1, 1], [0, 1, 0], [0, 1, 3]),
        ((400, 1, 1), [1, 20, 20], [0, 7, 1], [0, 12, 0]),  # 400 blocks, cropped: a temporary
        ((578, 2, 1), [1, 17, 17], [0, 0, 0], [0, 0, 0]),  # 289 blocks, no crop: one copy
        ((289, 2, 2), [1, 17, 17], [0, 33, 0], [0, 1, 34]),  # cropped to nothing
    ],
)
def test_properties_against_numpy(
    shape: tuple[int, ...], blocks: list[int], begins: list[int], ends: list[int]
) -> None:
    data = sample(np.dtype(np.int16), shape, seed=len(shape))
    assert_same_bits(run(data, blocks, begins, ends), spec_formula(data, blocks, begins, ends))


def test_the_temporary_is_declared_as_workspace() -> None:
    arrays = {"data": np.zeros((400, 1, 1), np.int32), "block_shape": np.array([1, 20, 20]),
              "crops_begin": np.array([0, 7, 1]), "crops_end": np.array([0, 12, 0])}  # fmt: skip
    assert OP.workspace(arrays, {}) == 400 * 4
    arrays["crops_begin"] = arrays["crops_end"] = np.zeros(3, np.int64)
    assert OP.workspace(arrays, {}) == 0


def test_index_inputs_of_any_integer_type() -> None:
    data = np.arange(6).reshape(3, 2)
    got = run(data, np.array([1, 3], np.uint8), np.array([0, 1], np.int16), np.zeros(2, np.uint64))
    assert got.tolist() == [[2, 4, 1, 3, 5]]


def test_empty_dimensions() -> None:
    assert run(np.zeros((0, 4), np.int8), [1, 2], [0, 0], [0, 0]).shape == (0, 8)
    assert run(np.zeros((4, 0), np.int8), [1, 2], [0, 0], [0, 0]).shape == (2, 0)
    assert run(np.zeros((4, 1), np.int8), [1, 2], [0, 1], [0, 1]).shape == (2, 0)


def test_into_a_given_output_from_strided_big_endian_data() -> None:
    data = np.arange(4 * 6, dtype=">i4").reshape(4, 6)[:, ::2]
    out = np.full((2, 5), 99, ">i4")
    assert batch_to_space(data, [1, 2], [0, 1], [0, 0], out) is out
    assert out.tolist() == spec_formula(np.ascontiguousarray(data), [1, 2], [0, 1], [0, 0]).tolist()


def test_the_shape_is_known_without_allocating() -> None:
    """An empty batch divides any block product: a shape no array holds, for admission."""
    shape, _, _ = batch_to_space_layout(
        (0, 3), np.array([1, 1 << 40]), np.array([0, 0]), np.array([0, 0])
    )
    assert shape == (0, 3 << 40)


@pytest.mark.parametrize(
    ("arrays", "field", "words"),
    [
        ({"block_shape": [1, 0]}, "block_shape", "greater than or equal to 1"),
        ({"block_shape": [2, 1]}, "block_shape", "block_shape[0] is expected to be 1"),
        ({"block_shape": [1, 4]}, "block_shape", "evenly divisible"),
        ({"block_shape": [1, 1, 1]}, "block_shape", "shape [N], N = 2"),
        ({"block_shape": [[1, 1]]}, "block_shape", "1D tensor"),
        ({"block_shape": [1.0, 1.0]}, "block_shape", "integer type"),
        ({"crops_begin": [0, -1]}, "crops_begin", "greater than or equal to 0"),
        ({"crops_begin": [1, 0]}, "crops_begin", "crops_begin[0] is expected to be 0"),
        ({"crops_end": [0, -2]}, "crops_end", "greater than or equal to 0"),
        ({"crops_end": [2, 0]}, "crops_end", "crops_end[0] is expected to be 0"),
        ({"crops_begin": [0, 4], "crops_end": [0, 3]}, "crops_end", "must be <= "),
        ({"crops_end": [0]}, "crops_end", "got shape [1]"),
        ({"data": [1, 2]}, "data", "rank greater than or equal to 2"),
    ],
)
def test_refusals_name_the_input(arrays: dict[str, Any], field: str, words: str) -> None:
    given = {"data": np.zeros((6, 2)), "block_shape": [1, 3], "crops_begin": [0, 0],
             "crops_end": [0, 0]} | arrays  # fmt: skip
    with pytest.raises(SpecError) as refused:
        OP.plan({name: np.asarray(value) for name, value in given.items()}, {})
    assert refused.value.field == field
    assert words in refused.value.message


def test_a_few_bytes_asking_for_a_terabyte_are_refused_at_once() -> None:
    """An empty batch divides a block of 2**42: the output's shape [0, 2**43] is one no answer
    may have, 413 on the JSON route naming the limit (nothing of that size is made)."""

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(Settings(grpc_port=0)))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            body = {"data": npy_b64(np.zeros((0, 2), np.float32)), "block_shape": [1, 1 << 42],
                    "crops_begin": [0, 0], "crops_end": [0, 0]}  # fmt: skip
            return await client.post("/batch_to_space", json=body)

    response = asyncio.run(ask())
    assert response.status_code == 413, response.text
    message = response.json()["detail"][0]["msg"]
    assert "TENSOR_OPS_MAX" in message or "overflow" in message, message
    assert str(1 << 43) in message, message


def _cases() -> list[tuple[tuple[int, ...], list[int], list[int], list[int]]]:
    rng = np.random.default_rng(37)
    cases = []
    for _ in range(60):
        rank = int(rng.integers(2, 5))
        blocks = [1, *(int(b) for b in rng.integers(1, 4, rank - 1))]
        shape = [math.prod(blocks) * int(rng.integers(1, 3))]
        begins, ends = [0], [0]
        for block in blocks[1:]:
            size = int(rng.integers(1, 4))
            room = size * block
            begin = int(rng.integers(0, room))
            end = int(rng.integers(0, room - begin))
            shape.append(size)
            begins.append(begin)
            ends.append(end)
        cases.append((tuple(shape), blocks, begins, ends))
    return cases


@pytest.mark.parametrize(("shape", "blocks", "begins", "ends"), _cases())
def test_openvino_cpu_plugin_agrees(
    shape: tuple[int, ...], blocks: list[int], begins: list[int], ends: list[int]
) -> None:
    if 0 in spec_formula(np.zeros(shape), blocks, begins, ends).shape:
        pytest.skip("empty outputs are not given to the CPU plugin (reported to crash it)")
    dtype = ELEMENT_TYPES[sum(shape) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=sum(shape))
    inputs = [constant(np.array(values, np.int64)) for values in (blocks, begins, ends)]
    moved = cpu_plugin(lambda p: ov_opset2.batch_to_space(p, *inputs), shape)()
    assert_same_bits(run(data, blocks, begins, ends), from_positions(data, moved))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """BatchToSpace of float32 and int8
    [8, H, H, 16] of ``nbytes``, blocks [1, 2, 2, 1], no crops."""
    return [
        _benchmark_case(nbytes, np.dtype(np.float32)),
        _benchmark_case(nbytes, np.dtype(np.int8)),
    ]


def _benchmark_case(nbytes: int, dtype: np.dtype[Any]) -> BenchmarkCase:
    side = int((nbytes // dtype.itemsize // 128) ** 0.5)
    data = (np.arange(128 * side * side) % 5).astype(dtype).reshape(8, side, side, 16)
    blocks, crops = np.array([1, 2, 2, 1]), np.zeros(4, np.int64)
    arrays = {"data": data, "block_shape": blocks, "crops_begin": crops, "crops_end": crops}

    def model() -> Any:
        inputs = [constant(blocks.astype(np.int64)), constant(crops), constant(crops)]
        return plugin_model(lambda p: ov_opset2.batch_to_space(p, *inputs), data)

    return BenchmarkCase("batch_to_space", f"[8, H, W, 16], [1, 2, 2, 1], {short(dtype)}",
                         arrays, {}, data.dtype, 2 * data.nbytes, model)  # fmt: skip
