"""Broadcast-3 and Broadcast-1 (app/ops/broadcast.py): the spec's examples and its three modes,
every element type to the bit, the output sized before it exists (a terabyte refused 413 at
once), the refusals, and OpenVINO's CPU plugin on generated cases."""

from typing import Any

import numpy as np
import openvino.opset1 as ov_opset1
import openvino.opset3 as ov_opset3
import pytest

from app.ops import broadcast as module
from app.ops.broadcast import broadcast, broadcast_shapes
from app.ops.declaration import Plan
from app.ops.errors import SpecError
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
    watch_stream_flags,
)


def _ints(values: Any) -> Any:
    """A list as int64 (an empty one too), an array as it is."""
    return values if isinstance(values, np.ndarray) else np.array(values, np.int64)


def run(
    data: Any,
    target_shape: Any,
    axes_mapping: Any = None,
    mode: str | None = None,
    version: int = 3,
) -> Any:
    arrays = {"data": np.asarray(data), "target_shape": _ints(target_shape)}
    if axes_mapping is not None:
        arrays["axes_mapping"] = _ints(axes_mapping)
    op = module.OP if version == 3 else module.OP_1
    plan = op.plan(arrays, {"mode": mode or "numpy"})
    assert isinstance(plan, Plan)
    return plan.run(None)


def test_both_versions_are_collected() -> None:
    from app.registry import REGISTRY  # noqa: PLC0415

    assert REGISTRY["broadcast"] is module.OP
    assert module.OP.version == 3
    assert module.OLDER == (module.OP_1,)
    assert module.OP_1.version == 1
    assert module.OP_1.name == "broadcast"
    assert [item.name for item in module.OP.inputs if item.optional] == ["axes_mapping"]
    modes = [op.attribute("mode") for op in (module.OP, module.OP_1)]
    assert [None if mode is None else mode.choices for mode in modes] == [
        ("numpy", "explicit", "bidirectional"),
        ("numpy", "explicit"),
    ]


# The spec's four examples (the same three in Broadcast-1, without the bidirectional one).
EXAMPLES: list[tuple[tuple[int, ...], list[int], list[int] | None, str, tuple[int, ...]]] = [
    ((16, 1, 1), [1, 16, 50, 50], None, "numpy", (1, 16, 50, 50)),
    ((16,), [1, 16, 50, 50], [1], "explicit", (1, 16, 50, 50)),
    ((50, 50), [1, 50, 50, 16], [1, 2], "explicit", (1, 50, 50, 16)),
    ((16, 1, 1), [1, 1, 50, 50], None, "bidirectional", (1, 16, 50, 50)),
]


@pytest.mark.parametrize(("shape", "target", "mapping", "mode", "expected"), EXAMPLES)
def test_the_spec_examples(
    shape: tuple[int, ...],
    target: list[int],
    mapping: list[int] | None,
    mode: str,
    expected: tuple[int, ...],
) -> None:
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    versions = (3,) if mode == "bidirectional" else (3, 1)
    for version in versions:
        got = run(data, target, mapping, mode, version)
        assert got.shape == expected
        if mapping is None:
            reference = np.broadcast_to(data, expected)
        else:
            aligned = [1] * len(target)
            for axis, size in zip(mapping, shape, strict=True):
                aligned[axis] = size
            reference = np.broadcast_to(data.reshape(aligned), expected)
        assert_same_bits(got, reference)


def test_the_declared_examples_answer_as_they_say() -> None:
    for op in (module.OP, module.OP_1):
        for name, item in op.examples.items():
            request = item["value"]
            arrays = {key: np.asarray(value) for key, value in request.items() if key != "mode"}
            plan = op.plan(arrays, {"mode": request.get("mode", "numpy")})
            assert isinstance(plan, Plan)
            assert plan.run(None).tolist() == item["x-expected-output"], name


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any]) -> None:
    data = sample(dtype, (2, 1, 3), seed=7)
    target = np.array([4, 2, 5, 3], np.uint8)
    assert_same_bits(run(data, target), np.broadcast_to(data, (4, 2, 5, 3)))
    assert_same_bits(run(data, [5, 1], mode="bidirectional"), np.broadcast_to(data, (2, 5, 3)))
    explicit = run(data, np.array([2, 6, 4, 3], np.int16), [0, 2, 3], "explicit", 1)
    assert_same_bits(explicit, np.broadcast_to(data[:, None], (2, 6, 4, 3)))


@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_a_large_output_of_long_rows_by_non_temporal_stores(
    dtype: np.dtype[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large output whose rows (the trailing axes data has whole) are long is the compiled
    strided copy's, written by non-temporal stores (``raw.STREAM_BYTES``,
    ``raw.STREAM_ROW_BYTES`` and ``raw.COPY_VIEW_FROM`` lowered to 0 here): rows of odd
    lengths, several axes broadcast, leading ones added, a column (rows of one element
    repeated: NumPy's); the same bits, NaN payloads and -0.0 kept."""
    from app.ops import compiled, loops, raw  # noqa: PLC0415

    assert loops.ready_module() is compiled
    for name in ("STREAM_BYTES", "STREAM_ROW_BYTES", "COPY_VIEW_FROM"):
        monkeypatch.setattr(raw, name, 0)
    streamed = watch_stream_flags(monkeypatch, compiled, "strided_copy")
    cases = [((1, 333), [7, 333]), ((3, 1, 5, 7), [2, 3, 4, 5, 7]), ((1, 1, 65), [3, 5, 65]),
             ((2, 1, 9), [2, 3, 9]), ((129,), [129])]  # fmt: skip
    for seed, (shape, target) in enumerate(cases):
        data = sample(dtype, shape, seed=seed)
        before = len(streamed)
        assert_same_bits(run(data, target), np.broadcast_to(data, tuple(target)))
        assert len(streamed) > before and set(streamed[before:]) == {1}, (shape, target)
    column = sample(dtype, (5, 1), seed=9)
    before = len(streamed)
    assert_same_bits(run(column, [5, 4]), np.broadcast_to(column, (5, 4)))
    assert len(streamed) == before
    assert not raw.streams_runs((5, 1), (5, 4), np.empty((5, 4), dtype))


def test_properties_against_numpy() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        rank = int(rng.integers(0, 4))
        shape = tuple(int(v) for v in rng.integers(0, 3, rank))
        extra = [int(v) for v in rng.integers(0, 3, int(rng.integers(0, 3)))]
        target = extra + [size if size != 1 else int(rng.integers(0, 3)) for size in shape]
        data = rng.integers(0, 100, shape).astype(np.int32)
        assert_same_bits(run(data, target), np.broadcast_to(data, tuple(target)))
        # Bidirectional: as numpy.array(input) * numpy.ones(target_shape), shape-wise.
        lead = [int(v) for v in rng.integers(0, 3, int(rng.integers(0, 3)))]
        other = lead + [size if rng.integers(0, 2) else 1 for size in shape]
        expected_shape = np.broadcast_shapes(shape, tuple(other))
        got = run(data, other, mode="bidirectional")
        assert_same_bits(got, np.broadcast_to(data, expected_shape))
        assert got.shape == (np.zeros(shape) * np.ones(other)).shape


def test_one_against_zero_is_zero_in_bidirectional_mode() -> None:
    """numpy.array(input) * numpy.ones(target_shape): a 1 against a 0 is 0, either way."""
    assert run(np.ones((1, 3)), [0, 1], mode="bidirectional").shape == (0, 3)
    assert run(np.ones((0, 3)), [1, 1], mode="bidirectional").shape == (0, 3)
    assert run(np.ones((2, 1)), [4, 1, 0], mode="bidirectional").shape == (4, 2, 0)
    # Numpy mode broadcasts data only: its 1 becomes the target's 0, its 0 never a 1.
    assert run(np.ones((1, 3)), [0, 3]).shape == (0, 3)
    with pytest.raises(SpecError) as refused:
        run(np.ones((0, 3)), [1, 3])
    assert refused.value.field == "target_shape"


def test_scalars_and_empty_target_shapes() -> None:
    assert run(np.float64(2.5), np.zeros(0, np.int64)).tolist() == 2.5
    assert run(np.int8(-1), [2, 3]).tolist() == [[-1] * 3] * 2
    assert run(np.int8(-1), [2], [], "explicit").tolist() == [-1, -1]
    assert run(np.ones((2, 3)), np.zeros(0, np.int32), mode="bidirectional").shape == (2, 3)


def test_the_shape_is_known_without_allocating() -> None:
    """A terabyte's shape, from Python integers: admission refuses it before any array."""
    shape, _ = broadcast_shapes((1,), np.array([1 << 20, 1 << 20]), None, "numpy")
    assert shape == (1 << 20, 1 << 20)
    shape, _ = broadcast_shapes((1,), np.array([2**63 - 1]), None, "bidirectional")
    assert shape == (2**63 - 1,)


def test_into_a_given_output() -> None:
    out = np.empty((2, 2), np.int8)
    assert broadcast(np.array([1, 2], np.int8), [2, 2], out=out) is out
    assert out.tolist() == [[1, 2], [1, 2]]


@pytest.mark.parametrize(
    ("shape", "target", "mapping", "mode", "field", "words"),
    [
        ((3,), [-1], None, "numpy", "target_shape", "cannot be negative"),
        ((3,), [[3]], None, "numpy", "target_shape", "1D tensor"),
        ((3,), [3.0], None, "numpy", "target_shape", "integer type"),
        ((3,), [2], None, "numpy", "target_shape", "must equal the target's or be 1"),
        ((2, 3), [3], None, "numpy", "target_shape", "not the other way"),
        ((3,), [3], [0], "numpy", "axes_mapping", "explicit only"),
        ((3,), [3], [0], "bidirectional", "axes_mapping", "explicit only"),
        ((3,), [2], None, "bidirectional", "target_shape", "one of them 1"),
        ((3,), [2, 3], None, "explicit", "axes_mapping", "required"),
        ((3,), [2, 3], [0, 1], "explicit", "axes_mapping", "one element per dimension"),
        ((3, 3), [3, 3], [1, 0], "explicit", "axes_mapping", "sorted"),
        ((3, 3), [3, 3], [1, 1], "explicit", "axes_mapping", "sorted"),
        ((3,), [3], [1], "explicit", "axes_mapping", "not an axis of the output"),
        ((3,), [3], [-1], "explicit", "axes_mapping", "not an axis of the output"),
        ((3,), [2, 4], [1], "explicit", "axes_mapping", "must equal it or be 1"),
        ((3,), [3], [0.0], "explicit", "axes_mapping", "integer type"),
        ((3,), [3], None, "sideways", "mode", "must be one of"),
    ],
)
def test_refusals_name_the_field(
    shape: tuple[int, ...], target: Any, mapping: Any, mode: str, field: str, words: str
) -> None:
    with pytest.raises(SpecError) as refused:
        broadcast(np.zeros(shape), np.asarray(target), mapping, mode)
    assert refused.value.field == field
    assert words in refused.value.message


def test_broadcast_1_has_no_bidirectional_mode() -> None:
    with pytest.raises(SpecError) as refused:
        broadcast(np.zeros(3), [3], mode="bidirectional", version=1)
    assert refused.value.field == "mode"
    assert '"numpy", "explicit"' in refused.value.message


def _cases() -> list[tuple[str, tuple[int, ...], list[int], list[int] | None]]:
    rng = np.random.default_rng(31)
    cases: list[tuple[str, tuple[int, ...], list[int], list[int] | None]] = []
    for number in range(90):
        mode = ("numpy", "explicit", "bidirectional")[number % 3]
        rank = int(rng.integers(0, 4))
        shape = tuple(int(v) for v in rng.integers(1, 4, rank))
        extra = [int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3)))]
        if mode == "explicit":
            length = rank + len(extra)
            axes = sorted(int(v) for v in rng.choice(length, rank, replace=False))
            target = [int(v) for v in rng.integers(1, 4, length)]
            for axis, size in zip(axes, shape, strict=True):
                if size != 1:  # a 1 of data's is replicated to any size
                    target[axis] = size
            cases.append((mode, shape, target, axes))
            continue
        target = [*extra, *(size if size != 1 else int(rng.integers(1, 4)) for size in shape)]
        if mode == "bidirectional":
            target = [1 if rng.integers(0, 3) == 0 else size for size in target]
        cases.append((mode, shape, target, None))
    return cases


@pytest.mark.parametrize(("mode", "shape", "target", "mapping"), _cases())
def test_openvino_cpu_plugin_agrees(
    mode: str, shape: tuple[int, ...], target: list[int], mapping: list[int] | None
) -> None:
    dtype = ELEMENT_TYPES[(sum(shape) + len(target)) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=sum(target))
    ours = run(data, target, mapping, mode)
    values = [constant(np.array(target, np.int64))]
    if mapping is not None:
        values.append(constant(np.array(mapping, np.int64)))
    moved = cpu_plugin(
        lambda p: ov_opset3.broadcast(p, *values, broadcast_spec=mode.upper()), shape
    )()
    assert_same_bits(ours, from_positions(data, moved))
    if mode != "bidirectional":
        version_1 = cpu_plugin(lambda p: ov_opset1.broadcast(p, *values, mode=mode.upper()), shape)
        assert_same_bits(run(data, target, mapping, mode, 1), from_positions(data, version_1()))


def test_the_cpu_plugin_disagreement_is_as_listed() -> None:
    """Bidirectional, data of shape (1,) against target_shape [0]: the spec's rule gives (0,);
    the CPU plugin gives (1,) (listed in the op's disagreements; this fails when it changes)."""
    assert run(np.ones(1, np.int32), [0], mode="bidirectional").shape == (0,)
    target = constant(np.array([0], np.int64))
    moved = cpu_plugin(
        lambda p: ov_opset3.broadcast(p, target, broadcast_spec="BIDIRECTIONAL"), [1]
    )()
    assert moved.shape == (1,)
    assert any("[0]" in line and "(1,)" in line for line in module.OP.disagreements)
    with pytest.raises(RuntimeError):
        cpu_plugin(
            lambda p: ov_opset3.broadcast(
                p, constant(np.array([1])), broadcast_spec="BIDIRECTIONAL"
            ),
            [0],
        )


def test_a_small_request_for_a_terabyte_is_refused_before_anything_exists() -> None:
    """A few bytes asking for 2**40 float64 elements: 413 at once on the JSON route, naming the
    limit (admission sizes the planner's shape before any array exists)."""
    import asyncio  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    from app.main import create_app  # noqa: PLC0415
    from app.settings import Settings  # noqa: PLC0415

    async def ask() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=create_app(Settings(grpc_port=0)))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            body = {"data": [1.5], "target_shape": [1 << 20, 1 << 20]}
            newest = await client.post("/broadcast", json=body)
            older = await client.post("/broadcast/v1", json={**body, "mode": "numpy"})
            mapped = {"data": [2], "target_shape": [1 << 20, 1, 1 << 20], "axes_mapping": [1]}
            explicit = await client.post("/broadcast", json={**mapped, "mode": "explicit"})
            return [newest, older, explicit]

    for answer in asyncio.run(ask()):
        assert answer.status_code == 413, answer.text
        assert "TENSOR_OPS_MAX" in answer.json()["detail"][0]["msg"]


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """One row broadcast to a square of ``nbytes``, float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """One row broadcast to a square of ``nbytes``."""
    side = int((nbytes // np.dtype(dtype).itemsize) ** 0.5)
    data = (np.arange(side) % 3).astype(dtype).reshape(1, side)
    target = np.array([side, side])

    def model() -> Any:
        return plugin_model(lambda p: ov_opset3.broadcast(p, constant(target)), data)

    arrays = {"data": data, "target_shape": target}
    moved = data.nbytes + side * side * data.itemsize
    return BenchmarkCase(
        "broadcast", f"row to square, {short(dtype)}", arrays, {}, data.dtype, moved, model
    )
