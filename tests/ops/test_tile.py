"""Tile-1 (app/ops/tile.py): the spec's rules and promotions, every element type to the bit, the
output sized before it exists, and OpenVINO's CPU plugin on generated cases."""

from typing import Any

import numpy as np
import openvino.opset1 as ov_opset1
import pytest

from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.ops.tile import OP, tile, tile_shape
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


def run(data: Any, repeats: Any) -> Any:
    plan = OP.plan({"data": np.asarray(data), "repeats": np.asarray(repeats)}, {})
    assert isinstance(plan, Plan)
    return plan.run(None)


def test_it_is_collected() -> None:
    assert REGISTRY["tile"] is OP


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (2, 3), seed=5)
    assert_same_bits(run(data, np.array([2, 1, 3], np.uint16)), np.tile(data, (2, 1, 3)))
    assert_same_bits(tile(data, [3]), np.tile(data, 3))


def test_the_specs_examples_shapes() -> None:
    data = np.zeros((2, 3, 4))
    assert run(data, [1, 2, 3]).shape == (2, 6, 12)
    assert run(data, [5, 1, 2, 3]).shape == (5, 2, 6, 12)
    assert run(np.zeros((5, 2, 3, 4)), [1, 2, 3]).shape == (5, 2, 6, 12)


def test_empty_repeats_zero_factors_rank_0_and_empty_data() -> None:
    data = sample(np.dtype(np.int16), (2, 2))
    assert_same_bits(run(data, np.zeros(0, np.int64)), data.copy())
    assert run(data, [0, 2]).shape == (0, 4)
    assert run(np.float32(2.5), [3]).tolist() == [2.5, 2.5, 2.5]
    assert run(np.float32(2.5), np.zeros(0, np.int64)).tolist() == 2.5
    assert run(np.zeros((0, 2)), [3, 1]).shape == (0, 2)


def test_the_shape_is_known_without_allocating() -> None:
    """A terabyte's shape, from Python integers: the service refuses it before any array."""
    assert tile_shape((2,), np.array([1 << 40], np.int64)) == (2 << 40,)
    assert tile_shape((1,), np.array([2**63 - 1, 2**63 - 1], np.int64))[0] == 2**63 - 1


def test_into_a_given_output() -> None:
    out = np.empty((2, 4), np.int8)
    assert tile(np.array([1, 2], np.int8), [2, 2], out) is out
    assert out.tolist() == [[1, 2, 1, 2], [1, 2, 1, 2]]


def _at_odd_address(array: Any) -> Any:
    """``array``'s copy one byte past an aligned address (its elements off their width)."""
    buffer = np.zeros(array.nbytes + 1, np.uint8)
    moved: Any = buffer[1:].view(array.dtype).reshape(array.shape)
    moved[...] = array
    return moved


@pytest.mark.parametrize("stream", [False, True], ids=["regular stores", "non-temporal stores"])
@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_a_large_output_of_long_runs_by_non_temporal_stores(
    dtype: np.dtype[Any], stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large output whose runs of data are long is the compiled strided copy's, written by
    non-temporal stores (``raw.STREAM_BYTES``, ``raw.STREAM_ROW_BYTES`` and
    ``raw.COPY_VIEW_FROM`` lowered to 0 here; raised out of reach: NumPy's copy): runs of odd
    lengths starting and ending off a 64-byte line, inner and outer axes repeated, ranks
    promoted, the output and the data one byte off an aligned address; the same bits as
    ``np.tile``, NaN payloads and -0.0 kept."""
    from app.ops import compiled, loops, raw  # noqa: PLC0415

    assert loops.ready_module() is compiled
    for name in ("STREAM_BYTES", "STREAM_ROW_BYTES", "COPY_VIEW_FROM"):
        monkeypatch.setattr(raw, name, 0 if stream else 1 << 62)
    streamed = watch_stream_flags(monkeypatch, compiled, "strided_copy")
    cases = [((5, 333), [2, 2]), ((3, 1, 67), [2, 3, 1]), ((129,), [3]), ((2, 9), [4, 1, 3]),
             ((7, 65), [1, 2])]  # fmt: skip
    for seed, (shape, repeats) in enumerate(cases):
        data = sample(dtype, shape, seed=seed)
        expected = np.tile(data, repeats)
        before = len(streamed)
        assert_same_bits(run(data, repeats), expected)
        out = _at_odd_address(np.zeros(expected.shape, dtype))
        tile(_at_odd_address(data), repeats, out)
        assert_same_bits(out, expected)
        assert set(streamed[before:]) == ({1} if stream else set()), (shape, repeats)
    assert raw.streams_runs([2, 5, 2, 333], [1, 5, 1, 333], np.empty((10, 666), dtype)) == stream


@pytest.mark.parametrize(
    ("repeats", "words"),
    [
        ([-1], "0 or more"),
        ([2, -3], "repeats[1] = -3"),
        (2, "1D tensor"),
        ([[2]], "1D tensor"),
        ([2.0], "integer type"),
    ],
)
def test_refusals_name_the_field(repeats: Any, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        run(np.zeros(3), np.asarray(repeats))
    assert refused.value.field == "repeats"
    assert words in refused.value.message


def _cases() -> list[tuple[tuple[int, ...], list[int]]]:
    rng = np.random.default_rng(13)
    cases = []
    for _ in range(60):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(size) for size in rng.integers(1, 4, rank))
        count = int(rng.integers(1, 6))
        repeats = [int(value) for value in rng.integers(1, 4, count)]
        cases.append((shape, repeats))
    return cases


@pytest.mark.parametrize(("shape", "repeats"), _cases())
def test_openvino_cpu_plugin_agrees(shape: tuple[int, ...], repeats: list[int]) -> None:
    dtype = ELEMENT_TYPES[(sum(shape) + len(repeats)) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=sum(repeats))
    factors = np.array(repeats, np.int64)
    moved = cpu_plugin(lambda p: ov_opset1.tile(p, constant(factors)), shape)()
    assert_same_bits(run(data, factors), from_positions(data, moved))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Tile of a matrix of ``nbytes / 4`` by [2, 2], float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """Tile of a matrix of ``nbytes / 4`` by [2, 2]."""
    data = square(nbytes // 4, dtype)
    repeats = np.array([2, 2])

    def model() -> Any:
        return plugin_model(lambda p: ov_opset1.tile(p, constant(repeats)), data)

    return BenchmarkCase("tile", f"[2, 2], {short(dtype)}", {"data": data, "repeats": repeats}, {},
                         data.dtype, 5 * data.nbytes, model)  # fmt: skip


def test_a_small_request_for_a_terabyte_is_refused_before_anything_exists() -> None:
    """A 40-byte request asking for 2**41 elements: 413 at once, naming the limit, on the JSON
    route and /v2 alike (admission checks the planner's shape before any array exists)."""
    import asyncio  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    from app.main import create_app  # noqa: PLC0415
    from app.settings import Settings  # noqa: PLC0415

    async def ask() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=create_app(Settings(grpc_port=0)))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            route = await client.post("/tile", json={"data": [1.5, 2.5], "repeats": [1 << 40]})
            tensors = [
                {"name": "data", "shape": [1], "datatype": "FP32", "data": [1]},
                {"name": "repeats", "shape": [2], "datatype": "INT64", "data": [1 << 20, 1 << 20]},
            ]
            v2 = await client.post("/v2/models/tile/infer", json={"inputs": tensors})
            return [route, v2]

    route, v2 = asyncio.run(ask())
    assert route.status_code == 413
    assert "TENSOR_OPS_MAX" in route.json()["detail"][0]["msg"]
    assert v2.status_code == 413
    assert "TENSOR_OPS_MAX" in v2.json()["error"]
