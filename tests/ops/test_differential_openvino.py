"""Differential tests: ``app.ops.roll`` and ``app.ops.gather`` against the OpenVINO runtime.

2,611 cases are generated at import time from a fixed seed (no hypothesis, no clock, no global
random state): Roll 1,322 (1,196 legal, 120 illegal, 6 where spec and OpenVINO differ), Gather
1,289 (1,162 legal, 120 illegal, 7 where they differ). Each case draws from its own
``numpy.random.default_rng((SEED, kind, i))``, so adding cases never changes the existing ones. They cover the 13 element types, data ranks 0
to 6 (and a few of rank 7 and 8, to reach the kernel's path for more than six rolled axes), empty
and size-1 dimensions, strided (non-contiguous) inputs, float data with NaN payloads (quiet and
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
from dataclasses import dataclass
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

SEED = 20260407

DATA_TYPES: tuple[np.dtype[Any], ...] = tuple(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        ml_dtypes.bfloat16,
        np.float32,
        np.float64,
    )
)
INDEX_TYPES: tuple[np.dtype[Any], ...] = tuple(
    np.dtype(t)
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
)
SIGNED_INDEX_TYPES = tuple(t for t in INDEX_TYPES if t.kind == "i")
ROLL_TYPES = (np.dtype(np.int32), np.dtype(np.int64))
# Types outside Roll's T_IND_1/T_IND_2 (int32, int64), and outside Gather's T_IND/T_AXIS (any
# integer type).
NOT_ROLL_INDEX_TYPES = (
    *(t for t in INDEX_TYPES if t not in ROLL_TYPES),
    np.dtype(np.float16),
    np.dtype(np.float32),
    np.dtype(np.float64),
    np.dtype(np.bool_),
)
NOT_INTEGER_TYPES = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.bool_))

RAW_TYPES = {size: np.dtype(f"u{size}") for size in (1, 2, 4, 8)}
INT64_MAX = 2**63 - 1

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

# Length of the dimensions drawn for shapes, and how often: size 1 and empty ones included.
DIM_LENGTHS = np.array([0, 1, 2, 3, 4, 5, 7])
DIM_WEIGHTS = np.array([0.04, 0.22, 0.24, 0.2, 0.12, 0.1, 0.08])
MAX_DATA_SIZE = 3000
MAX_OUTPUT_SIZE = 4000

ROLL_RANDOM_CASES = 1170  # 90 of each element type, ranks 0..6 in turn
ROLL_HIGH_RANK_CASES = 26  # ranks 7 and 8, every axis rolled
ROLL_ILLEGAL_CASES = 120
GATHER_RANDOM_CASES = 950
GATHER_ILLEGAL_CASES = 120


# ------------------------------------------------------------------------------------------------
# Data


def raw(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` viewed as unsigned integers of its width: equal bits compare equal."""
    return array.view(RAW_TYPES[array.dtype.itemsize])


_MANTISSA_BITS = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}


def special_bits(dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """Bit patterns worth having in data of ``dtype``, as its unsigned integer twin."""
    raw_type = RAW_TYPES[dtype.itemsize]
    if dtype.kind == "b":
        return np.array([0, 1], dtype=raw_type)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        values = [info.min, info.max, 0, 1, info.max - 1, info.min + 1]
        if dtype.kind == "i":
            values.append(-1)
        return raw(np.array(values, dtype=dtype))
    width = dtype.itemsize * 8
    mantissa = _MANTISSA_BITS[dtype.name]
    sign = 1 << (width - 1)
    exponent = sign - (1 << mantissa)  # every exponent bit set: infinities and NaNs
    quiet = 1 << (mantissa - 1)
    patterns = [
        0,  # +0.0
        sign,  # -0.0
        exponent,  # +inf
        sign | exponent,  # -inf
        exponent | quiet,  # the default quiet NaN
        exponent | quiet | 0b101,  # quiet NaN with a payload
        sign | exponent | quiet | 0b11,  # negative quiet NaN with a payload
        exponent | 1,  # signalling NaN
        sign | exponent | 0b10,  # negative signalling NaN
        1,  # smallest subnormal
        (1 << mantissa) - 1,  # largest subnormal
        sign | 1,  # negative subnormal
        sign | ((1 << mantissa) - 1),
        1 << mantissa,  # smallest normal
        exponent - 1,  # largest finite
        sign | (exponent - 1),
    ]
    return np.array(patterns, dtype=raw_type)


def make_data(
    rng: np.random.Generator, dtype: np.dtype[Any], shape: tuple[int, ...], strided: bool
) -> npt.NDArray[Any]:
    """Random data of ``dtype`` and ``shape``: random bits, special values, ordinary values.

    ``strided`` makes a non-contiguous view (every other element of a twice longer last axis).
    """
    strided = strided and len(shape) > 0
    base_shape = (*shape[:-1], shape[-1] * 2) if strided else shape
    size = math.prod(base_shape)
    raw_type = RAW_TYPES[dtype.itemsize]
    if dtype.kind == "b":
        bits = rng.integers(0, 2, size=size, dtype=np.uint8)
    else:
        bits = rng.integers(0, 256, size=size * dtype.itemsize, dtype=np.uint8).view(raw_type)
        draw = rng.random(size)
        specials = draw < 0.3
        bits[specials] = rng.choice(special_bits(dtype), size=int(specials.sum()))
        if dtype.kind == "f" or dtype == ml_dtypes.bfloat16:
            ordinary = (draw >= 0.3) & (draw < 0.6)
            count = int(ordinary.sum())
            values = rng.normal(size=count) * 10.0 ** rng.integers(-3, 4, size=count)
            bits[ordinary] = raw(values.astype(dtype))
    data = bits.reshape(base_shape).view(dtype)
    return data[..., ::2] if strided else data


def random_dims(rng: np.random.Generator, count: int) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.choice(DIM_LENGTHS, size=count, p=DIM_WEIGHTS))


def random_shape(rng: np.random.Generator, rank: int) -> tuple[int, ...]:
    for _ in range(100):
        shape = random_dims(rng, rank)
        if math.prod(shape) <= MAX_DATA_SIZE:
            return shape
    return (2,) * rank


def shape_text(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def array_text(array: npt.NDArray[Any]) -> str:
    kind = f"{array.dtype.name}{list(array.shape)}"
    return f"{kind}={array.tolist()}" if array.size <= 16 else kind


def type_range(dtype: np.dtype[Any]) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


# ------------------------------------------------------------------------------------------------
# Cases


@dataclass(frozen=True)
class RollCase:
    name: str
    data: npt.NDArray[Any]
    shift: npt.NDArray[Any]
    axes: npt.NDArray[Any]
    why: str = ""  # for illegal cases: the rule broken

    def describe(self) -> str:
        return (
            f"{self.name}: roll(data={self.data.dtype.name}{list(self.data.shape)}, "
            f"shift={array_text(self.shift)}, axes={array_text(self.axes)}) {self.why}"
        )


@dataclass(frozen=True)
class GatherCase:
    name: str
    data: npt.NDArray[Any]
    indices: npt.NDArray[Any]
    axis: npt.NDArray[Any]
    batch_dims: int
    why: str = ""

    def describe(self) -> str:
        return (
            f"{self.name}: gather(data={self.data.dtype.name}{list(self.data.shape)}, "
            f"indices={array_text(self.indices)}, axis={array_text(self.axis)}, "
            f"batch_dims={self.batch_dims}) {self.why}"
        )


def shift_value(rng: np.random.Generator, length: int, dtype: np.dtype[Any]) -> int:
    """One shift for an axis of ``length``: small, near a multiple of it, extreme or anything."""
    low, high = type_range(dtype)
    draw = rng.random()
    if draw < 0.4:
        value = int(rng.integers(-2 * length - 3, 2 * length + 4))
    elif draw < 0.55:
        value = max(length, 1) * int(rng.integers(-(10**6), 10**6)) + int(rng.integers(-2, 3))
    elif draw < 0.8:
        value = int(rng.choice([low, high, low + 1, high - 1]))
    else:
        value = int(rng.integers(low, high, endpoint=True))
    return min(max(value, low), high)


# How many axes a 1D axes tensor has: 0 to 7, several (and so repeats) most often.
PICK_AXES_COUNT = [0.06, 0.2, 0.22, 0.18, 0.14, 0.1, 0.06, 0.04]


def roll_case(index: int) -> RollCase:
    rng = np.random.default_rng((SEED, 1, index))
    dtype = DATA_TYPES[index % len(DATA_TYPES)]
    rank = (index // len(DATA_TYPES)) % 7
    shape = random_shape(rng, rank)
    data = make_data(rng, dtype, shape, strided=bool(rng.random() < 0.12))
    shift_type = ROLL_TYPES[int(rng.integers(2))]
    axes_type = ROLL_TYPES[int(rng.integers(2))]
    if rank == 0:
        # A scalar has no axes: the only legal rolls are by empty axes.
        axes = np.zeros(0, dtype=axes_type)
        form = "scalar-empty" if rng.random() < 0.5 else "1d-empty"
        if form == "scalar-empty":
            shift = np.array(shift_value(rng, 1, shift_type), dtype=shift_type)
        else:
            shift = np.zeros(0, dtype=shift_type)
        return RollCase(f"roll-{index:04d}-{dtype.name}-scalar-{form}", data, shift, axes)
    form = str(rng.choice(["scalar-scalar", "scalar-1d", "1d-1d"], p=[0.2, 0.35, 0.45]))
    count = 1 if form == "scalar-scalar" else int(rng.choice(range(8), p=PICK_AXES_COUNT))
    axis_values = [int(a) for a in rng.integers(-rank, rank, size=count)]
    if form == "scalar-scalar":
        axes = np.array(axis_values[0], dtype=axes_type)
    else:
        axes = np.array(axis_values, dtype=axes_type)
    if form.startswith("scalar"):
        length = shape[axis_values[0]] if axis_values else 1
        shift = np.array(shift_value(rng, length, shift_type), dtype=shift_type)
    else:
        shift = np.array([shift_value(rng, shape[a], shift_type) for a in axis_values], shift_type)
    name = (
        f"roll-{index:04d}-{dtype.name}-{shape_text(shape)}-shift-{shift_type.name}-"
        f"{shape_text(shift.shape)}-axes-{axes_type.name}-{shape_text(axes.shape)}"
    )
    return RollCase(name, data, shift, axes)


def roll_high_rank_case(index: int) -> RollCase:
    """Rank 7 or 8, every axis rolled by a non-zero net shift (more than six rolled axes)."""
    rng = np.random.default_rng((SEED, 2, index))
    dtype = DATA_TYPES[index % len(DATA_TYPES)]
    rank = 7 + index % 2
    shape = tuple(int(d) for d in rng.integers(2, 4, size=rank))
    data = make_data(rng, dtype, shape, strided=False)
    axes_list = [int(a) - rank * int(rng.integers(2)) for a in rng.permutation(rank)]
    shifts = [
        int(rng.integers(1, shape[a])) + shape[a] * int(rng.integers(-50, 50)) for a in axes_list
    ]
    axes = np.array(axes_list, dtype=np.int64)
    shift = np.array(shifts, dtype=np.int64)
    return RollCase(f"roll-high-{index:02d}-{dtype.name}-{shape_text(shape)}", data, shift, axes)


def gather_case(
    name: str,
    rng: np.random.Generator,
    dtype: np.dtype[Any],
    index_type: np.dtype[Any],
    data_rank: int,
    indices_rank: int,
    axis: int,
    batch_dims: int,
) -> GatherCase:
    """A legal Gather with the given attributes (as given, negative forms included)."""
    normal_axis = axis + data_rank if axis < 0 else axis
    normal_batch = batch_dims + indices_rank if batch_dims < 0 else batch_dims
    for _ in range(100):
        data_shape = random_shape(rng, data_rank)
        indices_shape = data_shape[:normal_batch] + random_dims(rng, indices_rank - normal_batch)
        output_size = math.prod(
            data_shape[:normal_axis] + indices_shape[normal_batch:] + data_shape[normal_axis + 1 :]
        )
        if output_size <= MAX_OUTPUT_SIZE and math.prod(indices_shape) <= MAX_DATA_SIZE:
            break
    else:
        data_shape = (2,) * data_rank
        indices_shape = (2,) * indices_rank
    data = make_data(rng, dtype, data_shape, strided=bool(rng.random() < 0.1))
    indices = make_indices(rng, index_type, indices_shape, data_shape[normal_axis])
    if axis < 0:
        axis_type = SIGNED_INDEX_TYPES[int(rng.integers(len(SIGNED_INDEX_TYPES)))]
    else:
        axis_type = INDEX_TYPES[int(rng.integers(len(INDEX_TYPES)))]
    axis_array = np.array(axis if rng.random() < 0.6 else [axis], dtype=axis_type)
    return GatherCase(
        f"{name}-{dtype.name}-{shape_text(data_shape)}-indices-{index_type.name}"
        f"-{shape_text(indices_shape)}-axis{axis:+d}-b{batch_dims:+d}",
        data,
        indices,
        axis_array,
        batch_dims,
    )


def make_indices(
    rng: np.random.Generator, index_type: np.dtype[Any], shape: tuple[int, ...], length: int
) -> npt.NDArray[Any]:
    """Indices for an axis of ``length``: mostly in range, the rest out of range in every way.

    Out of range includes ``length`` and ``-length - 1``, the type's extremes, and for unsigned
    types the values that would land in range if wrongly read as signed (``2**w - k``).
    """
    low, high = type_range(index_type)
    in_range = list(range(-length if index_type.kind == "i" else 0, length))
    width = index_type.itemsize * 8
    traps = {length, length + 1, -length - 1, low, high, low + 1, high - 1, 2**62, -(2**62)}
    if index_type.kind == "u":
        traps |= {2**width - k for k in range(1, length + 2)}
        traps |= {2 ** (width - 1), 2 ** (width - 1) - 1}
    out_of_range = sorted(v for v in traps if low <= v <= high and not -length <= v < length)
    size = math.prod(shape)
    picks = rng.choice(np.array(out_of_range, dtype=index_type), size=size)
    if in_range:
        chosen = rng.random(size) < rng.uniform(0.5, 1.0)
        in_range_picks = rng.choice(np.array(in_range, dtype=index_type), size=size)
        picks[chosen] = in_range_picks[chosen]
    if rng.random() < 0.1 and shape:
        # Strided indices: every other element of a twice longer array.
        padded = np.zeros(size * 2, dtype=index_type)
        padded[::2] = picks
        return padded.reshape(*shape[:-1], shape[-1] * 2)[..., ::2]
    return picks.reshape(shape)


def legal_batch_dims_forms(data_rank: int, indices_rank: int, normal: int) -> list[int]:
    """The values of batch_dims that normalise to ``normal``: itself, and negative if allowed."""
    forms = [normal]
    negative = normal - indices_rank
    if negative < 0 and negative >= -min(data_rank, indices_rank):
        forms.append(negative)
    return forms


def gather_grid_cases() -> list[GatherCase]:
    """Every legal (axis, batch_dims) pair, both forms of each, for data rank 1..4, indices 0..3."""
    cases = []
    counter = 0
    for data_rank in range(1, 5):
        for indices_rank in range(4):
            for normal_axis in range(data_rank):
                for axis in (normal_axis, normal_axis - data_rank):
                    for normal_batch in range(min(normal_axis, indices_rank) + 1):
                        for batch_dims in legal_batch_dims_forms(
                            data_rank, indices_rank, normal_batch
                        ):
                            rng = np.random.default_rng((SEED, 4, counter))
                            cases.append(
                                gather_case(
                                    f"gather-grid-{counter:03d}",
                                    rng,
                                    DATA_TYPES[counter % len(DATA_TYPES)],
                                    INDEX_TYPES[counter % len(INDEX_TYPES)],
                                    data_rank,
                                    indices_rank,
                                    axis,
                                    batch_dims,
                                )
                            )
                            counter += 1
    return cases


def gather_random_case(index: int) -> GatherCase:
    rng = np.random.default_rng((SEED, 5, index))
    data_rank = 1 + (index // len(DATA_TYPES)) % 6
    indices_rank = int(rng.integers(0, 5))
    normal_axis = int(rng.integers(data_rank))
    axis = normal_axis - data_rank if rng.random() < 0.4 else normal_axis
    normal_batch = int(rng.integers(min(normal_axis, indices_rank) + 1))
    forms = legal_batch_dims_forms(data_rank, indices_rank, normal_batch)
    batch_dims = forms[int(rng.integers(len(forms)))]
    return gather_case(
        f"gather-{index:04d}",
        rng,
        DATA_TYPES[index % len(DATA_TYPES)],
        INDEX_TYPES[index % len(INDEX_TYPES)],
        data_rank,
        indices_rank,
        axis,
        batch_dims,
    )


# ------------------------------------------------------------------------------------------------
# Illegal cases: OpenVINO refuses to build the node, the kernel must raise SpecError.

# Each kind of illegal Roll, and the input the kernel must blame (SpecError.field).
ROLL_ILLEGAL_KINDS = {
    "axis-out-of-range": "axes",
    "axis-out-of-range-in-list": "axes",
    "axes-rank-2": "axes",
    "axes-type": "axes",
    "shift-1d-axes-scalar": "shift",
    "shift-axes-lengths-differ": "shift",
    "shift-rank-2": "shift",
    "shift-type": "shift",
}


def out_of_range_axis(rng: np.random.Generator, rank: int, dtype: np.dtype[Any]) -> int:
    """An axis outside [-rank, rank - 1] (and, for rank 0, outside OpenVINO's [-1, 0] too)."""
    low, high = type_range(dtype)
    floor = -max(rank, 1) - 1
    choices = [max(rank, 1), floor, max(rank, 1) + int(rng.integers(1, 100)), low, high, low + 1]
    choices.append(int(rng.integers(low, floor, endpoint=True)))
    return int(rng.choice(choices))


def roll_illegal_case(index: int) -> RollCase:
    rng = np.random.default_rng((SEED, 6, index))
    kinds = list(ROLL_ILLEGAL_KINDS)
    kind = kinds[index % len(kinds)]
    dtype = DATA_TYPES[index % len(DATA_TYPES)]
    rank = int(rng.integers(0 if kind == "axis-out-of-range" else 1, 7))
    shape = random_shape(rng, rank)
    data = make_data(rng, dtype, shape, strided=False)
    shift_type = ROLL_TYPES[int(rng.integers(2))]
    axes_type = ROLL_TYPES[int(rng.integers(2))]
    count = int(rng.integers(1, 5))
    legal_axes = [int(a) for a in rng.integers(-rank, rank, size=count)]
    shifts = [shift_value(rng, 5, shift_type) for _ in range(count)]
    if kind == "axis-out-of-range":
        shift = np.array(shifts[0], dtype=shift_type)
        axes = np.array(out_of_range_axis(rng, rank, axes_type), dtype=axes_type)
    elif kind == "axis-out-of-range-in-list":
        legal_axes[int(rng.integers(count))] = out_of_range_axis(rng, rank, axes_type)
        axes = np.array(legal_axes, dtype=axes_type)
        shift = np.array(shifts if rng.random() < 0.5 else shifts[0], dtype=shift_type)
    elif kind == "shift-1d-axes-scalar":
        shift = np.array(shifts, dtype=shift_type)
        axes = np.array(legal_axes[0], dtype=axes_type)
    elif kind == "shift-axes-lengths-differ":
        other = int(rng.choice([c for c in range(6) if c != count]))
        shift = np.array([shift_value(rng, 5, shift_type) for _ in range(other)], dtype=shift_type)
        axes = np.array(legal_axes, dtype=axes_type)
    elif kind == "shift-rank-2":
        shift = np.array(shifts, dtype=shift_type).reshape(count, 1)
        axes = np.array(legal_axes if rng.random() < 0.5 else legal_axes[0], dtype=axes_type)
    elif kind == "axes-rank-2":
        shift = np.array(shifts[0], dtype=shift_type)
        axes = np.array(legal_axes, dtype=axes_type).reshape(1, count)
    elif kind == "shift-type":
        bad_type = NOT_ROLL_INDEX_TYPES[index // len(kinds) % len(NOT_ROLL_INDEX_TYPES)]
        shift = np.array([s % 100 for s in shifts], dtype=np.int64).astype(bad_type)
        axes = np.array(legal_axes, dtype=axes_type)
    else:
        bad_type = NOT_ROLL_INDEX_TYPES[index // len(kinds) % len(NOT_ROLL_INDEX_TYPES)]
        shift = np.array(shifts, dtype=shift_type)
        axes = np.array([a % rank for a in legal_axes], dtype=np.int64).astype(bad_type)
    return RollCase(
        f"roll-illegal-{index:03d}-{kind}-{dtype.name}-{shape_text(shape)}",
        data,
        shift,
        axes,
        why=kind,
    )


# Each kind of illegal Gather, and the input the kernel must blame (SpecError.field).
GATHER_ILLEGAL_KINDS = {
    "axis-out-of-range": "axis",
    "axis-shape": "axis",
    "axis-type": "axis",
    "batch-dims-above-range": "batch_dims",
    "batch-dims-after-axis": "batch_dims",
    "batch-dims-negative-scalar-indices": "batch_dims",
    "batch-shapes-differ": "indices",
    "indices-type": "indices",
}
AXIS_SHAPES = ((2,), (0,), (1, 1), (3,), (1, 1, 1), (2, 1))


def illegal_axis(
    rng: np.random.Generator, kind: str, index: int, data_rank: int
) -> npt.NDArray[Any]:
    """The axis of an illegal Gather: legal unless ``kind`` is about the axis."""
    axis_type = INDEX_TYPES[int(rng.integers(len(INDEX_TYPES)))]
    axis = int(rng.integers(data_rank)) if data_rank else 0
    if kind == "axis-shape":
        return np.full(AXIS_SHAPES[index // 8 % len(AXIS_SHAPES)], axis, dtype=axis_type)
    if kind == "axis-type":
        return np.array(axis, dtype=NOT_INTEGER_TYPES[index // 8 % len(NOT_INTEGER_TYPES)])
    if kind != "axis-out-of-range":
        return np.array(axis, dtype=axis_type)
    if data_rank == 0 and rng.random() < 0.4:
        return np.array(int(rng.choice([0, -1])), dtype=np.int64)  # rank 0 has no axis at all
    if rng.random() < 0.3:
        # OpenVINO reads uint64 values from 2**63 as negative int64 ones, and still refuses
        # these; the values it reads as -1, -2, ... are in spec_only_gather_cases.
        return np.array(int(rng.choice([2**63, 2**63 + 12345, 2**64 - 1000])), dtype=np.uint64)
    axis_type = SIGNED_INDEX_TYPES[int(rng.integers(len(SIGNED_INDEX_TYPES)))]
    return np.array(out_of_range_axis(rng, data_rank, axis_type), dtype=axis_type)


def illegal_batch(
    rng: np.random.Generator,
    kind: str,
    data_shape: tuple[int, ...],
    indices_shape: tuple[int, ...],
    axis: int,
) -> tuple[tuple[int, ...], int]:
    """Indices shape and batch_dims of an illegal Gather: legal unless ``kind`` is about them."""
    data_rank = len(data_shape)
    if kind == "batch-dims-above-range":
        return indices_shape, min(data_rank, len(indices_shape)) + int(rng.choice([1, 2, 5, 2**40]))
    if kind == "batch-dims-negative-scalar-indices":
        return (), int(rng.choice([-1, -2]))
    if kind == "batch-dims-after-axis":
        # axis < batch_dims <= min(data.rank, indices.rank), batch dimensions equal.
        indices_rank = max(len(indices_shape), axis + 1)
        indices_shape = data_shape[: axis + 1] + random_dims(rng, indices_rank - axis - 1)
        normal = int(rng.integers(axis + 1, min(data_rank, indices_rank) + 1))
    elif kind == "batch-shapes-differ":
        # 1 <= batch_dims <= axis, one of the batch dimensions of indices changed.
        normal = int(rng.integers(1, axis + 1))
        batch_shape = list(data_shape[:normal])
        batch_shape[int(rng.integers(normal))] += int(rng.integers(1, 3))
        indices_shape = (*batch_shape, *random_dims(rng, int(rng.integers(0, 3))))
    else:
        return indices_shape, 0
    forms = legal_batch_dims_forms(data_rank, len(indices_shape), normal)
    return indices_shape, forms[int(rng.integers(len(forms)))]


def gather_illegal_case(index: int) -> GatherCase:
    rng = np.random.default_rng((SEED, 7, index))
    kinds = list(GATHER_ILLEGAL_KINDS)
    kind = kinds[index % len(kinds)]
    dtype = DATA_TYPES[index % len(DATA_TYPES)]
    lowest_rank = {"axis-out-of-range": 0, "batch-shapes-differ": 2}.get(kind, 1)
    data_shape = random_shape(rng, int(rng.integers(lowest_rank, 7)))
    axis = illegal_axis(rng, kind, index, len(data_shape))
    if kind == "batch-shapes-differ":
        axis = np.array(int(rng.integers(1, len(data_shape))), dtype=axis.dtype)
    axis_value = int(axis.flat[0]) if axis.size else 0
    indices_shape = random_dims(rng, int(rng.integers(0, 4)))
    indices_shape, batch_dims = illegal_batch(rng, kind, data_shape, indices_shape, axis_value)
    if kind == "indices-type":
        indices = np.zeros(indices_shape, dtype=NOT_INTEGER_TYPES[index // 8 % 4])
    else:
        indices = make_indices(rng, INDEX_TYPES[index % len(INDEX_TYPES)], indices_shape, 3)
    return GatherCase(
        f"gather-illegal-{index:03d}-{kind}-{dtype.name}-{shape_text(data_shape)}",
        make_data(rng, dtype, data_shape, strided=False),
        indices,
        axis,
        batch_dims,
        why=kind,
    )


def rank_0_roll_cases() -> list[RollCase]:
    """Rank-0 data with axes 0 or -1: the spec is silent, OpenVINO accepts, so does the kernel."""
    rng = np.random.default_rng((SEED, 8))
    forms: list[tuple[npt.NDArray[Any], npt.NDArray[Any]]] = [
        (np.array(1, np.int64), np.array(0, np.int64)),
        (np.array(-3, np.int32), np.array(-1, np.int32)),
        (np.array([5], np.int64), np.array([0], np.int32)),
        (np.array([1, 2], np.int32), np.array([0, -1], np.int64)),
        (np.array(7, np.int32), np.array([-1, 0, -1], np.int32)),
        (np.array([2**63 - 1], np.int64), np.array([-1], np.int64)),
    ]
    return [
        RollCase(
            f"roll-spec-only-{i}-{DATA_TYPES[i].name}",
            make_data(rng, DATA_TYPES[i], (), strided=False),
            shift,
            axes,
            why="rank-0 data, axes as if of rank 1",
        )
        for i, (shift, axes) in enumerate(forms)
    ]


def spec_only_gather_cases() -> list[GatherCase]:
    """Refused by the spec, accepted by OpenVINO 2026.4.1 (measured)."""
    rng = np.random.default_rng((SEED, 9))
    # (data shape, indices shape, axis, batch_dims): batch_dims below -min(data.rank, indices.rank)
    below = [
        ((2, 5), (2, 3), 1, -3),
        ((2, 5), (2, 3), 0, -4),
        ((2,), (2, 2), 0, -2),
        ((2, 2), (2,), 1, -2),
        ((2, 2, 2), (2, 2, 2), 2, -5),
    ]
    cases = [
        GatherCase(
            f"gather-spec-only-batch-{i}",
            make_data(rng, DATA_TYPES[i], data_shape, strided=False),
            make_indices(rng, np.dtype(np.int64), indices_shape, data_shape[axis]),
            np.array(axis, np.int64),
            batch_dims,
            why="batch_dims below -min(data.rank, indices.rank)",
        )
        for i, (data_shape, indices_shape, axis, batch_dims) in enumerate(below)
    ]
    # uint64 axes OpenVINO reads as -1 and -2.
    for i, axis in enumerate((2**64 - 1, 2**64 - 2)):
        cases.append(
            GatherCase(
                f"gather-spec-only-uint64-axis-{i}",
                make_data(rng, DATA_TYPES[8 + i], (2, 3), strided=False),
                np.array([0, 1], np.int32),
                np.array(axis, np.uint64),
                0,
                why="uint64 axis far out of range",
            )
        )
    return cases


ROLL_CASES = [roll_case(i) for i in range(ROLL_RANDOM_CASES)] + [
    roll_high_rank_case(i) for i in range(ROLL_HIGH_RANK_CASES)
]
GATHER_CASES = gather_grid_cases() + [gather_random_case(i) for i in range(GATHER_RANDOM_CASES)]
ROLL_ILLEGAL = [roll_illegal_case(i) for i in range(ROLL_ILLEGAL_CASES)]
GATHER_ILLEGAL = [gather_illegal_case(i) for i in range(GATHER_ILLEGAL_CASES)]
ROLL_RANK_0 = rank_0_roll_cases()
GATHER_SPEC_ONLY = spec_only_gather_cases()


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
