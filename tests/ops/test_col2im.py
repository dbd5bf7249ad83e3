"""Col2Im-15: the spec's examples (shapes), its rules, every element type to the bit, a loop
over the spec's formula, and OpenVINO's CPU plugin.

Where no pixel is reached twice the op only moves data: the plugin is given int32 *positions*
(1..n) and its answer says which element lands where (0: no block), bit-exact for every type.
Where blocks overlap it adds: the plugin is given int32 and float32 small integers (exact in any
order). ``DIFFERENTIAL_CASES`` cases from a fixed seed.
"""

import contextlib
import functools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset15 as ov_opset15
import pytest
from openvino import op as ov_op

from app.ops import col2im as col2im_module
from app.ops import loops, numpy_loops
from app.ops.col2im import OP, col2im, col2im_plan
from app.ops.errors import SpecError
from tests.cases import DATA_TYPES, make_data, raw
from tests.ops.movement_support import BenchmarkCase, constant, from_positions, plugin_model, short
from tests.support import assert_same_bits

SEED = 20261128
DIFFERENTIAL_CASES = 240
_BFLOAT16 = np.dtype("bfloat16")


def reference(
    data: npt.NDArray[Any],
    output_size: Any,
    kernel_size: Any,
    strides: Any = (1, 1),
    dilations: Any = (1, 1),
    pads_begin: Any = (0, 0),
    pads_end: Any = (0, 0),
) -> npt.NDArray[Any]:
    """The spec's reading, element by element: channel-major blocks, each pixel the sum of what
    reaches it in the kernel's row-major order (from -0.0 for floats), zero where nothing."""
    n, ck, length = data.shape
    k0, k1 = kernel_size
    channels = ck // (k0 * k1)
    blocks = [
        max((output_size[d] + pads_begin[d] + pads_end[d] - dilations[d] * (kernel_size[d] - 1)
             - 1) // strides[d] + 1, 0)
        for d in range(2)
    ]  # fmt: skip
    assert blocks[0] * blocks[1] == length
    work = data.dtype.newbyteorder("=")
    floating = work.kind == "f" or work == _BFLOAT16
    out = np.full((n, channels, *output_size), -0.0 if floating else 0).astype(work)
    reached = np.zeros((n, channels, *output_size), dtype=bool)
    values = data.astype(work)
    with np.errstate(all="ignore"):
        for b, c, i, j, p, q in np.ndindex(n, channels, k0, k1, *blocks):
            y = p * strides[0] + i * dilations[0] - pads_begin[0]
            x = q * strides[1] + j * dilations[1] - pads_begin[1]
            if 0 <= y < output_size[0] and 0 <= x < output_size[1]:
                value = values[b, c * k0 * k1 + i * k1 + j, p * blocks[1] + q]
                if work.kind == "b":
                    out[b, c, y, x] |= value
                elif reached[b, c, y, x]:
                    out[b, c, y, x] = out[b, c, y, x] + value
                else:
                    out[b, c, y, x] = value  # the first: -0.0 + x is x (payloads kept here)
                reached[b, c, y, x] = True
    out[~reached] = np.zeros((), work)
    return out


def check(data: Any, output_size: Any, kernel_size: Any, *lists: Any) -> npt.NDArray[Any]:
    data = np.asarray(data)
    got = col2im(data, np.array(output_size), np.array(kernel_size), *lists)
    expected = reference(data, output_size, kernel_size, *lists)
    if data.dtype.kind == "f" or data.dtype == _BFLOAT16:
        # Adding two NaNs gives one of their payloads (the CPU's choice) and -0.0 + sNaN a
        # quieted one: NaNs meeting in a sum are compared as NaNs, every other bit exactly.
        both = np.isnan(got.astype(np.float64)) & np.isnan(expected.astype(np.float64))
        summed = _reach_counts(data.shape, output_size, kernel_size, *lists) > 1
        both &= summed
        compared = np.where(both, np.nan, got).astype(got.dtype)
        expected = np.where(both, np.nan, expected).astype(expected.dtype)
        assert_same_bits(compared, expected)
    else:
        assert_same_bits(got, expected)
    return got


def _reach_counts(shape: Any, output_size: Any, kernel_size: Any, *lists: Any) -> Any:
    ones = np.ones(shape, np.int64)
    return reference(ones, output_size, kernel_size, *lists)


# ------------------------------------------------------------------------------------------------
# The spec's examples (C = 3; shapes only)

# Example 2 prints L = 25; by the text's formula its blocks are floor((16 + 1 + 1 - 2 * (3 - 1) -
# 1) / 2) + 1 = 7 a side: L = 49 (the text wins; L = 25 is refused below).
_SHAPES = [
    ((3, 12, 225), (16, 16), (2, 2), (1, 1), (1, 1), (0, 0), (0, 0), (3, 3, 16, 16)),
    ((1, 27, 49), (16, 16), (3, 3), (2, 2), (2, 2), (1, 1), (1, 1), (1, 3, 16, 16)),
    ((12, 12, 1296), (32, 32), (2, 2), (1, 1), (2, 2), (3, 3), (3, 3), (12, 3, 32, 32)),
]


@pytest.mark.parametrize("number", range(len(_SHAPES)))
def test_spec_examples(number: int) -> None:
    shape, size, kernel, strides, dilations, begin, end, expected = _SHAPES[number]
    data = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
    got = check(data, size, kernel, strides, dilations, begin, end)
    assert got.shape == expected
    assert col2im_plan(data, np.array(size), np.array(kernel), strides, dilations, begin,
                       end).channels == 3  # fmt: skip


def test_example_2_as_printed_is_refused() -> None:
    with pytest.raises(SpecError) as error:
        col2im(np.zeros((1, 27, 25)), np.array([16, 16]), np.array([3, 3]), (2, 2), (2, 2),
               (1, 1), (1, 1))  # fmt: skip
    assert error.value.field == "data"
    assert "L = 7 * 7 = 49" in error.value.message


def test_channel_major_blocks() -> None:
    # C = 2, kernel 1x2, one block: rows of data are (c0,k0), (c0,k1), (c1,k0), (c1,k1).
    data = np.array([[[1], [2], [3], [4]]])
    assert check(data, (1, 2), (1, 2)).tolist() == [[[[1, 2]], [[3, 4]]]]


def test_overlapping_blocks_add() -> None:
    # 1-D in effect: 3 blocks of kernel 2, stride 1 over a row of 4: the middle pixels twice.
    data = np.array([[[1, 10, 100], [2, 100, 3]]], np.int8)
    assert check(data, (1, 4), (1, 2)).tolist() == [[[[1, 12, -56, 3]]]]  # 100 + 100 wraps


def test_padding_and_unreached_pixels() -> None:
    got = check(np.arange(1, 5).reshape(1, 1, 4), (3, 3), (1, 1), (2, 2), (1, 1), (0, 0), (0, 0))
    assert got.tolist() == [[[[1, 0, 2], [0, 0, 0], [3, 0, 4]]]]
    check(np.arange(1, 37).reshape(1, 4, 9), (2, 2), (2, 2), (1, 1), (1, 1), (1, 1), (1, 1))


@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
def test_every_element_type_bit_exact(dtype: np.dtype[Any]) -> None:
    rng = np.random.default_rng(4)
    # No pixel reached twice: the bits move as they are.
    data = make_data(rng, dtype, (2, 8, 4), strided=True)
    check(data, (4, 4), (2, 2), (2, 2))
    # Overlaps: sums in the element type.
    data = make_data(rng, dtype, (1, 12, 12), strided=False)
    check(data, (4, 5), (2, 2), (1, 1), (1, 1), (0, 0), (0, 0))
    swapped = data.astype(data.dtype.newbyteorder(">")) if dtype.itemsize > 1 else data
    assert_same_bits(col2im(swapped, np.array([4, 5]), np.array([2, 2])),
                     col2im(data, np.array([4, 5]), np.array([2, 2])))  # fmt: skip


def test_signed_zero_and_nan_of_one_block_kept() -> None:
    nan = np.array([0x7C01], np.uint16).view(np.float16)[0]  # a signalling NaN
    data = np.array([[[-0.0, nan, 1.0, 2.0]]], np.float16)
    got = col2im(data, np.array([2, 2]), np.array([1, 1]))
    assert raw(got).reshape(-1).tolist() == [0x8000, 0x7C01, 0x3C00, 0x4000]


def test_empty_dimensions() -> None:
    check(np.zeros((0, 4, 9)), (4, 4), (2, 2), (1, 1))
    check(np.zeros((2, 0, 9)), (4, 4), (2, 2), (1, 1))
    check(np.zeros((1, 4, 0)), (0, 4), (2, 2), (1, 1))


def test_an_amplifying_request_is_planned_not_built() -> None:
    data = np.zeros((1, 1, 1), np.float32)
    plan = col2im_plan(data, np.array([10**6, 10**6]), np.array([1, 1]), (10**7, 10**7))
    assert plan.output_shape == (1, 1, 10**6, 10**6)


# ------------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    ("shape", "size", "kernel", "lists", "field"),
    [
        ((1, 4, 9, 1), [4, 4], [2, 2], (), "data"),
        ((4, 9), [4, 4], [2, 2], (), "data"),
        ((1, 5, 9), [4, 4], [2, 2], (), "data"),  # not C * 4
        ((1, 4, 8), [4, 4], [2, 2], (), "data"),  # L is 9
        ((1, 4, 9), [4], [2, 2], (), "output_size"),
        ((1, 4, 9), [[4, 4]], [2, 2], (), "output_size"),
        ((1, 4, 9), [4, -4], [2, 2], (), "output_size"),
        ((1, 4, 9), np.array([4, 4], np.int16), [2, 2], (), "output_size"),
        ((1, 4, 9), [4, 4], np.array([2.0, 2.0]), (), "kernel_size"),
        ((1, 0, 9), [4, 4], [0, 2], (), "kernel_size"),
        ((1, 4, 9), [4, 4], [2, 2, 1], (), "kernel_size"),
        ((1, 4, 9), [4, 4], [2, 2], ((0, 1),), "strides"),
        ((1, 4, 9), [4, 4], [2, 2], ((1,),), "strides"),
        ((1, 4, 9), [4, 4], [2, 2], ((1, 1), (1, -1)), "dilations"),
        ((1, 4, 9), [4, 4], [2, 2], ((1, 1), (1, 1), (-1, 0)), "pads_begin"),
        ((1, 4, 9), [4, 4], [2, 2], ((1, 1), (1, 1), (2**63, 0)), "pads_begin"),  # past int64
        ((1, 4, 9), [4, 4], [2, 2], ((1, 1), (1, 1), (0, 0), (0, 0, 0)), "pads_end"),
    ],
)
def test_refusals(shape: Any, size: Any, kernel: Any, lists: Any, field: str) -> None:
    with pytest.raises(SpecError) as error:
        col2im(np.zeros(shape), np.asarray(size), np.asarray(kernel), *lists)
    assert error.value.field == field
    assert field.partition("_")[0] in error.value.message


# ------------------------------------------------------------------------------------------------
# Differential against OpenVINO's CPU plugin


@functools.cache
def compiled(kind: str, size: Any, kernel: Any, lists: Any) -> Any:
    types = {"int32": ov.Type.i32, "float32": ov.Type.f32}
    data = ov_op.Parameter(types[kind], ov.PartialShape([-1] * 3))
    node = ov_opset15.col2im(data, constant(np.array(size)), constant(np.array(kernel)), *lists)
    return ov.Core().compile_model(ov.Model([node], [data]), "CPU")


Case = tuple[npt.NDArray[Any], tuple[int, int], tuple[int, int], tuple[tuple[int, int], ...]]


def random_case(i: int) -> Case:
    rng = np.random.default_rng((SEED, i))

    def pair(low: int, high: int) -> tuple[int, int]:
        first, second = (int(v) for v in rng.integers(low, high, 2))
        return first, second

    size, kernel = pair(0, 8), pair(1, 4)
    lists = (pair(1, 4), pair(1, 3), pair(0, 3), pair(0, 3))
    blocks = [max((size[d] + lists[2][d] + lists[3][d] - lists[1][d] * (kernel[d] - 1) - 1)
                  // lists[0][d] + 1, 0) for d in range(2)]  # fmt: skip
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 3)) * kernel[0] * kernel[1],
             blocks[0] * blocks[1])  # fmt: skip
    if i % 3 == 2:
        dtype = np.dtype(("int32", "float32")[i // 3 % 2])
        data = rng.integers(-50, 50, shape).astype(dtype)
    else:
        data = make_data(rng, DATA_TYPES[i % len(DATA_TYPES)], shape, strided=False)
    return data, size, kernel, lists


CASES = [random_case(i) for i in range(DIFFERENTIAL_CASES)]


def test_differential_cases_cover_what_they_should() -> None:
    assert {case[0].dtype for case in CASES} == set(DATA_TYPES)
    counts = [_reach_counts(c[0].shape, c[1], c[2], *c[3]).max(initial=0) for c in CASES]
    assert sum(1 for count in counts if count > 1) > DIFFERENTIAL_CASES // 4
    assert sum(1 for count in counts if count == 1) > DIFFERENTIAL_CASES // 8


def test_col2im_matches_openvino() -> None:
    sent = 0
    failures = []
    for number, (data, size, kernel, lists) in enumerate(CASES):
        got = check(data, size, kernel, *lists)
        if data.size == 0 or got.size == 0:
            continue
        counts = _reach_counts(data.shape, size, kernel, *lists)
        if data.dtype.name in ("int32", "float32") and number % 3 == 2:
            answer = np.asarray(compiled(data.dtype.name, size, kernel, lists)(data)[0])
            expected = got
        elif counts.max() <= 1:
            where = np.arange(1, data.size + 1, dtype=np.int32).reshape(data.shape)
            moved = np.asarray(compiled("int32", size, kernel, lists)(where)[0])
            answer, expected = raw(from_positions(data, moved)), raw(got)
        else:
            continue
        sent += 1
        if answer.shape != expected.shape or not np.array_equal(answer, expected):
            failures.append(number)
    assert sent >= DIFFERENTIAL_CASES // 3
    assert not failures, f"OpenVINO disagreed on {failures} ({sent} sent)"


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """2x2 blocks at stride 2 (each pixel once) into a float32 and an int8 image of about
    ``nbytes``."""
    return [
        _benchmark_case(nbytes, np.dtype(np.float32)),
        _benchmark_case(nbytes, np.dtype(np.int8)),
    ]


def _benchmark_case(nbytes: int, dtype: np.dtype[Any]) -> BenchmarkCase:
    side = int((nbytes // dtype.itemsize // 4) ** 0.5) // 2 * 2
    blocks = (side // 2) ** 2
    data = (np.arange(4 * 4 * blocks) % 7).astype(dtype).reshape(1, 16, blocks)
    size, kernel = np.array([side, side]), np.array([2, 2])
    attributes = {"strides": [2, 2], "dilations": [1, 1], "pads_begin": [0, 0], "pads_end": [0, 0]}

    def model() -> Any:
        build = lambda p: ov_opset15.col2im(p, constant(size), constant(kernel), [2, 2])  # noqa: E731
        return plugin_model(build, data)

    arrays = {"data": data, "output_size": size, "kernel_size": kernel}
    label = f"2x2 stride 2, {short(dtype)}"
    return BenchmarkCase("col2im", label, arrays, attributes, data.dtype, 2 * data.nbytes, model)


@pytest.mark.parametrize("name", sorted(OP.examples))
def test_declared_examples(name: str) -> None:
    request = OP.examples[name]["value"]
    lists = [request.get(key, default) for key, default in
             (("strides", (1, 1)), ("dilations", (1, 1)), ("pads_begin", (0, 0)),
              ("pads_end", (0, 0)))]  # fmt: skip
    got = check(np.array(request["data"], request["dtype"]), request["output_size"],
                request["kernel_size"], *lists)  # fmt: skip
    assert got.tolist() == OP.examples[name]["x-expected-output"]


def test_a_small_request_for_a_terabyte_is_refused_before_anything_exists() -> None:
    """One block asking for a 10**12-pixel image: 413 at once, naming the limit, on the JSON
    route (admission checks the planner's shape before any array exists)."""
    import asyncio  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    from app.main import create_app  # noqa: PLC0415
    from app.settings import Settings  # noqa: PLC0415

    request = {"data": [[[1.5]]], "output_size": [10**6, 10**6], "kernel_size": [1, 1],
               "strides": [10**7, 10**7]}  # fmt: skip

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(Settings(grpc_port=0)))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post("/col2im", json=request)

    response = asyncio.run(ask())
    assert response.status_code == 413
    assert "TENSOR_OPS_MAX" in response.json()["detail"][0]["msg"]


# ------------------------------------------------------------------------------------------------
# The compiled loops (app/ops/compiled.py) against the NumPy path (app/ops/numpy_loops.py)

#: Random cases of each element type run both ways, most of them with overlapping blocks.
BOTH_WAYS_CASES = 60


def _geometry(rng: np.random.Generator) -> tuple[Any, Any, tuple[Any, ...], tuple[int, ...]]:
    """output_size, kernel_size, (strides, dilations, pads_begin, pads_end) and data's shape of
    a random Col2Im: kernels up to 4 x 4, overlapping in about half of them."""

    def pair(low: int, high: int) -> list[int]:
        return [int(v) for v in rng.integers(low, high, 2)]

    size, kernel = pair(1, 10), pair(1, 5)
    lists = (pair(1, 3), pair(0, 3), pair(0, 3), pair(0, 3))
    blocks = [max((size[d] + lists[2][d] + lists[3][d] - lists[1][d] * (kernel[d] - 1) - 1)
                  // lists[0][d] + 1, 0) for d in range(2)]  # fmt: skip
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 3)) * kernel[0] * kernel[1],
             blocks[0] * blocks[1])  # fmt: skip
    return size, kernel, lists, shape


def _both_ways(data: npt.NDArray[Any], size: Any, kernel: Any, *lists: Any) -> tuple[Any, Any]:
    """Col2Im by the compiled loops, then by their NumPy stand-ins."""
    args = (data, np.array(size), np.array(kernel), *lists)
    compiled = col2im(*args)
    with loops.numpy_stand_ins():
        stood_in = col2im(*args)
    return compiled, stood_in


def _nans_met(data: npt.NDArray[Any], size: Any, kernel: Any, *lists: Any) -> Any:
    """Per pixel, whether two NaNs were summed there (by counting them through Col2Im)."""
    nans = np.isnan(data).astype(np.int64)
    return col2im(nans, np.array(size), np.array(kernel), *lists) > 1


@pytest.fixture
def stand_in_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of Col2Im's NumPy stand-ins called while the test runs (compiled loops ready)."""
    assert loops.wait_compiled(), "the numba loops did not compile"
    calls: list[str] = []
    for name in ("col2im", "col2im_reach"):
        loop = getattr(numpy_loops, name)

        def counted(*arguments: Any, name: str = name, loop: Any = loop) -> Any:
            calls.append(name)
            return loop(*arguments)

        monkeypatch.setattr(numpy_loops, name, counted)
    return calls


@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
def test_compiled_loop_and_numpy_path_give_the_same_bits(
    dtype: np.dtype[Any], stand_in_calls: list[str]
) -> None:
    """Random geometries (dilation 0 to 2, strides 1 and 2, pads, mostly overlapping), data of
    random bits and special values (-0.0, NaN payloads, signalling NaNs, infinities, integer
    extremes that wrap), C-ordered, strided and big-endian: the same bits both ways. Where two
    NaNs meet in a float32 or float64 sum, NumPy's own loops give the first's payload in their
    vector body and the second's in their scalar tail: there both answers are NaN only."""
    rng = np.random.default_rng((SEED, dtype.num, 7))
    overlapping = 0
    for number in range(BOTH_WAYS_CASES):
        size, kernel, lists, shape = _geometry(rng)
        data = make_data(rng, dtype, shape, strided=number % 4 == 1)
        if number % 4 == 2 and dtype.itemsize > 1:
            data = data.astype(dtype.newbyteorder(">"))
        before = len(stand_in_calls)
        compiled, stood_in = _both_ways(data, size, kernel, *lists)
        assert compiled.dtype == data.dtype and compiled.shape == stood_in.shape
        if data.size and compiled.size:
            assert "col2im_reach" in stand_in_calls[before:]
        if dtype.name in ("float32", "float64"):
            met = _nans_met(data, size, kernel, *lists)
            assert np.isnan(compiled[met]).all() and np.isnan(stood_in[met]).all()
            compiled, stood_in = compiled.copy(), stood_in.copy()
            compiled[met] = stood_in[met] = 0
        assert_same_bits(compiled, stood_in)
        overlapping += int(_reach_counts(shape, size, kernel, *lists).max(initial=0) > 1)
    assert overlapping > BOTH_WAYS_CASES // 3
    assert "col2im" in stand_in_calls


#: Pairs summed in one call: kernel 1 x 2 sliding by 1 along a row, each inner pixel
#: ``data[0, 0, x] + data[0, 1, x - 1]``.
PAIRS = 1 << 17


@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
def test_every_bit_pattern_summed_gives_the_same_bits_both_ways(
    dtype: np.dtype[Any], stand_in_calls: list[str]
) -> None:
    """Kernel 1 x 2 along a row: every pixel but the ends is the sum of two random values (for
    2-byte types, the first of them every bit pattern, subnormals, NaNs and infinities
    included): float16 and bfloat16 rounded from float32 as NumPy and ml_dtypes round them,
    integers wrapping, bool an or. The same bits both ways, but where two float32 or float64
    NaNs meet (see above)."""
    rng = np.random.default_rng((SEED, dtype.num, 11))
    data = make_data(rng, dtype, (1, 2, PAIRS), strided=False).copy()
    if dtype.itemsize == 2:
        raw(data)[0, 0, : 1 << 16] = np.arange(1 << 16, dtype=np.uint16)
    compiled, stood_in = _both_ways(data, (1, PAIRS + 1), (1, 2))
    assert stand_in_calls.count("col2im") == 1  # the stand-in's one call (1 x 2 is cheap)
    if dtype.name in ("float32", "float64"):
        met = _nans_met(data, (1, PAIRS + 1), (1, 2))
        assert np.isnan(compiled[met]).all()
        compiled[met] = stood_in[met] = 0
    assert_same_bits(compiled, stood_in)
    # The ends hold one value each, their bits (a NaN's payload, -0.0) as they came.
    assert raw(compiled)[0, 0, 0, 0] == raw(data)[0, 0, 0]
    assert raw(compiled)[0, 0, 0, -1] == raw(data)[0, 1, -1]


def test_integers_wrap_and_signed_zeros_and_payloads_of_one_value_are_kept() -> None:
    """Kernel 1 x 2 over a row of 4 by the compiled loop: data's rows are kernel elements 0
    and 1, its columns blocks; pixel x sums block x's element 0 and block x - 1's element 1."""
    assert loops.wait_compiled()
    data = np.array([[[1, 127, -128], [5, -1, 3]]], np.int8)
    got = col2im(data, np.array([1, 4]), np.array([1, 2]))
    assert got.tolist() == [[[[1, -124, 127, 3]]]]  # 127 + 5 and -128 - 1 wrap
    nan = 0x7C01  # a signalling NaN: kept where it is alone, quieted in a sum
    data = np.array([[[0x8000, nan, 0x8000], [0x8000, 0x8000, nan]]], np.uint16).view(np.float16)
    got = raw(col2im(data, np.array([1, 4]), np.array([1, 2])))
    assert got.reshape(-1).tolist() == [0x8000, 0x7E01, 0x8000, nan]


def _lines_run(run: Any) -> int:
    """The lines of app/ops/ Python run by ``run()`` (a loop in Python over a kernel's
    elements would run some lines once per element)."""
    counted = [0]
    folder = str(Path(col2im_module.__file__).parent)

    def local(frame: Any, event: str, argument: Any) -> Any:
        if event == "line":
            counted[0] += 1
        return local

    def tracer(frame: Any, event: str, argument: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(folder) else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(previous)
    return counted[0]


@pytest.mark.parametrize(
    ("kernel", "size"),
    [((48, 48), (49, 48)), ((1, 4096), (1, 4097)), ((4096, 1), (4097, 1))],
    ids=["square", "row", "column"],
)
def test_a_large_kernel_does_not_loop_in_python(
    kernel: tuple[int, int], size: tuple[int, int], stand_in_calls: list[str]
) -> None:
    """Blocks overlapping under a kernel of thousands of elements (2 blocks, each pixel of the
    middle reached twice; a hostile 512 x 512 one held a worker 8 s): as many lines of Python
    run as for a 2 x 2 kernel, the sum done by the compiled loop, no stand-in called."""

    def case(kernel: tuple[int, int], size: tuple[int, int]) -> Any:
        data = np.arange(2 * kernel[0] * kernel[1], dtype=np.float32).reshape(1, -1, 2)
        return lambda: col2im(data, np.array(size), np.array(kernel))

    small = _lines_run(case((2, 2), (3, 2) if kernel[0] > 1 else (2, 3)))
    large = _lines_run(case(kernel, size))
    assert large == small
    assert stand_in_calls == []
    # Block 1 sits one pixel on from block 0 (along the rows where the image is one row
    # longer than the kernel): each pixel the sum of at most two small integers (exact).
    data = np.arange(2 * kernel[0] * kernel[1], dtype=np.float32).reshape(1, -1, 2)
    first, second = (data[0, :, block].reshape(kernel).astype(np.float64) for block in (0, 1))
    expected = np.zeros(size)
    if size[0] > kernel[0]:
        expected[:-1, :] += first
        expected[1:, :] += second
    else:
        expected[:, :-1] += first
        expected[:, 1:] += second
    got = col2im(data, np.array(size), np.array(kernel))
    assert_same_bits(got, expected.astype(np.float32).reshape(1, 1, *size))


@pytest.mark.parametrize("stand_in", [False, True], ids=["compiled", "stand_in"])
@pytest.mark.parametrize(
    ("shape", "size", "kernel", "order"),
    [
        ((1, 2, (1 << 21) - 1), (1 << 21, 1), (2, 1), "C"),  # a column: 9 bytes a pixel row
        ((1, 2, 1 << 21), (1, (1 << 21) + 1), (1, 2), "C"),  # a row: the stand-in's mask
        ((3, 4, 1 << 18), (513, 513), (2, 2), "F"),  # data copied C-ordered
    ],
    ids=["column", "row", "fortran"],
)
def test_what_the_kernel_holds_is_within_its_declared_workspace(
    shape: tuple[int, ...], size: Any, kernel: Any, order: str, stand_in: bool
) -> None:
    """Overlapping blocks of int8 (whose output is small beside per-pixel bookkeeping): the
    peak the kernel allocates (traced) is within the output and the declared workspace."""
    import tracemalloc  # noqa: PLC0415

    from app.pipeline.jobs import Limits, make_job  # noqa: PLC0415
    from app.settings import Settings  # noqa: PLC0415

    assert loops.wait_compiled()
    data = np.ones(shape, np.int8, order=order)  # type: ignore[call-overload]
    arrays = {"data": data, "output_size": np.array(size), "kernel_size": np.array(kernel)}
    job = make_job(OP, arrays, OP.attribute_defaults(), Limits.of(Settings()))
    with loops.numpy_stand_ins() if stand_in else contextlib.nullcontext():
        tracemalloc.start()
        try:
            out = job.output()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak <= job.output_bytes + job.workspace_bytes + (1 << 20)
    assert job.workspace_bytes >= (data.nbytes if order == "F" else 0) + 9 * sum(size)
    assert int(out.max()) == (4 if order == "F" else 2)
    assert int(out.min()) == 1


def test_empty_data_under_a_kernel_of_a_billion_elements_is_zeros_at_once(
    stand_in_calls: list[str],
) -> None:
    """No block fits (L = 0): zero bytes of data may still name a kernel of 10**9 elements,
    which once cost a Python step each. The image is zeros, by as many lines of Python as for a
    1 x 1 kernel, nothing asked of the loops."""

    def run(kernel: int) -> Any:
        return col2im(np.zeros((1, kernel, 0), np.float32), np.array([10, 10]),
                      np.array([kernel, 1]))  # fmt: skip

    assert _lines_run(lambda: run(10**9)) == _lines_run(lambda: run(11))
    assert_same_bits(run(10**9), np.zeros((1, 1, 10, 10), np.float32))
    assert stand_in_calls == []
