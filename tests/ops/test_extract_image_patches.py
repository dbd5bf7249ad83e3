"""ExtractImagePatches-3: the spec's five worked examples and its shape example, its rules,
every element type to the bit, a loop over the spec's formula, and OpenVINO's CPU plugin.

The plugin is given int32 *positions* (1..n) instead of the data, so its answer says which
element lands where (0: padding), and the expected output is taken from the case's own bits
(bit-exact for every element type). ``DIFFERENTIAL_CASES`` cases from a fixed seed: every
element type, every auto_pad, sizes, strides and rates of 1-4, images of 0-9 rows/cols.
"""

import functools
from typing import Any

import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset3 as ov_opset3
import pytest
from openvino import op as ov_op

from app.ops.errors import SpecError
from app.ops.extract_image_patches import (
    AUTO_PADS,
    OP,
    effective_size,
    extract_image_patches,
    extract_image_patches_plan,
)
from tests.cases import DATA_TYPES, make_data, raw
from tests.ops.movement_support import BenchmarkCase, from_positions, plugin_model
from tests.support import assert_same_bits

SEED = 20261128
DIFFERENTIAL_CASES = 300


def reference(
    data: npt.NDArray[Any], sizes: Any, strides: Any, rates: Any, auto_pad: str
) -> npt.NDArray[Any]:
    """The spec's reading, one output element at a time (TensorFlow's padding rule)."""
    batch, depth, in_rows, in_cols = data.shape
    counts, pads = [], []
    for d, length in enumerate((in_rows, in_cols)):
        span = effective_size(sizes[d], rates[d])
        if auto_pad == "valid":
            counts.append(max((length - span) // strides[d] + 1, 0) if length >= span else 0)
            pads.append(0)
        else:
            count = -(-length // strides[d])
            total = max((count - 1) * strides[d] + span - length, 0)
            counts.append(count)
            pads.append(total // 2 if auto_pad == "same_upper" else (total + 1) // 2)
    out = np.zeros((batch, sizes[0] * sizes[1] * depth, *counts), dtype=data.dtype)
    source, target = raw(np.ascontiguousarray(data)), raw(out)
    for b, i, j, c, p, q in np.ndindex(batch, sizes[0], sizes[1], depth, *counts):
        y = p * strides[0] + i * rates[0] - pads[0]
        x = q * strides[1] + j * rates[1] - pads[1]
        if 0 <= y < in_rows and 0 <= x < in_cols:
            target[b, (i * sizes[1] + j) * depth + c, p, q] = source[b, c, y, x]
    return out


def check(data: Any, sizes: Any, strides: Any, rates: Any, auto_pad: str) -> npt.NDArray[Any]:
    data = np.asarray(data)
    got = extract_image_patches(data, sizes, strides, rates, auto_pad)
    assert_same_bits(got, reference(data, sizes, strides, rates, auto_pad))
    return got


# ------------------------------------------------------------------------------------------------
# The spec's examples: a 1x1x10x10 image of 1..100 (its fifth: 1x2x5x5 of 1..50)

_IMAGE = np.arange(1, 101).reshape(1, 1, 10, 10)
_SPEC = [
    ((3, 3), (5, 5), (1, 1), "valid", _IMAGE,
     [[[1, 6], [51, 56]], [[2, 7], [52, 57]], [[3, 8], [53, 58]], [[11, 16], [61, 66]],
      [[12, 17], [62, 67]], [[13, 18], [63, 68]], [[21, 26], [71, 76]], [[22, 27], [72, 77]],
      [[23, 28], [73, 78]]]),
    ((4, 4), (8, 8), (1, 1), "valid", _IMAGE,
     [[[v]] for v in (1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24, 31, 32, 33, 34)]),
    ((4, 4), (9, 9), (1, 1), "same_upper", _IMAGE,
     [[[0, 0], [0, 89]], [[0, 0], [81, 90]], [[0, 0], [82, 0]], [[0, 0], [83, 0]],
      [[0, 9], [0, 99]], [[1, 10], [91, 100]], [[2, 0], [92, 0]], [[3, 0], [93, 0]],
      [[0, 19], [0, 0]], [[11, 20], [0, 0]], [[12, 0], [0, 0]], [[13, 0], [0, 0]],
      [[0, 29], [0, 0]], [[21, 30], [0, 0]], [[22, 0], [0, 0]], [[23, 0], [0, 0]]]),
    ((3, 3), (5, 5), (2, 2), "valid", _IMAGE,
     [[[1, 6], [51, 56]], [[3, 8], [53, 58]], [[5, 10], [55, 60]], [[21, 26], [71, 76]],
      [[23, 28], [73, 78]], [[25, 30], [75, 80]], [[41, 46], [91, 96]], [[43, 48], [93, 98]],
      [[45, 50], [95, 100]]]),
    ((2, 2), (3, 3), (1, 1), "valid", np.arange(1, 51).reshape(1, 2, 5, 5),
     [[[1, 4], [16, 19]], [[26, 29], [41, 44]], [[2, 5], [17, 20]], [[27, 30], [42, 45]],
      [[6, 9], [21, 24]], [[31, 34], [46, 49]], [[7, 10], [22, 25]], [[32, 35], [47, 50]]]),
]  # fmt: skip


@pytest.mark.parametrize("number", range(len(_SPEC)))
def test_spec_examples(number: int) -> None:
    sizes, strides, rates, auto_pad, image, expected = _SPEC[number]
    assert check(image, sizes, strides, rates, auto_pad).tolist() == [expected]


def test_shape_example() -> None:
    data = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (64, 3, 10, 10), (0,) * 4)
    plan = extract_image_patches_plan(data, (3, 3), (5, 5), (1, 1), "valid")
    assert plan.output_shape == (64, 27, 2, 2)


# ------------------------------------------------------------------------------------------------
# Properties


@pytest.mark.parametrize("auto_pad", AUTO_PADS)
def test_a_grid_of_settings(auto_pad: str) -> None:
    data = np.arange(2 * 3 * 7 * 6, dtype=np.int16).reshape(2, 3, 7, 6)
    for sizes in ((1, 1), (2, 3), (3, 2), (7, 6), (8, 1)):
        for strides in ((1, 1), (2, 3), (4, 1)):
            for rates in ((1, 1), (2, 1), (3, 2)):
                check(data, sizes, strides, rates, auto_pad)


def test_same_lower_puts_the_odd_zero_first() -> None:
    data = np.arange(1, 5).reshape(1, 1, 1, 4)
    upper = check(data, (1, 2), (1, 2), (1, 1), "same_upper")
    lower = check(data, (1, 3), (1, 2), (1, 1), "same_lower")
    assert upper.reshape(2, -1).tolist() == [[1, 3], [2, 4]]
    # total padding (2 - 1) * 2 + 3 - 4 = 1: same_lower adds it at the beginning.
    assert lower.reshape(3, -1).tolist() == [[0, 2], [1, 3], [2, 4]]


@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
def test_every_element_type_bit_exact(dtype: np.dtype[Any]) -> None:
    rng = np.random.default_rng(3)
    data = make_data(rng, dtype, (2, 3, 5, 6), strided=True)
    for auto_pad in AUTO_PADS:
        check(data, (2, 3), (2, 2), (2, 1), auto_pad)
    swapped = data.astype(data.dtype.newbyteorder(">")) if dtype.itemsize > 1 else data
    got = extract_image_patches(swapped, (2, 2), (1, 1), (1, 1), "same_lower")
    assert_same_bits(got, reference(data, (2, 2), (1, 1), (1, 1), "same_lower"))


def test_out_takes_the_answer() -> None:
    data = np.arange(16.0).reshape(1, 1, 4, 4)
    out = np.empty((1, 4, 2, 2))
    assert extract_image_patches(data, (2, 2), (2, 2), (1, 1), "valid", out=out) is out
    assert out[0, :, 0, 0].tolist() == [0.0, 1.0, 4.0, 5.0]


def test_empty_and_degenerate_shapes() -> None:
    check(np.zeros((0, 3, 4, 4)), (2, 2), (1, 1), (1, 1), "valid")
    check(np.zeros((1, 0, 4, 4)), (2, 2), (1, 1), (1, 1), "same_upper")
    check(np.zeros((1, 1, 0, 4)), (2, 2), (1, 1), (1, 1), "same_upper")
    # An image smaller than a patch: no patch fits without padding.
    assert check(np.ones((1, 1, 2, 2)), (3, 3), (1, 1), (1, 1), "valid").shape == (1, 9, 0, 0)
    # A size of 0 gives patches of no sample; a rate of 0 takes one pixel size times.
    assert check(np.ones((1, 2, 3, 3)), (0, 2), (1, 1), (1, 1), "valid").shape == (1, 0, 4, 2)
    got = check(np.arange(9).reshape(1, 1, 3, 3), (2, 2), (1, 1), (0, 0), "valid")
    assert got[0, :, 0, 0].tolist() == [0, 0, 0, 0]


def test_an_amplifying_request_is_planned_not_built() -> None:
    # Huge sizes over a tiny image: the plan has the shape, nothing of it is built.
    data = np.zeros((1, 1, 1, 1), np.float32)
    plan = extract_image_patches_plan(data, (10**6, 10**6), (1, 1), (1, 1), "same_upper")
    assert plan.output_shape == (1, 10**12, 1, 1)


# ------------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    ("shape", "sizes", "strides", "rates", "auto_pad", "field"),
    [
        ((1, 1, 4), (2, 2), (1, 1), (1, 1), "valid", "data"),
        ((1, 1, 4, 4, 1), (2, 2), (1, 1), (1, 1), "valid", "data"),
        ((1, 1, 4, 4), (2,), (1, 1), (1, 1), "valid", "sizes"),
        ((1, 1, 4, 4), (2, 2, 2), (1, 1), (1, 1), "valid", "sizes"),
        ((1, 1, 4, 4), (2, -1), (1, 1), (1, 1), "valid", "sizes"),
        ((1, 1, 4, 4), (2, 2), (1,), (1, 1), "valid", "strides"),
        ((1, 1, 4, 4), (2, 2), (0, 1), (1, 1), "valid", "strides"),
        ((1, 1, 4, 4), (2, 2), (1, 1), (1, -2), "valid", "rates"),
        ((1, 1, 4, 4), (2, 2), (1, 1), (), "valid", "rates"),
        ((1, 1, 4, 4), (2, 2), (1, 1), (1, 1), "same", "auto_pad"),
    ],
)
def test_refusals(
    shape: Any, sizes: Any, strides: Any, rates: Any, auto_pad: str, field: str
) -> None:
    with pytest.raises(SpecError) as error:
        extract_image_patches(np.zeros(shape), sizes, strides, rates, auto_pad)
    assert error.value.field == field
    assert field in error.value.message


# ------------------------------------------------------------------------------------------------
# Differential against OpenVINO's CPU plugin


@functools.cache
def compiled(sizes: Any, strides: Any, rates: Any, auto_pad: str) -> Any:
    image = ov_op.Parameter(ov.Type.i32, ov.PartialShape([-1] * 4))
    node = ov_opset3.extract_image_patches(image, list(sizes), list(strides), list(rates),
                                           auto_pad)  # fmt: skip
    return ov.Core().compile_model(ov.Model([node], [image]), "CPU")


Case = tuple[npt.NDArray[Any], tuple[int, int], tuple[int, int], tuple[int, int], str]


def random_case(i: int) -> Case:
    rng = np.random.default_rng((SEED, i))
    dtype = DATA_TYPES[i % len(DATA_TYPES)]
    shape = (
        int(rng.integers(1, 3)),
        int(rng.integers(1, 4)),
        *(int(v) for v in rng.integers(0, 10, 2)),
    )

    def pair(low: int, high: int) -> tuple[int, int]:
        return int(rng.integers(low, high)), int(rng.integers(low, high))

    data = make_data(rng, dtype, shape, strided=bool(rng.random() < 0.2))
    return data, pair(1, 5), pair(1, 5), pair(1, 4), AUTO_PADS[i // len(DATA_TYPES) % 3]


CASES = [random_case(i) for i in range(DIFFERENTIAL_CASES)]


def test_differential_cases_cover_what_they_should() -> None:
    assert {case[0].dtype for case in CASES} == set(DATA_TYPES)
    assert {case[4] for case in CASES} == set(AUTO_PADS)
    assert any(case[0].size == 0 for case in CASES)
    assert any(0 in extract_image_patches_plan(*case).output_shape[2:] for case in CASES)


def test_extract_image_patches_matches_openvino() -> None:
    sent = 0
    failures = []
    for number, (data, sizes, strides, rates, auto_pad) in enumerate(CASES):
        got = check(data, sizes, strides, rates, auto_pad)
        if got.size == 0 or data.size == 0:
            continue  # empty tensors are not risked on the plugin
        where = np.arange(1, data.size + 1, dtype=np.int32).reshape(data.shape)
        answer = np.asarray(compiled(sizes, strides, rates, auto_pad)(where)[0])
        sent += 1
        if answer.shape != got.shape or not np.array_equal(
            raw(from_positions(data, answer)), raw(got)
        ):
            failures.append(number)
    assert sent >= DIFFERENTIAL_CASES // 2
    assert not failures, f"OpenVINO disagreed on {failures} ({sent} sent)"


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """3x3 patches, stride 3 (each pixel once) of a float32 and an int8 image of ``nbytes``."""
    return [
        _benchmark_case(nbytes, np.dtype(np.float32)),
        _benchmark_case(nbytes, np.dtype(np.int8)),
    ]


def _benchmark_case(nbytes: int, dtype: np.dtype[Any]) -> BenchmarkCase:
    side = int((nbytes // dtype.itemsize // 8) ** 0.5) // 3 * 3
    data = (np.arange(8 * side * side) % 5).astype(dtype).reshape(1, 8, side, side)
    attributes = {"sizes": [3, 3], "strides": [3, 3], "rates": [1, 1], "auto_pad": "valid"}

    def model() -> Any:
        build = lambda p: ov_opset3.extract_image_patches(p, [3, 3], [3, 3], [1, 1], "valid")  # noqa: E731
        return plugin_model(build, data)

    label = f"3x3 stride 3, {'f32' if dtype == np.float32 else 'i8'}"
    return BenchmarkCase("extract_image_patches", label, {"data": data},
                         attributes, data.dtype, 2 * data.nbytes, model)  # fmt: skip


@pytest.mark.parametrize("name", sorted(OP.examples))
def test_declared_examples(name: str) -> None:
    request = OP.examples[name]["value"]
    got = check(np.array(request["data"]), request["sizes"], request["strides"],
                request["rates"], request["auto_pad"])  # fmt: skip
    assert got.tolist() == OP.examples[name]["x-expected-output"]


def test_a_small_request_for_a_terabyte_is_refused_before_anything_exists() -> None:
    """A one-pixel image asking for 10**12 elements of patches: 413 at once, naming the limit,
    on the JSON route (admission checks the planner's shape before any array exists)."""
    import asyncio  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    from app.main import create_app  # noqa: PLC0415
    from app.settings import Settings  # noqa: PLC0415

    request = {"data": [[[[1.5]]]], "sizes": [10**6, 10**6], "strides": [1, 1],
               "rates": [1, 1], "auto_pad": "same_upper"}  # fmt: skip

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_app(Settings(grpc_port=0)))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post("/extract_image_patches", json=request)

    response = asyncio.run(ask())
    assert response.status_code == 413
    assert "TENSOR_OPS_MAX" in response.json()["detail"][0]["msg"]
