"""The corpus of Roll-7 and Gather-8 cases, generated at import time from a fixed seed.

Every case draws from its own ``numpy.random.default_rng((SEED, kind, i))`` (no hypothesis, no
clock, no global random state), so adding cases never changes the existing ones. What the corpus
covers, and how its cases are checked against OpenVINO, is told in
``tests/ops/test_differential_openvino.py``, which holds the kernels to OpenVINO on all of it;
``tests/transports/test_transports_agree.py`` sends its legal part through every transport.
"""

import math
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

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
