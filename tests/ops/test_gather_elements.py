"""GatherElements-6: the spec's examples, its rules, every element type, and OpenVINO's CPU plugin.

The differential part generates ``DIFFERENTIAL_CASES`` legal cases from a fixed seed (every
element type, data ranks 1-5, every axis in both signs, int32 and int64 indices, indices longer
and shorter than data along the axis, empty dimensions, strided data and indices, NaN payloads
and -0.0) and gives OpenVINO's CPU plugin the int32 *positions* 1..n in data's shape instead of
the data, so the expected output is taken from the data's own bits (bit-exact for every type).
Cases with an empty tensor are checked against ``numpy.take_along_axis`` only.
"""

import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset6 as ov_opset6
import pytest
from openvino import op as ov_op

from app.ops.errors import SpecError
from app.ops.gather_elements import (
    OP,
    _plan_gather_elements,
    gather_elements,
    gather_elements_plan,
)
from app.ops.index_rules import check_in_bounds
from tests.cases import DATA_TYPES, make_data, raw, special_bits
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    BenchmarkCase,
    constant,
    plugin_model,
    short,
    square,
)
from tests.support import assert_same_bits

SEED = 20261129
DIFFERENTIAL_CASES = 320


def reference(data: npt.NDArray[Any], indices: npt.NDArray[Any], axis: int) -> Any:
    """The spec's equations by NumPy: ``take_along_axis`` (its broadcasting never used here:
    the shapes agree but along the axis)."""
    return np.take_along_axis(raw(data), indices.astype(np.int64), axis)


def check(data: Any, indices: Any, axis: int) -> npt.NDArray[Any]:
    data, indices = np.asarray(data), np.asarray(indices)
    got = gather_elements(data, indices, axis)
    assert got.dtype == data.dtype
    np.testing.assert_array_equal(raw(got), reference(data, indices, axis))
    return got


@pytest.mark.parametrize("name", sorted(OP.examples))
def test_declared_examples(name: str) -> None:
    request = dict(OP.examples[name]["value"])
    data = np.array(request["data"], dtype=request.get("dtype"))
    got = gather_elements(data, np.array(request["indices"]), request["axis"])
    expected = OP.examples[name]["x-expected-output"]
    assert got.tolist() == expected
    assert_same_bits(got, np.array(expected, dtype=got.dtype))  # -0.0 kept


def test_spec_examples_by_hand() -> None:
    assert check([[1, 2], [3, 4]], [[0, 1], [0, 0]], 0).tolist() == [[1, 4], [1, 2]]
    out = check([[1, 7], [4, 3]], [[1, 1, 0], [1, 0, 1]], 1)
    assert out.tolist() == [[7, 7, 1], [3, 4, 3]]
    out = check([[1, 2, 3], [4, 5, 6], [7, 8, 9]], [[1, 0, 1], [1, 2, 0]], 0)
    assert out.tolist() == [[4, 2, 6], [4, 8, 3]]


def test_xml_example_shape() -> None:
    plan = gather_elements_plan((3, 7, 5), np.zeros((3, 10, 5), np.int32), 1)
    assert plan.output_shape == (3, 10, 5)


def test_three_d_equations() -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(0, 1000, (3, 4, 5))
    for axis in range(3):
        shape = list(data.shape)
        shape[axis] = 6
        indices = rng.integers(0, data.shape[axis], shape)
        out = check(data, indices, axis)
        for i, j, k in np.ndindex(*shape):
            where = [i, j, k]
            where[axis] = indices[i, j, k]
            assert out[i, j, k] == data[tuple(where)]
        np.testing.assert_array_equal(gather_elements(data, indices, axis - 3), out)


@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("axis", [0, 1])
def test_every_element_type_bit_exact(dtype: np.dtype[Any], axis: int) -> None:
    specials = special_bits(dtype)
    size = max(8, specials.size)
    bits = np.resize(specials, size * 3)
    data = bits.astype(bool) if dtype.kind == "b" else bits.view(dtype)
    data = data.reshape(3, size)
    shape = (5, size) if axis == 0 else (3, 2 * size)
    indices = (np.arange(math.prod(shape)) * 7 % data.shape[axis]).reshape(shape)
    check(data, indices.astype(np.int32), axis)


def test_strided_and_byte_swapped_inputs_and_out() -> None:
    data = np.arange(60, dtype=np.float64).reshape(6, 10)[:, ::2]
    indices = np.array([[4, 0, 1, 2, 3], [1, 1, 1, 1, 1]], dtype=">i8")
    check(data, indices, 0)
    check(data, np.asfortranarray((np.arange(24, dtype=np.int32) % 5).reshape(12, 2))[::2], 1)
    out = np.zeros((2, 10))[:, ::2]
    got = gather_elements(data, indices, 0, out=out)
    assert got is out
    np.testing.assert_array_equal(out, reference(data, indices, 0).view(np.float64))


def test_empty_dimensions() -> None:
    assert check(np.zeros((2, 3)), np.zeros((2, 0), np.int64), 1).shape == (2, 0)
    assert check(np.zeros((0, 3)), np.zeros((0, 3), np.int64), 1).shape == (0, 3)
    assert check(np.zeros((2, 0)), np.zeros((2, 0), np.int64), 1).shape == (2, 0)
    assert check(np.zeros((0, 3)), np.zeros((0, 3), np.int64), 0).shape == (0, 3)


def test_large_outer_blocks_are_chunked() -> None:
    rng = np.random.default_rng(2)
    data = rng.integers(0, 255, (3, 700, 1000), dtype=np.uint8)
    indices = rng.integers(0, 700, (3, 900, 1000), dtype=np.int32)
    check(data, indices, 1)
    check(data, rng.integers(0, 3, (4, 700, 1000)), 0)


# ------------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    ("data_shape", "indices", "axis", "field"),
    [
        ((), np.int64(0), 0, "data"),
        ((3,), np.zeros((1, 1), np.int64), 0, "indices"),  # rank differs
        ((2, 3), np.zeros((3, 3), np.int64), 1, "indices"),  # shape differs off the axis
        ((2, 3), np.zeros((2, 3), np.int64), 2, "axis"),
        ((2, 3), np.zeros((2, 3), np.int64), -3, "axis"),
        ((2, 3), np.zeros((2, 3), np.int64), True, "axis"),
        ((2, 3), np.zeros((2, 3), np.int16), 1, "indices"),
        ((2, 3), np.zeros((2, 3), np.uint64), 1, "indices"),
        ((2, 3), np.zeros((2, 3), np.float32), 1, "indices"),
        ((0, 3), np.zeros((1, 3), np.int64), 0, "indices"),  # any index into an empty axis
    ],
)
def test_refusals(data_shape: Any, indices: Any, axis: Any, field: str) -> None:
    with pytest.raises(SpecError) as error:
        gather_elements(np.zeros(data_shape), indices, axis)
    assert error.value.field == field


@pytest.mark.parametrize("value", [-1, -3, 3, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)], ids=str)
def test_indices_out_of_bounds_are_refused(value: int) -> None:
    dtype = np.int32 if -(2**31) <= value < 2**31 else np.int64
    indices = np.array([[0, 1, 2], [2, 1, value]], dtype=dtype)
    with pytest.raises(SpecError) as error:
        gather_elements(np.zeros((2, 3)), indices, 1)
    assert error.value.field == "indices"
    assert f"indices[1, 2] = {value} is out of bounds" in error.value.message


def test_plan_allocates_nothing_the_size_of_the_output() -> None:
    # The output has the shape of indices, which the request holds: the plan only reads them.
    indices = np.zeros((4, 1 << 16), np.int64)
    data = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), (4, 2**40), (0, 0))
    assert gather_elements_plan(data.shape, indices, 1).output_shape == (4, 1 << 16)


# ------------------------------------------------------------------------------------------------
# Differential against OpenVINO's CPU plugin


@functools.cache
def compiled(rank: int, axis: int) -> Any:
    data = ov_op.Parameter(ov.Type.i32, ov.PartialShape([-1] * rank))
    indices = ov_op.Parameter(ov.Type.i64, ov.PartialShape([-1] * rank))
    model = ov.Model([ov_opset6.gather_elements(data, indices, axis)], [data, indices])
    return ov.Core().compile_model(model, "CPU")


def random_case(i: int) -> tuple[npt.NDArray[Any], npt.NDArray[Any], int]:
    rng = np.random.default_rng((SEED, i))
    dtype = DATA_TYPES[i % len(DATA_TYPES)]
    rank = 1 + i // len(DATA_TYPES) % 5
    lengths, weights = [0, 1, 2, 3, 4, 5, 7], [0.03, 0.2, 0.27, 0.2, 0.12, 0.1, 0.08]
    data_shape = tuple(int(d) for d in rng.choice(lengths, size=rank, p=weights))
    axis = int(rng.integers(-rank, rank))
    normal = axis % rank
    indices_shape = list(data_shape)
    indices_shape[normal] = int(rng.choice(lengths, p=weights))
    if data_shape[normal] == 0:
        indices_shape[normal] = 0
    index_type = np.int32 if rng.random() < 0.5 else np.int64
    indices = rng.integers(0, max(data_shape[normal], 1), size=indices_shape).astype(index_type)
    if rng.random() < 0.15 and indices.ndim:
        indices = np.flip(indices, axis=-1)  # strided (negative strides)
    data = make_data(rng, dtype, data_shape, strided=bool(rng.random() < 0.2))
    return data, indices, axis


CASES = [random_case(i) for i in range(DIFFERENTIAL_CASES)]


def test_differential_cases_cover_what_they_should() -> None:
    assert {data.dtype for data, _, _ in CASES} == set(DATA_TYPES)
    assert {indices.dtype for _, indices, _ in CASES} == {np.dtype(np.int32), np.dtype(np.int64)}
    assert {data.ndim for data, _, _ in CASES} == {1, 2, 3, 4, 5}
    assert any(axis < 0 for _, _, axis in CASES)
    assert any(data.size == 0 for data, _, _ in CASES)
    assert any(not data.flags.c_contiguous for data, _, _ in CASES)


def test_gather_elements_matches_openvino() -> None:
    sent = agreed = 0  # 275 sent, 275 agreed (seed 20261129)
    failures = []
    for number, (data, indices, axis) in enumerate(CASES):
        got = gather_elements(data, indices, axis)
        np.testing.assert_array_equal(
            raw(got), reference(data, indices, axis), err_msg=f"case {number}"
        )
        if data.size == 0 or got.size == 0:
            continue
        positions = np.arange(1, data.size + 1, dtype=np.int32).reshape(data.shape)
        answer = compiled(data.ndim, axis)([positions, indices.astype(np.int64)])[0]
        where_from = np.asarray(answer).reshape(got.shape)
        sent += 1
        if ((where_from >= 1) & (where_from <= data.size)).all() and np.array_equal(
            raw(data).reshape(-1)[where_from - 1], raw(got)
        ):
            agreed += 1
        else:
            failures.append(number)
    assert sent >= DIFFERENTIAL_CASES * 3 // 4
    assert not failures, f"OpenVINO disagreed on {failures} ({sent} sent, {agreed} agreed)"


@pytest.mark.parametrize("dtype", ["<i1", "<i2", "<i4", ">i4", "<i8", ">i8", "<u4", ">u8"])
def test_bounds_are_checked_by_one_greatest_value(dtype: str) -> None:
    """``check_in_bounds`` compares a signed type's greatest value as the unsigned type of its
    width (a negative value reads as 2**(bits - 1) or more): every value at the edges of
    ``[0, length - 1]`` and of the type, either byte order, strided; a length past the type's
    positive half (where a negative value's unsigned reading could be in range) checked by the
    least and greatest values as they are."""
    info = np.iinfo(np.dtype(dtype))
    refused: list[tuple[list[int], int]] = []

    def refusal(place: list[int], value: int) -> SpecError:
        refused.append((place, value))
        return SpecError("indices", "out")

    lengths = [1, 5, 127, int(info.max), int(info.max) + 1, 1 << 40]
    for length in lengths:
        inside = np.array([0, min(length - 1, int(info.max))] * 3, dtype)[::2]
        check_in_bounds(inside, length, refusal)
        outside = [length, -1, int(info.min), -length, int(info.max)]
        for value in outside:
            if info.min <= value <= info.max and not 0 <= value < length:
                indices = np.zeros(7, dtype)
                indices[5] = value
                refused.clear()
                with pytest.raises(SpecError):
                    check_in_bounds(indices[::1], length, refusal)
                assert refused == [([5], value)]


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """GatherElements of a matrix of ``nbytes / 2`` along its inner axis (int32 indices),
    float32 and int8."""
    return [_gather_elements_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _gather_elements_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    data = square(nbytes // 2, dtype)
    indices = np.broadcast_to(
        np.arange(data.shape[1] - 1, -1, -1, dtype=np.int32), data.shape
    ).copy()

    def model() -> Any:
        import openvino.opset6 as ov_opset6  # noqa: PLC0415

        return plugin_model(lambda p: ov_opset6.gather_elements(p, constant(indices), 1), data)

    arrays = {"data": data, "indices": indices}
    return BenchmarkCase("gather_elements", f"inner axis, {short(dtype)}", arrays, {"axis": 1},
                         data.dtype, 2 * data.nbytes + indices.nbytes, model)  # fmt: skip


# --- the bounds checked by the kernel (large indices along the inner axis) -----------------------


def _outcome(data: Any, indices: Any, axis: int) -> tuple[Any, Any]:
    """What the op's declared plan makes of the request: ("refused", message) or ("ok", the
    output's bits); and, when the kernel checks the bounds, what ``Plan.check`` says apart."""
    try:
        plan = _plan_gather_elements({"data": data, "indices": indices}, {"axis": axis})
    except SpecError as error:
        return ("refused", error.message), None
    apart = None
    if plan.check is not None:
        try:
            plan.check()
        except SpecError as error:
            apart = ("refused", error.message)
    try:
        return ("ok", raw(plan.run(None))), apart
    except SpecError as error:
        return ("refused", error.message), apart


#: Along the last axis; along one whose later dimensions are all 1; rows long and short.
_INNER_SHAPES = [((3, 5, 40), 2), ((4, 100), -1), ((2, 3, 7, 1), 2), ((70, 3), 1)]


@pytest.mark.parametrize("stand_in", [False, True], ids=["compiled", "stand-in"])
@pytest.mark.parametrize("index_type", [np.int32, np.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("dtype", ["int8", "int16", "float32", "float64"])
def test_the_kernel_refuses_what_the_plan_refuses(
    dtype: str, index_type: Any, stand_in: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Indices whose bounds the kernel checks (large ones along the inner axis) give what the
    plan's check gives: the same refusal of the same index, or the same output to the bit; and
    ``Plan.check``, apart, the same refusal before anything is written."""
    import contextlib  # noqa: PLC0415

    from app.ops import gather_elements as module  # noqa: PLC0415
    from app.ops import loops  # noqa: PLC0415

    assert loops.wait_compiled(120)
    rng = np.random.default_rng(5)
    refused = 0
    for shape, axis in _INNER_SHAPES:
        data = rng.integers(-100, 100, shape).astype(dtype)
        length = shape[axis]
        base = rng.integers(0, length, shape).astype(index_type)
        last = tuple(n - 1 for n in shape)
        middle = tuple(n // 2 for n in shape)
        values = [(None, 0), ((0,) * len(shape), -1), (last, length), (middle, -length),
                  (middle, np.iinfo(index_type).max), (last, np.iinfo(index_type).min)]  # fmt: skip
        for at, value in values:
            indices = base.copy()
            if at is not None:
                indices[at] = value
            with loops.numpy_stand_ins() if stand_in else contextlib.nullcontext():
                monkeypatch.setattr(module, "_KERNEL_CHECKS_BYTES", 1 << 62)
                want, _ = _outcome(data, indices, axis)
                monkeypatch.setattr(module, "_KERNEL_CHECKS_BYTES", 0)
                got, apart = _outcome(data, indices, axis)
            assert got[0] == want[0], (shape, at, value)
            if want[0] == "ok":
                assert_same_bits(got[1], want[1])
                assert apart is None
            else:
                assert got == want == apart, (shape, at, value)
                refused += 1
    assert refused == 5 * len(_INNER_SHAPES)


def test_large_indices_are_checked_by_the_kernel() -> None:
    """At the size the kernel checks the bounds itself (no threshold moved), an index past the
    data's axis in the last row is refused naming it, as the plan refused it."""
    from app.ops import gather_elements as module  # noqa: PLC0415

    data = np.arange(64 * 4096, dtype=np.int8).reshape(64, 4096)
    indices = np.random.default_rng(2).integers(0, 4096, (64, 4096)).astype(np.int32)
    assert indices.nbytes >= module._KERNEL_CHECKS_BYTES
    plan = _plan_gather_elements({"data": data, "indices": indices}, {"axis": 1})
    assert plan.check is not None
    assert_same_bits(raw(plan.run(None)), reference(data, indices, 1))
    indices[63, 4095] = 4096
    words = r"indices\[63, 4095\] = 4096 is out of bounds"
    with pytest.raises(SpecError, match=words):
        _plan_gather_elements({"data": data, "indices": indices}, {"axis": 1}).run(None)
    with pytest.raises(SpecError, match=words):
        gather_elements(data, indices, 1)
