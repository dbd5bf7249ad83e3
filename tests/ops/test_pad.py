"""Pad-12 (app/ops/pad.py): the four modes and negative pads as the spec's examples show them,
every element type to the bit, the output sized before it exists, the refusals, and OpenVINO's CPU
plugin on generated cases."""

from typing import Any

import numpy as np
import numpy.typing as npt
import openvino.opset1 as ov_opset1
import openvino.opset12 as ov_opset12
import pytest

from app.ops.declaration import Plan
from app.ops.errors import SpecError
from app.ops.pad import OP, pad, pad_shape
from app.registry import REGISTRY
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    ELEMENT_TYPES,
    BenchmarkCase,
    assert_same_bits,
    constant,
    cpu_plugin,
    from_positions,
    least_traced_bytes,
    plugin_model,
    sample,
    short,
    square,
    watch_stream_flags,
)

MODES = ["constant", "edge", "reflect", "symmetric"]


def run(data: Any, begin: Any, end: Any, mode: str, value: Any = None) -> Any:
    arrays = {"data": np.asarray(data), "pads_begin": np.asarray(begin),
              "pads_end": np.asarray(end)}  # fmt: skip
    if value is not None:
        arrays["pad_value"] = np.asarray(value)
    plan = OP.plan(arrays, {"pad_mode": mode})
    assert isinstance(plan, Plan)
    return plan.run(None)


def reference(
    data: npt.NDArray[Any], begin: list[int], end: list[int], mode: str, value: Any = 0
) -> npt.NDArray[Any]:
    """NumPy's pad of the positive pads on the whole data, then the negative ones cropped: the
    spec's mixed examples (reflect reads rows the other end crops)."""
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end, strict=True)]
    pad_any: Any = np.pad  # NumPy's stubs take the mode as a literal
    if mode == "constant":
        padded = pad_any(data, widths, mode="constant", constant_values=value)
    else:
        padded = pad_any(data, widths, mode=mode)
    crop = []
    for axis, (b, e) in enumerate(zip(begin, end, strict=True)):
        first = max(-b, 0)
        crop.append(slice(first, max(first, padded.shape[axis] - max(-e, 0))))
    result: npt.NDArray[Any] = padded[tuple(crop)]
    return result


def test_it_is_collected() -> None:
    assert REGISTRY["pad"] is OP


@pytest.mark.parametrize("name", list(OP.examples))
def test_the_specs_examples(name: str) -> None:
    request = dict(OP.examples[name]["value"])
    value = request.pop("pad_value", None)
    got = run(request["data"], request["pads_begin"], request["pads_end"], request["pad_mode"],
              None if value is None else np.int64(value))  # fmt: skip
    assert got.tolist() == OP.examples[name]["x-expected-output"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ELEMENT_TYPES, ids=str)
def test_every_type_to_the_bit(dtype: np.dtype[Any], mode: str) -> None:
    data = sample(dtype, (3, 4), seed=4)
    begin, end = [2, -1], [-1, 3]
    value = sample(dtype, (), seed=5) if mode == "constant" else None
    got = run(data, begin, end, mode, value)
    expected = reference(data.view(_raw(dtype)), begin, end, mode,
                         0 if value is None else value.view(_raw(dtype)))  # fmt: skip
    assert_same_bits(got, expected.view(dtype) if dtype.kind != "b" else expected.astype(bool))


def _raw(dtype: np.dtype[Any]) -> Any:
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]


def test_pad_value_defaults_to_zero_and_takes_data_type() -> None:
    assert run([1.5], [1], [1], "constant").tolist() == [0.0, 1.5, 0.0]
    assert pad(np.array([1, 2], np.int8), [0], [2], np.int8(-3)).tolist() == [1, 2, -3, -3]


def test_the_shape_is_known_without_allocating() -> None:
    begin, end = np.array([1 << 40], np.int64), np.array([0], np.int64)
    assert pad_shape((2,), begin, end, "constant")[2] == ((1 << 40) + 2,)
    assert pad_shape((5,), np.array([-10]), np.array([-10]), "edge")[2] == (0,)


def test_rank_0_and_empty() -> None:
    assert run(np.float32(2), np.zeros(0, np.int64), np.zeros(0, np.int64), "edge").tolist() == 2.0
    assert run(np.zeros((0, 2)), [1, 0], [0, 0], "constant").shape == (1, 2)
    assert run(np.zeros((0, 2)), [0, 1], [0, 0], "symmetric").shape == (0, 3)


@pytest.mark.parametrize(
    ("begin", "end", "mode", "value", "field", "words"),
    [
        ([3, 0], [0, 0], "reflect", None, "pads_begin", "not greater than data.shape[0] - 1"),
        ([0, 0], [0, 5], "symmetric", None, "pads_end", "not greater than data.shape[1]"),
        ([0], [0, 0], "edge", None, "pads_begin", "1D tensor"),
        ([0, 0], [[0, 0]], "edge", None, "pads_end", "1D tensor"),
        ([0, 0], [0, 0], "edge", 1.0, "pad_value", '"constant" mode only'),
        ([0, 0], [0, 0], "constant", [1.0], "pad_value", "scalar"),
        ([0, 0], [0, 0], "constant", np.float32(1), "pad_value", "type of data"),
        ([0.0, 0.0], [0, 0], "constant", None, "pads_begin", "integer type"),
    ],
)
def test_refusals_name_the_field(
    begin: Any, end: Any, mode: str, value: Any, field: str, words: str
) -> None:
    with pytest.raises(SpecError) as refused:
        run(np.zeros((3, 4)), begin, end, mode, value)
    assert refused.value.field == field
    assert words in refused.value.message


def test_edge_mode_refuses_to_pad_an_empty_dimension() -> None:
    with pytest.raises(SpecError) as refused:
        run(np.zeros((0, 2)), [1, 0], [0, 0], "edge")
    assert refused.value.field == "pads_begin"


def _cases() -> list[tuple[tuple[int, ...], list[int], list[int], str]]:
    rng = np.random.default_rng(23)
    cases = []
    for index in range(80):
        rank = int(rng.integers(1, 4))
        shape = tuple(int(size) for size in rng.integers(2, 5, rank))
        mode = MODES[index % 4]
        top = {"constant": 3, "edge": 3, "reflect": 1, "symmetric": 2}[mode]
        begin = [int(value) for value in rng.integers(-1, top + 1, rank)]
        end = [int(value) for value in rng.integers(-1, top + 1, rank)]
        cases.append((shape, begin, end, mode))
    return cases


@pytest.mark.parametrize(("shape", "begin", "end", "mode"), _cases())
def test_openvino_cpu_plugin_agrees(
    shape: tuple[int, ...], begin: list[int], end: list[int], mode: str
) -> None:
    dtype = ELEMENT_TYPES[(sum(shape) + sum(begin)) % len(ELEMENT_TYPES)]
    data = sample(dtype, shape, seed=sum(end) % 31)
    ours = run(data, begin, end, mode)
    if 0 in ours.shape:
        pytest.skip("an empty output is not asked of the CPU plugin")

    def build(parameter: Any) -> Any:
        pads = (constant(np.array(begin, np.int64)), constant(np.array(end, np.int64)))
        if mode == "constant":
            return ov_opset12.pad(parameter, *pads, "constant", constant(np.array(0, np.int32)))
        return ov_opset12.pad(parameter, *pads, mode)

    moved = cpu_plugin(build, shape)()
    assert_same_bits(ours, from_positions(data, moved))


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """Pad of a matrix of ``nbytes / 4`` to twice each side, in each mode, float32 and int8."""
    return [_pad_case(nbytes, mode, dtype) for mode in MODES for dtype in BENCHMARK_DTYPES]


def _pad_case(nbytes: int, mode: str, dtype: Any) -> BenchmarkCase:
    data = square(nbytes // 4, dtype)
    begin = np.array([data.shape[0] // 2, data.shape[1] // 2])
    end = np.array([data.shape[0] - begin[0], data.shape[1] - begin[1]])
    name = short(dtype)

    def model() -> Any:
        if mode != "constant":
            build = lambda p: ov_opset12.pad(p, constant(begin), constant(end), mode)  # noqa: E731
            return plugin_model(build, data)
        zero = constant(np.array(0, np.int32))
        build = lambda p: ov_opset12.pad(  # noqa: E731
            p, constant(begin), constant(end), "constant", ov_opset1.convert(zero, name)
        )
        return plugin_model(build, data)

    arrays = {"data": data, "pads_begin": begin, "pads_end": end}
    return BenchmarkCase("pad", f"{mode}, x2 each side, {name}", arrays, {"pad_mode": mode},
                         data.dtype, 5 * data.nbytes, model)  # fmt: skip


def test_a_small_request_for_a_terabyte_is_refused_before_anything_exists() -> None:
    """A request of a few bytes padding to 2**40 elements: 413 at once, naming the limit."""
    import asyncio  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    from app.main import create_app  # noqa: PLC0415
    from app.settings import Settings  # noqa: PLC0415

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(Settings(grpc_port=0)))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            body = {"data": [[1.5]], "pads_begin": [1 << 20, 0], "pads_end": [0, 1 << 20],
                    "pad_mode": "constant"}  # fmt: skip
            return await client.post("/pad", json=body)

    response = asyncio.run(ask())
    assert response.status_code == 413
    assert "TENSOR_OPS_MAX_OUTPUT_BYTES" in response.json()["detail"][0]["msg"]


def _at_odd_address(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A C-ordered copy of ``array`` one byte past an aligned address (as a V2 binary tensor
    read from a body at an odd offset is)."""
    buffer = np.zeros(array.nbytes + 1, np.uint8)
    moved: npt.NDArray[Any] = buffer[1:].view(array.dtype).reshape(array.shape)
    moved[...] = array
    return moved


@pytest.mark.parametrize("stream", [False, True], ids=["regular stores", "non-temporal stores"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.float64], ids=str)
def test_long_rows_are_written_whole_to_the_bit(
    dtype: Any, mode: str, stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of 256 bytes and more are written whole, one after another, by the compiled row
    loop; with non-temporal stores when the output and its rows are large
    (``raw.STREAM_BYTES``, lowered here to 0 or raised out of reach; ``STREAM_ROW_BYTES`` 0):
    runs reversed, forward, repeated and constant (a value whose bits are all set but one, a
    NaN's payload in floats), starting and ending off a 64-byte line, cropped by negative pads,
    whole rows of the constant, rank 1 to 3, the data and the output one byte off an aligned
    address. The same bits as NumPy's pad, and the row loop ran."""
    from app.ops import compiled, loops, raw  # noqa: PLC0415
    from app.ops import pad as pad_module  # noqa: PLC0415

    assert loops.ready_module() is compiled
    monkeypatch.setattr(raw, "STREAM_BYTES", 0 if stream else 1 << 62)
    monkeypatch.setattr(pad_module, "STREAM_ROW_BYTES", 0)
    calls = watch_stream_flags(monkeypatch, compiled, "pad_rows")
    cases = [((5, 301), [2, 67], [3, 133]), ((3, 4, 700), [1, -1, 99], [2, 1, -5]),
             ((1000,), [37], [500]), ((4, 300), [-5, 0], [2, 0])]  # fmt: skip
    raw_type = _raw(np.dtype(dtype))
    value = None
    if mode == "constant":  # every bit set but the lowest
        value = np.array(np.iinfo(raw_type).max - 1, raw_type).view(dtype)
    for seed, (shape, begin, end) in enumerate(cases):
        data = sample(np.dtype(dtype), shape, seed=seed)
        bits = 0 if value is None else value.view(raw_type)
        expected = reference(data.view(raw_type), begin, end, mode, bits)
        assert_same_bits(run(data, begin, end, mode, value), expected.view(dtype))
        arrays = {"data": _at_odd_address(data), "pads_begin": np.array(begin),
                  "pads_end": np.array(end)}  # fmt: skip
        if value is not None:
            arrays["pad_value"] = value
        plan = OP.plan(arrays, {"pad_mode": mode})
        assert isinstance(plan, Plan)
        out = _at_odd_address(np.zeros(plan.output_shape, dtype))
        plan.run(out)
        assert_same_bits(out, expected.view(dtype))
    assert calls and set(calls) == {int(stream)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(300, 500), (6, 40, 50), (2, 3, 4, 5, 6)])
def test_the_declared_workspace_covers_what_the_copy_holds(
    mode: str, shape: tuple[int, ...]
) -> None:
    """Every byte the modes allocate while they run (traced, into a
    ready output) is within the op's declared workspace: copies of slices hold no index array,
    no intermediate the size of the data (issue 42, point 3: +303 MiB held, 124 reserved)."""
    data = sample(np.dtype(np.float32), shape, seed=7)
    begin = np.array([size // 2 for size in shape])
    end = np.array([size - 1 for size in shape])
    arrays = {"data": data, "pads_begin": begin, "pads_end": end}
    attributes = {"pad_mode": mode}
    plan = OP.plan(arrays, attributes)
    assert isinstance(plan, Plan)
    out = np.empty(plan.output_shape, data.dtype)
    held = least_traced_bytes(lambda: plan.run(out))
    assert held <= OP.workspace(arrays, attributes)
    widths = list(zip(begin.tolist(), end.tolist(), strict=True))
    reference = np.pad(data, widths, mode=mode)  # type: ignore[call-overload]
    assert_same_bits(out, reference)
