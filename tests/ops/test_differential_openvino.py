"""Differential tests: ``app.ops.roll`` and ``app.ops.gather`` against the OpenVINO runtime.

2,611 cases are generated at import time by ``tests/cases.py``, from a fixed seed (no
hypothesis, no clock, no global random state): Roll 1,322 (1,196 legal, 120 illegal, 6 where
spec and OpenVINO differ), Gather 1,289 (1,162 legal, 120 illegal, 7 where they differ). Each
case draws from its own ``numpy.random.default_rng((SEED, kind, i))``, so adding cases never
changes the existing ones. They cover the 13 element types, data ranks 0 to 6 (and a few of
rank 7 and 8, to reach the kernel's path for more than six rolled axes), empty and size-1
dimensions, strided (non-contiguous) inputs, float data with NaN payloads (quiet and
signalling, both signs), -0.0, infinities and subnormals, extreme shifts (int32 and int64 minimum
and maximum), repeated and negative axes, a scalar shift with several axes, every index type
(int8..int64, uint8..uint64), negative and out-of-range indices (uint64 values >= 2**63
included), and every legal ``batch_dims`` (negative forms too). ``test_case_counts_and_coverage``
counts the cases and checks that the generators really produced all of that.

The oracle: run the op on positions instead of values
------------------------------------------------------
Roll and Gather only move elements (Gather also writes zeros for out-of-range indices). So
OpenVINO is never given the data itself: it is given a tensor of *positions*, int32
``arange(1, n + 1)`` in the shape of the data, and its output says, for every output element,
which input element lands there; 0 (which no position has) marks Gather's zero fill. The
expected output is then ``where(pos == 0, 0, data.reshape(-1)[pos - 1])``, taken on the data
viewed as unsigned integers of its width. That makes the oracle exact for every element type,
including the ones OpenVINO's CPU plugin converts internally (it reads int64 data and shifts as
int32, for one), and the comparison is bit for bit: outputs are compared as unsigned integers of
the same width, so NaN payloads, signalling NaNs and -0.0 count.

Gather uses OpenVINO's core reference implementation, ``Node.evaluate`` of an ``opset8.gather``
node (axis a constant of the case's own type and shape, batch_dims the case's own value). It
takes only int32/int64 indices, so the indices are converted to int64 exactly, except that
uint64 values above the int64 maximum become the int64 maximum: still out of range (every data
dimension here is far smaller), so an equivalent form. The reference zero-fills out-of-range
indices as the spec's Example 7 says. Its output tensor is pre-filled with -1 so that an element
it did not write is caught. ``evaluate`` handles empty tensors correctly (checked: empty outputs,
and zero-filled outputs from data with an empty gather axis), so empty cases go through it too.

Roll uses the CPU plugin (``Node.evaluate`` returns False for Roll), with one compiled model per
rank whose data, shift and axes are all Parameters (int32, dimensions dynamic), so nothing is
compiled per case. The plugin is given an equivalent form of each case: int32 positions, axes
normalised to non-negative, every shift reduced modulo its dimension's length (in Python ints,
exactly) and a scalar shift broadcast to the length of axes; repeated axes are passed as they
are, so the plugin still does the summing. Things the plugin is never given: empty tensors
(reported to crash the process; not reproduced with int32 data, but not risked), for which the
expected output is ``numpy.roll`` applied axis by axis (an empty array of the same shape); an
empty shift/axes pair (the dynamic model raises, a compiled constant one returns uninitialised
memory), given instead as shift 0 along axis 0; and rank-0 data, given as shape (1,), since
every legal roll of a scalar is the identity. The spec gives no axes range for a scalar, so the
kernel follows OpenVINO's validation there: a scalar takes axes 0 and -1, as if of rank 1.

Illegal inputs
--------------
For every illegal case both must hold: OpenVINO refuses to build the node with constant
shift/axes/axis (so the case is illegal by OpenVINO's own validation), and the kernel raises
``SpecError`` naming the input that breaks the rule (``SpecError.field``). Where the spec and OpenVINO 2026.4.1 disagree, the spec wins, and the cases are
pinned separately (OpenVINO accepts, the kernel refuses):

* Gather with ``batch_dims < -min(data.rank, indices.rank)``: outside the spec's range, though
  OpenVINO builds the node (with a nonsense output shape in some cases).
* Gather with a uint64 axis in ``[2**64 - data.rank, 2**64 - 1]``: OpenVINO reads it as a
  negative int64; by the spec it is an out-of-range axis.

And the other way round, things the spec allows that OpenVINO does not take: uint64 indices
(``evaluate`` returns False for any index type but int32/int64, hence the int64 form above), a
scalar shift with several axes (the node builds, but the CPU plugin refuses to compile it:
"'shift' and 'axes' dimensions mismatch", hence the broadcast shift).
"""

import functools
import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset7 as ov_opset7
import openvino.opset8 as ov_opset8
import pytest
from openvino import op as ov_op

from app.ops import SpecError, gather, roll
from tests.cases import (
    DATA_TYPES,
    GATHER_CASES,
    GATHER_ILLEGAL,
    GATHER_ILLEGAL_KINDS,
    GATHER_SPEC_ONLY,
    INDEX_TYPES,
    INT64_MAX,
    ROLL_CASES,
    ROLL_ILLEGAL,
    ROLL_ILLEGAL_KINDS,
    ROLL_RANK_0,
    ROLL_TYPES,
    GatherCase,
    RollCase,
    legal_batch_dims_forms,
    raw,
    special_bits,
    type_range,
)

OV_TYPES = {
    "bool": ov.Type.boolean,
    "int8": ov.Type.i8,
    "int16": ov.Type.i16,
    "int32": ov.Type.i32,
    "int64": ov.Type.i64,
    "uint8": ov.Type.u8,
    "uint16": ov.Type.u16,
    "uint32": ov.Type.u32,
    "uint64": ov.Type.u64,
    "float16": ov.Type.f16,
    "bfloat16": ov.Type.bf16,
    "float32": ov.Type.f32,
    "float64": ov.Type.f64,
}


# ------------------------------------------------------------------------------------------------
# The oracle


def positions(shape: tuple[int, ...]) -> npt.NDArray[np.int32]:
    return np.arange(1, math.prod(shape) + 1, dtype=np.int32).reshape(shape)


def expected_from_positions(
    data: npt.NDArray[Any], where_from: npt.NDArray[Any]
) -> npt.NDArray[Any]:
    """The expected output, as raw bits: element ``where_from - 1`` of data, or 0 where it is 0."""
    flat = raw(data).reshape(-1)
    if where_from.size:
        assert where_from.min() >= 0, "the oracle wrote a negative position"
        assert where_from.max() <= flat.size, "the oracle wrote a position beyond the data"
    if flat.size == 0:
        assert not where_from.any(), "the oracle took elements from empty data"
        return np.zeros(where_from.shape, dtype=flat.dtype)
    taken = flat[np.maximum(where_from, 1) - 1]
    expected: npt.NDArray[Any] = np.where(where_from == 0, flat.dtype.type(0), taken)
    return expected


@functools.cache
def openvino_core() -> ov.Core:
    return ov.Core()


@functools.cache
def roll_request(rank: int) -> ov.InferRequest:
    """A CPU-compiled Roll of int32 data of ``rank``, shift and axes int32 1D Parameters."""
    data = ov_op.Parameter(ov.Type.i32, ov.PartialShape([-1] * rank))
    shift = ov_op.Parameter(ov.Type.i32, ov.PartialShape([-1]))
    axes = ov_op.Parameter(ov.Type.i32, ov.PartialShape([-1]))
    model = ov.Model([ov_opset7.roll(data, shift, axes)], [data, shift, axes])
    return openvino_core().compile_model(model, "CPU").create_infer_request()


def roll_expected(case: RollCase) -> npt.NDArray[Any]:
    shape = case.data.shape
    rank = len(shape)
    axes = [int(a) for a in case.axes.reshape(-1)]
    shifts = [int(s) for s in np.broadcast_to(case.shift.reshape(-1), (len(axes),))]
    normal_axes = [a + rank if a < 0 else a for a in axes]
    if case.data.size == 0:
        # Never sent to the CPU plugin: an empty roll is an empty array of the same shape.
        expected = raw(case.data)
        for shift, axis in zip(shifts, normal_axes, strict=True):
            expected = np.roll(expected, shift, axis)
        return expected
    reduced = [shift % shape[axis] for shift, axis in zip(shifts, normal_axes, strict=True)]
    if not normal_axes:
        normal_axes, reduced = [0], [0]
    where = positions(shape).reshape(shape or (1,))
    result = roll_request(where.ndim).infer(
        [where, np.array(reduced, dtype=np.int32), np.array(normal_axes, dtype=np.int32)]
    )[0]
    where_from = np.asarray(result).reshape(shape)
    assert np.array_equal(np.sort(where_from, axis=None), np.sort(where, axis=None)), (
        "OpenVINO's Roll did not return a permutation of the positions"
    )
    return expected_from_positions(case.data, where_from)


def gather_expected(case: GatherCase) -> npt.NDArray[Any]:
    data_shape = case.data.shape
    indices = case.indices
    if indices.dtype == np.uint64:
        # evaluate() takes int32/int64 indices only: values above the int64 maximum become the
        # int64 maximum, out of range just the same.
        indices = np.minimum(indices, np.uint64(INT64_MAX))
    indices64 = np.array(indices, dtype=np.int64, order="C")  # (ascontiguousarray makes 0-D 1-D)
    node = ov_opset8.gather(
        ov_op.Parameter(ov.Type.i32, ov.PartialShape(list(data_shape))),
        ov_op.Parameter(ov.Type.i64, ov.PartialShape(list(indices64.shape))),
        ov_op.Constant(case.axis),
        case.batch_dims,
    )
    output_shape = tuple(node.get_output_shape(0))
    output = ov.Tensor(ov.Type.i32, ov.Shape(list(output_shape)))
    output.data[...] = -1  # an element evaluate() fails to write shows as position -1
    done = node.evaluate(
        [output], [ov.Tensor(positions(data_shape)), ov.Tensor(indices64), ov.Tensor(case.axis)]
    )
    assert done, "OpenVINO's Gather evaluate() returned False"
    return expected_from_positions(case.data, np.array(output.data).reshape(output_shape))


def openvino_refusal(build: Callable[[], object]) -> str | None:
    """The message of the exception OpenVINO raises building a node, None if it builds it."""
    try:
        build()
    except Exception as error:  # OpenVINO raises RuntimeError, and others (bad_alloc, ...)
        return f"{type(error).__name__}: {str(error).strip().splitlines()[-1]}"
    return None


def build_roll(case: RollCase) -> Callable[[], object]:
    return lambda: ov_opset7.roll(
        ov_op.Parameter(OV_TYPES[case.data.dtype.name], ov.PartialShape(list(case.data.shape))),
        ov_op.Constant(case.shift),
        ov_op.Constant(case.axes),
    )


def build_gather(case: GatherCase) -> Callable[[], object]:
    return lambda: ov_opset8.gather(
        ov_op.Parameter(OV_TYPES[case.data.dtype.name], ov.PartialShape(list(case.data.shape))),
        ov_op.Parameter(
            OV_TYPES[case.indices.dtype.name], ov.PartialShape(list(case.indices.shape))
        ),
        ov_op.Constant(case.axis),
        case.batch_dims,
    )


def assert_same_bits(
    description: str, got: object, expected_raw: npt.NDArray[Any], dtype: np.dtype[Any]
) -> None:
    assert isinstance(got, np.ndarray), f"{description}\nreturned {type(got).__name__}"
    assert got.dtype == dtype, f"{description}\nreturned type {got.dtype}, expected {dtype}"
    assert got.shape == expected_raw.shape, (
        f"{description}\nreturned shape {got.shape}, expected {expected_raw.shape}"
    )
    got_raw = raw(got)
    if not np.array_equal(got_raw, expected_raw):
        wrong = np.argwhere(got_raw != expected_raw)
        first = tuple(int(i) for i in wrong[0])
        pytest.fail(
            f"{description}\n{len(wrong)} element(s) differ; first at {first}: "
            f"got bits {int(got_raw[first]):#x} ({got[first]!r}), "
            f"expected bits {int(expected_raw[first]):#x}\n"
            f"got (bits):\n{got_raw}\nexpected (bits):\n{expected_raw}"
        )


# ------------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("case", ROLL_CASES, ids=lambda case: case.name)
def test_roll_matches_openvino(case: RollCase) -> None:
    before = raw(case.data).copy()
    expected = roll_expected(case)
    got = roll(case.data, case.shift, case.axes)
    assert_same_bits(case.describe(), got, expected, case.data.dtype)
    assert np.array_equal(raw(case.data), before), f"{case.describe()}\nmodified its input"


@pytest.mark.parametrize("case", GATHER_CASES, ids=lambda case: case.name)
def test_gather_matches_openvino(case: GatherCase) -> None:
    before = raw(case.data).copy()
    expected = gather_expected(case)
    got = gather(case.data, case.indices, case.axis, case.batch_dims)
    assert_same_bits(case.describe(), got, expected, case.data.dtype)
    assert np.array_equal(raw(case.data), before), f"{case.describe()}\nmodified its input"


@pytest.mark.parametrize("case", ROLL_ILLEGAL, ids=lambda case: case.name)
def test_roll_refuses_what_openvino_refuses(case: RollCase) -> None:
    refusal = openvino_refusal(build_roll(case))
    assert refusal is not None, f"{case.describe()}\nOpenVINO accepts it: not an illegal case"
    with pytest.raises(SpecError) as error:
        roll(case.data, case.shift, case.axes)
    assert error.value.field == ROLL_ILLEGAL_KINDS[case.why], f"{case.describe()}\n{refusal}"


@pytest.mark.parametrize("case", GATHER_ILLEGAL, ids=lambda case: case.name)
def test_gather_refuses_what_openvino_refuses(case: GatherCase) -> None:
    refusal = openvino_refusal(build_gather(case))
    assert refusal is not None, f"{case.describe()}\nOpenVINO accepts it: not an illegal case"
    with pytest.raises(SpecError) as error:
        gather(case.data, case.indices, case.axis, case.batch_dims)
    assert error.value.field == GATHER_ILLEGAL_KINDS[case.why], f"{case.describe()}\n{refusal}"


@pytest.mark.parametrize("case", ROLL_RANK_0, ids=lambda case: case.name)
def test_roll_of_rank_0_data_follows_openvino(case: RollCase) -> None:
    # Where the spec is silent OpenVINO's validation decides: it accepts, the output is the input.
    assert openvino_refusal(build_roll(case)) is None, case.describe()
    assert_same_bits(
        case.describe(), roll(case.data, case.shift, case.axes), raw(case.data), case.data.dtype
    )


@pytest.mark.parametrize("case", GATHER_SPEC_ONLY, ids=lambda case: case.name)
def test_gather_refuses_by_the_spec_what_openvino_accepts(case: GatherCase) -> None:
    assert openvino_refusal(build_gather(case)) is None, case.describe()
    with pytest.raises(SpecError):
        gather(case.data, case.indices, case.axis, case.batch_dims)


def test_case_counts_and_coverage() -> None:
    """The generators produce what the module docstring promises, and enough of it."""
    roll_total = len(ROLL_CASES) + len(ROLL_ILLEGAL) + len(ROLL_RANK_0)
    gather_total = len(GATHER_CASES) + len(GATHER_ILLEGAL) + len(GATHER_SPEC_ONLY)
    assert roll_total + gather_total >= 2400
    assert len({case.name for case in ROLL_CASES + ROLL_ILLEGAL + ROLL_RANK_0}) == roll_total
    assert len({case.name for case in GATHER_CASES + GATHER_ILLEGAL + GATHER_SPEC_ONLY}) == (
        gather_total
    )

    # Roll
    assert {case.data.dtype for case in ROLL_CASES} == set(DATA_TYPES)
    assert {case.data.ndim for case in ROLL_CASES} >= set(range(9))
    assert any(case.data.size == 0 for case in ROLL_CASES)
    assert any(1 in case.data.shape for case in ROLL_CASES)
    assert any(not case.data.flags.c_contiguous for case in ROLL_CASES)
    for shift_type in ROLL_TYPES:
        low, high = type_range(shift_type)
        shifts = {int(s) for c in ROLL_CASES if c.shift.dtype == shift_type for s in c.shift.flat}
        assert {low, high} <= shifts
    assert any(case.shift.ndim == 0 and case.axes.size >= 2 for case in ROLL_CASES)
    assert any(case.shift.ndim == 0 and case.axes.ndim == 0 for case in ROLL_CASES)
    assert any(case.axes.size == 0 for case in ROLL_CASES)
    assert any(len(set(case.axes.flat)) < case.axes.size for case in ROLL_CASES)
    assert any((case.axes < 0).any() for case in ROLL_CASES)
    assert {(c.shift.dtype, c.axes.dtype) for c in ROLL_CASES} == {
        (s, a) for s in ROLL_TYPES for a in ROLL_TYPES
    }
    assert {case.why for case in ROLL_ILLEGAL} == set(ROLL_ILLEGAL_KINDS)

    # Gather
    assert {case.data.dtype for case in GATHER_CASES} == set(DATA_TYPES)
    assert {case.data.ndim for case in GATHER_CASES} == set(range(1, 7))
    assert 0 in {case.data.ndim for case in GATHER_ILLEGAL}
    assert {case.indices.dtype for case in GATHER_CASES} == set(INDEX_TYPES)
    assert {case.axis.dtype for case in GATHER_CASES} == set(INDEX_TYPES)
    assert {case.axis.shape for case in GATHER_CASES} == {(), (1,)}
    assert {case.indices.ndim for case in GATHER_CASES} >= set(range(5))
    assert any(case.data.size == 0 for case in GATHER_CASES)
    assert any(case.indices.size == 0 for case in GATHER_CASES)
    assert any(case.data.size == 0 and case.indices.size > 0 for case in GATHER_CASES)
    assert any(not case.indices.flags.c_contiguous for case in GATHER_CASES)
    assert any((case.indices.astype(np.float64) < 0).any() for case in GATHER_CASES)
    big = [c for c in GATHER_CASES if c.indices.dtype == np.uint64 and (c.indices >= 2**63).any()]
    assert big
    assert any((c.indices == np.uint64(2**64 - 1)).any() for c in big)
    assert any(case.batch_dims < 0 for case in GATHER_CASES)
    assert any(int(case.axis.reshape(-1)[0]) < 0 for case in GATHER_CASES)
    used = {
        (c.data.ndim, c.indices.ndim, int(c.axis.reshape(-1)[0]), c.batch_dims)
        for c in GATHER_CASES
    }
    for data_rank in range(1, 5):
        for indices_rank in range(4):
            for normal_axis in range(data_rank):
                for normal_batch in range(min(normal_axis, indices_rank) + 1):
                    for batch_dims in legal_batch_dims_forms(data_rank, indices_rank, normal_batch):
                        for axis in (normal_axis, normal_axis - data_rank):
                            assert (data_rank, indices_rank, axis, batch_dims) in used
    assert {case.why for case in GATHER_ILLEGAL} == set(GATHER_ILLEGAL_KINDS)

    # Float data has NaNs with payloads, -0.0, infinities and subnormals.
    for dtype in (t for t in DATA_TYPES if t.kind == "f" or t == ml_dtypes.bfloat16):
        seen: set[int] = set()
        for case in ROLL_CASES + GATHER_CASES:
            if case.data.dtype == dtype:
                seen.update(int(b) for b in raw(case.data).flat)
        assert set(special_bits(dtype).tolist()) <= seen, dtype
