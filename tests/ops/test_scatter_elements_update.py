"""ScatterElementsUpdate-12 and -3: the spec's examples, its rules, every element type and
reduction against an element-by-element reading of the spec, and OpenVINO's CPU plugin.

The reference below applies the spec's formula one update at a time, in the updates' row-major
order, with NumPy scalars of the element type (so float16 sums round after each step, integers
wrap). The differential part sends ``DIFFERENTIAL_CASES`` generated cases to the CPU plugin:
reduction none on positions (data 1..n, updates -1..-m, so the answer says where each element
came from, bit-exact for every type), and the reductions on int32 and float32 values where the
plugin follows its spec; where it does not, the case is pinned in ``test_known_disagreements``.
"""

import functools
import math
import threading
from typing import Any

import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset1 as ov_opset1
import openvino.opset12 as ov_opset12
import pytest
from openvino import op as ov_op

from app.ops import loops, numpy_loops
from app.ops.errors import SpecError
from app.ops.scatter_elements_update import (
    OLDER,
    OP,
    REDUCTIONS,
    scatter_elements_update,
    scatter_elements_update_plan,
)
from tests.cases import DATA_TYPES, INDEX_TYPES, make_data, raw, special_bits
from tests.ops.movement_support import (
    BENCHMARK_DTYPES,
    BenchmarkCase,
    constant,
    plugin_model,
    short,
    square,
)
from tests.support import assert_same_bits

SEED = 20261128
DIFFERENTIAL_CASES = 240
_BFLOAT16 = np.dtype("bfloat16")


def reference(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    axis: int,
    reduction: str = "none",
    use_init_val: bool = True,
) -> npt.NDArray[Any]:
    """The spec's formula, one update after the other, in the element type."""
    out = np.array(data, copy=True).astype(data.dtype.newbyteorder("="))
    axis = axis % data.ndim
    sums: dict[tuple[int, ...], Any] = {}
    counts: dict[tuple[int, ...], int] = {}
    for place in np.ndindex(*indices.shape):
        index = int(indices[place])
        target = (*place[:axis], index % data.shape[axis], *place[axis + 1 :])
        update = updates[place]
        if reduction == "none":
            out[target] = update
            continue
        if target not in counts:
            counts[target] = 0
            if not use_init_val:
                out[target] = update
                counts[target] = 1
                continue
            if reduction == "mean":
                counts[target] = 1
        there = out[target]
        with np.errstate(all="ignore"):
            if reduction in ("sum", "mean"):
                out[target] = (there | update) if data.dtype.kind == "b" else there + update
            elif reduction == "prod":
                out[target] = (there & update) if data.dtype.kind == "b" else there * update
            elif reduction == "min":
                out[target] = there if there < update else update
            else:
                out[target] = there if update < there else update
        counts[target] += 1
        sums[target] = out[target]
    if reduction == "mean":
        for target, count in counts.items():
            total = out[target]
            if data.dtype.kind in "iu":
                out[target] = int(total) // count
            else:
                with np.errstate(invalid="ignore"):  # a NaN or infinite sum is a value here
                    out[target] = np.float64(total) / count
    return out


def check(
    data: Any,
    indices: Any,
    updates: Any,
    axis: Any,
    reduction: str = "none",
    use_init_val: bool = True,
    version: int = 12,
) -> npt.NDArray[Any]:
    data, indices = np.asarray(data), np.asarray(indices)
    # Updates written as a list take data's type (as the JSON route gives them).
    updates = updates if isinstance(updates, np.ndarray) else np.asarray(updates, data.dtype)
    got = scatter_elements_update(
        data, indices, updates, axis, reduction, use_init_val, version=version
    )
    assert got.dtype == data.dtype
    expected = reference(data, indices, updates, int(np.asarray(axis).reshape(-1)[0]),
                         reduction, use_init_val)  # fmt: skip
    if reduction in ("sum", "prod", "mean") and (data.dtype.kind == "f" or data.dtype == _BFLOAT16):
        # Arithmetic on two NaNs gives one of their payloads, which one the CPU's (and the
        # compiler's operand order) says: those are compared as NaNs, every other bit exactly.
        with np.errstate(invalid="ignore"):  # a signalling NaN widened is a NaN all the same
            both = np.isnan(got.astype(np.float64)) & np.isnan(expected.astype(np.float64))
        compared = np.where(both, np.nan, got).astype(data.dtype)
        assert_same_bits(compared, np.where(both, np.nan, expected).astype(data.dtype))
    else:
        assert_same_bits(got, expected)
    return got


# ------------------------------------------------------------------------------------------------
# The spec's examples (ScatterElementsUpdate-12; -3 has only the shape example)

_EXAMPLES = [
    # data, indices, updates, axis, reduction, use_init_val, dtype, expected
    ([2, 3, 4, 6], [1, 0, 0, -2, -1, 2], [10, 20, 30, 40, 70, 60], 0, "sum", True, "float32",
     [52, 13, 104, 76]),
    ([2, 3, 4, 6], [1, 0, 0, 2, 3, 2], [10, 20, 30, 40, 70, 60], 0, "sum", False, "float32",
     [50, 10, 100, 70]),
    ([[0] * 4] * 3, [[1, 2], [0, 3]], [[11, 12], [13, 14]], 1, "none", True, "int32",
     [[0, 11, 12, 0], [13, 0, 0, 14], [0, 0, 0, 0]]),
    ([[1] * 4] * 3, [[1, 1], [0, 3]], [[11, 12], [13, 14]], 1, "sum", True, "int32",
     [[1, 24, 1, 1], [14, 1, 1, 15], [1, 1, 1, 1]]),
    ([[2] * 4] * 3, [[1, 1], [0, 3]], [[11, 12], [13, 14]], 1, "prod", True, "int32",
     [[2, 264, 2, 2], [26, 2, 2, 28], [2, 2, 2, 2]]),
]  # fmt: skip


@pytest.mark.parametrize("number", range(len(_EXAMPLES)))
def test_spec_examples(number: int) -> None:
    data, indices, updates, axis, reduction, init, dtype, expected = _EXAMPLES[number]
    got = check(
        np.array(data, dtype=dtype),
        np.array(indices),
        np.array(updates, dtype=dtype),
        np.array([axis]),
        reduction,
        init,
    )
    assert got.tolist() == expected


@pytest.mark.parametrize("version", [12, 3])
def test_shape_example(version: int) -> None:
    # Example 6 (and -3's only example): 1000x256x7x7 data, 125x20x7x6 indices, axis [0].
    def zeros(shape: tuple[int, ...], dtype: Any) -> npt.NDArray[Any]:
        return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape))

    plan = scatter_elements_update_plan(
        zeros((1000, 256, 7, 7), np.float32),
        zeros((125, 20, 7, 6), np.int64),
        zeros((125, 20, 7, 6), np.float32),
        np.array([0]),
        version=version,
    )
    assert plan.output_shape == (1000, 256, 7, 7)


# ------------------------------------------------------------------------------------------------
# Properties


def test_every_axis_and_both_index_signs() -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(-50, 50, (3, 4, 5))
    for axis in (0, 1, 2, -1, -2, -3):
        normal = axis % 3
        shape = tuple(rng.integers(1, d + 1) for d in data.shape)
        indices = rng.integers(-data.shape[normal], data.shape[normal], shape)
        for reduction in REDUCTIONS:
            for init in (True, False):
                check(data, indices, rng.integers(-9, 9, shape), np.int8(axis), reduction, init)


def test_the_axis_dimension_may_exceed_datas_in_version_12() -> None:
    got = check([0, 0], [1, 1, 1, 0], [1, 2, 3, 4], 0, "sum")
    assert got.tolist() == [4, 6]
    with pytest.raises(SpecError) as error:
        scatter_elements_update([0, 0], [1, 1, 1], [1, 2, 3], 0, version=3)
    assert error.value.field == "updates"


def test_repeated_indices_apply_in_row_major_order() -> None:
    assert check([0, 0, 0], [2, 0, 2, 2], [5, 6, 7, 8], 0).tolist() == [6, 0, 8]
    got = check(np.zeros((2, 2), np.int8), [[1, 1], [1, 0]], [[1, 2], [3, 4]], 1)
    assert got.tolist() == [[0, 2], [4, 3]]


@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
def test_every_element_type_bit_exact(dtype: np.dtype[Any]) -> None:
    specials = special_bits(dtype)
    size = max(8, specials.size)
    bits = np.resize(specials, size * 4)
    values = bits.astype(bool) if dtype.kind == "b" else bits.view(dtype)
    data, updates = values[: size * 2].reshape(2, size), values[size * 2 :][::-1].reshape(2, size)
    indices = np.array([np.arange(size) % 2, (np.arange(size) + 1) % 2])
    got = check(data, indices, updates, 0)
    # Each column's indices are a permutation of the rows: every update lands, bits as sent.
    assert_same_bits(got, np.take_along_axis(updates, np.argsort(indices, axis=0), axis=0))
    for reduction in REDUCTIONS:
        if reduction == "mean" and dtype.kind == "b":
            continue
        for init in (True, False):
            repeated = np.zeros_like(indices)
            check(data, repeated, updates, 0, reduction, init)
            check(data, indices, updates, 0, reduction, init)


def test_min_and_max_nan_and_signed_zeros() -> None:
    nan = np.float32("nan")
    # std::min(u, x) keeps x only when x < u: a NaN update is taken, a NaN there replaced.
    assert np.isnan(check([1.0], [0], [nan], 0, "min")[0])
    assert check(np.array([nan], np.float32), [0, 0], [3.0, 2.0], 0, "min").tolist() == [2.0]
    got = check(np.array([0.0], np.float32), [0], np.array([-0.0], np.float32), 0, "min")
    assert np.signbit(got[0])  # equal values: the update is taken
    got = check(np.array([-0.0], np.float32), [0, 0], np.array([0.0, -0.0], np.float32), 0, "max")
    assert np.signbit(got[0])
    # A NaN in the middle is replaced by the next update.
    got = check(np.array([5.0], np.float16), [0, 0, 0], np.array([1, nan, 4], np.float16), 0,
                "min")  # fmt: skip
    assert got.tolist() == [4.0]


def test_integer_mean_rounds_down() -> None:
    assert check(np.array([-3], np.int32), [0], [0], 0, "mean").tolist() == [-2]
    assert check(np.array([3], np.int8), [0, 0], [0, 0], 0, "mean").tolist() == [1]
    assert check(np.array([0, 7], np.uint8), [1, 1], [8, 8], 0, "mean", False).tolist() == [0, 8]


def test_float16_sums_round_each_step() -> None:
    data = np.array([1.0], np.float16)
    got = check(data, [0, 0, 0], np.array([0.0004] * 3, np.float16), 0, "sum")
    assert got.tolist() == [1.0]


def test_untouched_elements_keep_data_without_init_val() -> None:
    got = check(np.array([7, 8, 9], np.int16), [2], [5], 0, "prod", False)
    assert got.tolist() == [7, 8, 5]


@pytest.mark.parametrize("index_type", INDEX_TYPES, ids=lambda t: t.name)
def test_every_index_and_axis_type(index_type: np.dtype[Any]) -> None:
    data = np.arange(12.0).reshape(3, 4)
    check(data, np.array([[3, 0]] * 3, dtype=index_type), [[1.0, 2.0]] * 3, np.array(1, index_type))
    swapped = np.array([[2, 1, 0, 2]], dtype=index_type.newbyteorder(">"))
    check(data, swapped, [[9.0, 8.0, 7.0, 6.0]], np.array([0], dtype=index_type))


def test_byte_orders_and_strides() -> None:
    data = np.arange(20, dtype=">f8").reshape(4, 5)[:, ::2]
    updates = np.array([[-0.0, np.nan, 1.5]], dtype="<f8")
    got = check(data, [[2, 0, 3]], updates.astype(">f8"), 0)
    out = np.zeros((4, 6), dtype=">f8")[:, ::2]
    assert scatter_elements_update(data, [[2, 0, 3]], updates.astype(">f8"), 0, out=out) is out
    assert_same_bits(out, got)
    got = check(data, [[2, 0, 3]], updates.astype(">f8"), 0, "sum")


def test_empty_dimensions() -> None:
    check(np.zeros((0, 3)), np.zeros((0, 3), np.int64), np.zeros((0, 3)), 0)
    check(np.zeros((2, 3)), np.zeros((0, 3), np.int64), np.zeros((0, 3)), 0, "sum")
    check(np.zeros((2, 0)), np.zeros((2, 0), np.int64), np.zeros((2, 0)), 1, "max")


def test_input_is_not_modified() -> None:
    data = np.arange(4)
    scatter_elements_update(data, [1], [9], 0, "sum")
    assert data.tolist() == [0, 1, 2, 3]


def test_version_3_takes_indices_from_zero_only() -> None:
    got = check(np.zeros((2, 3), np.int8), [[2, 0]], [[5, 6]], 1, version=3)
    assert got.tolist() == [[6, 0, 5], [0, 0, 0]]
    with pytest.raises(SpecError) as error:
        scatter_elements_update([0, 0], [-1], [1], 0, version=3)
    assert error.value.field == "indices"
    assert "negative" in error.value.message


# ------------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    ("data", "indices", "updates", "axis", "reduction", "version", "field"),
    [
        (np.zeros(()), np.int64(0), np.zeros(()), 0, "none", 12, "axis"),  # no axis of a scalar
        (np.zeros(3), [0], np.zeros(1), 1, "none", 12, "axis"),
        (np.zeros(3), [0], np.zeros(1), -2, "none", 12, "axis"),
        (np.zeros(3), [0], np.zeros(1), np.array(2**64 - 1, np.uint64), "none", 12, "axis"),
        (np.zeros(3), [0], np.zeros(1), np.array([0, 0]), "none", 12, "axis"),
        (np.zeros(3), [0], np.zeros(1), np.array([[0]]), "none", 12, "axis"),
        (np.zeros(3), [0], np.zeros(1), np.array(0.0), "none", 12, "axis"),
        (np.zeros(3), np.zeros(1, np.float32), np.zeros(1), 0, "none", 12, "indices"),
        (np.zeros(3), [0], np.zeros(1, np.float32), 0, "none", 12, "updates"),
        (np.zeros(3), [0], np.zeros(2), 0, "none", 12, "updates"),
        (np.zeros((2, 3)), [0], np.zeros(1), 0, "none", 12, "indices"),  # rank
        (np.zeros((2, 3)), [[0, 0, 0, 0]], np.zeros((1, 4)), 0, "none", 12, "updates"),
        (np.zeros(3), [3], np.zeros(1), 0, "none", 12, "indices"),
        (np.zeros(3), [-4], np.zeros(1), 0, "none", 12, "indices"),
        (np.zeros(3), np.array([2**63], np.uint64), np.zeros(1), 0, "none", 12, "indices"),
        (np.zeros(3), np.array([2**64 - 1], np.uint64), np.zeros(1), 0, "none", 12, "indices"),
        (np.zeros((0, 3)), [[0]], np.zeros((1, 1)), 0, "none", 12, "indices"),
        (np.zeros(3), [0], np.zeros(1), 0, "average", 12, "reduction"),
        (np.zeros(3, bool), [0], np.zeros(1, bool), 0, "mean", 12, "reduction"),
        (np.zeros(3, bool), [0], np.zeros(1, bool), 0, "none", 3, "data"),
        (np.zeros(3), [0], np.zeros(1), 0, "sum", 3, "reduction"),
        (np.zeros(3), [-1], np.zeros(1), 0, "none", 3, "indices"),
    ],
)
def test_refusals(
    data: Any, indices: Any, updates: Any, axis: Any, reduction: str, version: int, field: str
) -> None:
    with pytest.raises(SpecError) as error:
        scatter_elements_update(data, np.asarray(indices), updates, axis, reduction,
                                version=version)  # fmt: skip
    assert error.value.field == field
    assert error.value.message


# ------------------------------------------------------------------------------------------------
# Differential against OpenVINO's CPU plugin


@functools.cache
def compiled(rank: int, data_type: str, reduction: str, use_init_val: bool, axis: int) -> Any:
    kind = {"int32": ov.Type.i32, "float32": ov.Type.f32}[data_type]
    data = ov_op.Parameter(kind, ov.PartialShape([-1] * rank))
    indices = ov_op.Parameter(ov.Type.i64, ov.PartialShape([-1] * rank))
    updates = ov_op.Parameter(kind, ov.PartialShape([-1] * rank))
    node = ov_opset12.scatter_elements_update(
        data, indices, updates, ov_op.Constant(np.array(axis)), reduction, use_init_val
    )
    model = ov.Model([node], [data, indices, updates])
    # One thread: repeated indices are written in the spec's order (several threads may write
    # them in any order, and a loaded machine makes them do so).
    return ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 1})


Case = tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], int, str, bool]


def random_case(i: int) -> Case:
    rng = np.random.default_rng((SEED, i))
    reduction = REDUCTIONS[i % len(REDUCTIONS)]
    if reduction == "none":
        dtype = DATA_TYPES[i // len(REDUCTIONS) % len(DATA_TYPES)]
    else:
        dtype = np.dtype(("int32", "float32")[i // len(REDUCTIONS) % 2])
    rank = 1 + i // 12 % 4
    data_shape = tuple(int(d) for d in rng.integers(1, 6, rank))
    axis = int(rng.integers(-rank, rank))
    normal = axis % rank
    shape = tuple(
        int(rng.integers(0 if rng.random() < 0.05 else 1, d + 1 + 3 * (k == normal)))
        for k, d in enumerate(data_shape)
    )
    index_type = INDEX_TYPES[int(rng.integers(0, len(INDEX_TYPES)))]
    low = 0 if index_type.kind == "u" else -data_shape[normal]
    indices = rng.integers(low, data_shape[normal], shape).astype(index_type)
    if reduction == "none":
        data = make_data(rng, dtype, data_shape, strided=bool(rng.random() < 0.2))
        updates = make_data(rng, dtype, shape, strided=False)
    else:
        data = rng.integers(-20, 20, data_shape).astype(dtype)
        updates = rng.integers(-20, 20, shape).astype(dtype)
    return data, indices, updates, axis, reduction, bool(rng.random() < 0.7)


CASES = [random_case(i) for i in range(DIFFERENTIAL_CASES)]


def test_differential_cases_cover_what_they_should() -> None:
    assert {case[0].dtype for case in CASES} == set(DATA_TYPES)
    assert {case[1].dtype for case in CASES} == set(INDEX_TYPES)
    assert {case[4] for case in CASES} == set(REDUCTIONS)
    assert any(case[3] < 0 for case in CASES)
    assert any(case[2].size == 0 for case in CASES)
    assert any(case[1].shape[case[3] % case[0].ndim] > case[0].shape[case[3] % case[0].ndim]
               for case in CASES)  # fmt: skip
    assert any(int(case[1].min(initial=0)) < 0 for case in CASES)


def plugin_answer(case: Case) -> npt.NDArray[Any] | None:
    """The CPU plugin's output for ``case`` (positions for none), None where nothing is sent."""
    data, indices, updates, axis, reduction, init = case
    if updates.size == 0:
        return None
    if reduction == "none":
        where = np.arange(1, data.size + 1, dtype=np.int32).reshape(data.shape)
        new = -np.arange(1, updates.size + 1, dtype=np.int32).reshape(updates.shape)
        model = compiled(data.ndim, "int32", "none", True, axis)
        answer = np.asarray(model([where, indices.astype(np.int64), new])[0])
        pool = np.concatenate([raw(updates).reshape(-1)[::-1], raw(data).reshape(-1)])
        flat = answer.reshape(-1)
        taken: npt.NDArray[Any] = pool[flat + updates.size - (flat > 0)]
        return taken.reshape(data.shape).view(data.dtype)
    model = compiled(data.ndim, data.dtype.name, reduction, init, axis)
    return np.asarray(model([data, indices.astype(np.int64), updates])[0])


def is_known_disagreement(case: Case, got: npt.NDArray[Any]) -> bool:
    """Integer mean of a negative sum: the plugin rounds toward zero, the spec down."""
    data, _, _, _, reduction, _ = case
    return reduction == "mean" and data.dtype.kind == "i"


def test_scatter_elements_update_matches_openvino() -> None:
    sent = agreed = known = 0
    failures = []
    for number, case in enumerate(CASES):
        data, indices, updates, axis, reduction, init = case
        got = check(data, indices, updates, axis, reduction, init)
        answer = plugin_answer(case)
        if answer is None:
            continue
        sent += 1
        if np.array_equal(raw(np.ascontiguousarray(answer)), raw(got)):
            agreed += 1
        elif is_known_disagreement(case, got):
            known += 1
        else:
            failures.append(number)
    assert sent >= DIFFERENTIAL_CASES * 3 // 4
    assert not failures, f"OpenVINO disagreed on {failures} ({sent} sent, {agreed} agreed)"


def test_known_disagreements() -> None:
    """Reproducers of docs' disagreements: the plugin's answer differs from the spec's."""
    data, indices, updates = np.array([-3], np.int32), np.array([0]), np.array([0], np.int32)
    answer = np.asarray(compiled(1, "int32", "mean", True, 0)([data, indices, updates])[0])
    assert answer.tolist() == [-1]  # toward zero
    assert scatter_elements_update(data, indices, updates, 0, "mean").tolist() == [-2]


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """ScatterElementsUpdate of one row of a matrix of ``nbytes`` (the copy dominates), float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """ScatterElementsUpdate of one row of a matrix of ``nbytes`` (the copy dominates)."""
    data = square(nbytes, dtype)
    indices = np.arange(data.shape[1]).reshape(1, -1) % data.shape[0]
    updates = np.ones((1, data.shape[1]), dtype)

    def model() -> Any:
        build = lambda p: ov_opset12.scatter_elements_update(  # noqa: E731
            p, constant(indices), ov_opset1.constant(updates), constant(np.array(0))
        )
        return plugin_model(build, data)

    arrays = {"data": data, "indices": indices, "updates": updates, "axis": np.array(0)}
    return BenchmarkCase("scatter_elements_update", f"1 row, {short(dtype)}", arrays, {}, data.dtype,
                         2 * data.nbytes, model)  # fmt: skip


@pytest.mark.parametrize(
    ("op", "name"),
    [(op, name) for op in (OP, *OLDER) for name in sorted(op.examples)],
    ids=lambda item: getattr(item, "spec", item),
)
def test_declared_examples(op: Any, name: str) -> None:
    request = dict(op.examples[name]["value"])
    dtype = request.get("dtype")
    got = check(
        np.array(request["data"], dtype=dtype),
        np.array(request["indices"]),
        np.array(request["updates"], dtype=dtype),
        np.array(request["axis"]),
        request.get("reduction", "none"),
        request.get("use_init_val", True),
        op.version,
    )
    assert got.tolist() == op.examples[name]["x-expected-output"]


# ------------------------------------------------------------------------------------------------
# The compiled loops (app/ops/compiled.py) against NumPy's stand-ins (app/ops/numpy_loops.py)

BOTH_WAYS_CASES = 6


def mixed_values(rng: np.random.Generator, dtype: np.dtype[Any], size: int) -> npt.NDArray[Any]:
    """Random bits, special values and ordinary ones (tests/cases.py's make_data), a third of
    them small integers (-2 to 2, zeros of both signs for floats): sums and products that land
    on zeros and repeats, min and max that meet equal values."""
    values = make_data(rng, dtype, (size,), strided=False).copy()
    small = rng.random(size) < 1 / 3
    chosen = rng.integers(-2, 3, int(small.sum()))
    if dtype.kind == "b":
        values[small] = chosen > 0
    elif dtype.kind == "u":
        values[small] = (chosen + 2).astype(dtype)
    else:
        floats = chosen.astype(np.float64)
        if dtype.kind != "i":
            floats[rng.random(floats.size) < 0.3] = -0.0
        values[small] = floats.astype(dtype)
    return values


def both_ways_case(
    rng: np.random.Generator, dtype: np.dtype[Any], long: bool
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], int]:
    """A random case of ``dtype``: rank 1 to 3, indices of a few values (so repeated), of both
    signs, the axis' dimension of the updates up to twice data's; ``long``: some 12,000 updates
    (past a chunk of the loop's positions, SCATTER_CHUNK)."""
    rank = int(rng.integers(1, 4))
    data_shape = tuple(int(d) for d in rng.integers(1, 6, rank))
    axis = int(rng.integers(-rank, rank))
    normal = axis % rank
    shape = [int(rng.integers(1, d + 1)) for d in data_shape]
    shape[normal] = int(rng.integers(1, 2 * data_shape[normal] + 2))
    if long:
        shape[normal] = 12_000 // math.prod(shape[:normal] + shape[normal + 1 :]) + 1
    size = data_shape[normal]
    index_type = INDEX_TYPES[int(rng.integers(0, len(INDEX_TYPES)))]
    low = 0 if index_type.kind == "u" else -size
    indices = rng.integers(low, size, shape).astype(index_type)
    data = mixed_values(rng, dtype, math.prod(data_shape)).reshape(data_shape)
    updates = mixed_values(rng, dtype, indices.size).reshape(shape)
    return data, indices, updates, axis


COMPILED_REDUCTIONS = [
    (dtype, reduction, init)
    for dtype in DATA_TYPES
    for reduction in REDUCTIONS
    for init in (True, False)
    if not (reduction == "mean" and dtype.kind == "b")
    if not (reduction == "none" and not init)
]


@pytest.mark.parametrize(
    ("dtype", "reduction", "init"),
    COMPILED_REDUCTIONS,
    ids=[f"{d.name}-{r}-{'init' if i else 'fresh'}" for d, r, i in COMPILED_REDUCTIONS],
)
def test_the_compiled_loops_and_numpy_s_give_the_same_bits(
    dtype: np.dtype[Any], reduction: str, init: bool
) -> None:
    """Random cases of every element type, reduction and use_init_val: repeated and negative
    indices, NaNs of every payload (both signs, quiet and signalling), zeros of both signs,
    integers that wrap, float16 and bfloat16 rounded after each step; one case past a chunk of
    positions, one of big-endian data. The count of stand-in calls says that each way ran
    once."""
    assert loops.wait_compiled(), "the numba loops did not compile"
    rng = np.random.default_rng((SEED, DATA_TYPES.index(dtype), REDUCTIONS.index(reduction), init))
    for number in range(BOTH_WAYS_CASES):
        data, indices, updates, axis = both_ways_case(rng, dtype, long=number == 0)
        if number == 1 and dtype.kind in "iuf" and dtype.itemsize > 1:
            # Big-endian data and updates: computed in native order, the same rule of NaNs.
            swapped = dtype.newbyteorder(">")
            data, updates = data.astype(swapped), updates.astype(swapped)
        calls: list[str] = []
        compiled = counted_run(data, indices, updates, axis, reduction, init, calls)
        assert calls == [], "NumPy's way ran beside the loops"
        with loops.numpy_stand_ins():
            stood_in = counted_run(data, indices, updates, axis, reduction, init, calls)
        assert calls == ["numpy"]
        assert_same_bits(compiled, stood_in)
        if number:  # the long case is only compared: the reference reads 12,000 updates slowly
            check(data, indices, updates, axis, reduction, init)


def counted_run(
    data: npt.NDArray[Any],
    indices: npt.NDArray[Any],
    updates: npt.NDArray[Any],
    axis: int,
    reduction: str,
    init: bool,
    calls: list[str],
) -> npt.NDArray[Any]:
    """The kernel's answer, each call of a NumPy stand-in named in ``calls``."""
    put, reduce = numpy_loops.scatter_put, numpy_loops.scatter_reduce

    def counted_put(*arguments: Any) -> None:
        calls.append("numpy")
        put(*arguments)

    def counted_reduce(*arguments: Any) -> None:
        calls.append("numpy")
        reduce(*arguments)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numpy_loops, "scatter_put", counted_put)
        patch.setattr(numpy_loops, "scatter_reduce", counted_reduce)
        return scatter_elements_update(data, indices, updates, axis, reduction, init)


def test_one_position_reached_by_every_update_both_ways() -> None:
    """Every update to one place (the case that held a worker for seconds when the positions
    were sorted): the same bits both ways, and sums as many as the updates."""
    assert loops.wait_compiled(), "the numba loops did not compile"
    updates = np.arange(1, 20_001, dtype=np.int64)
    indices = np.full(updates.size, -1)
    for reduction, init, expected in (("sum", True, 7 + 200_010_000), ("none", True, 20_000),
                                      ("mean", False, 10_000), ("min", False, 1),
                                      ("max", True, 20_000)):  # fmt: skip
        got = scatter_elements_update(np.full(3, 7), indices, updates, 0, reduction, init)
        with loops.numpy_stand_ins():
            stood_in = scatter_elements_update(np.full(3, 7), indices, updates, 0, reduction, init)
        assert got.tolist() == [7, 7, expected]
        assert_same_bits(got, stood_in)


def test_while_compiling_many_updates_wait_for_the_compiled_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stand-ins sort the updates' positions: at most CHEAP_SCATTER_UPDATES updates stand
    in while numba compiles, more wait for the compiled loop."""
    module = loops.compiled_module()
    compiling = loops._Compiled()
    compiling.thread = threading.Thread()  # "started": no call starts another
    monkeypatch.setattr(loops, "_COMPILED", compiling)
    calls: list[str] = []
    few = numpy_loops.CHEAP_SCATTER_UPDATES
    ones = np.ones(few, np.int32)
    assert counted_run(np.zeros(2, np.int32), ones, ones, 0, "sum", True, calls).tolist() == [
        0,
        few,
    ]
    assert calls == ["numpy"]

    def ready() -> None:
        compiling.module = module
        compiling.done.set()

    timer = threading.Timer(0.2, ready)
    timer.start()
    more = np.ones(few + 1, np.int32)
    got = counted_run(np.zeros(2, np.int32), more, more, 0, "sum", True, calls)
    timer.join()
    assert got.tolist() == [0, few + 1]
    assert calls == ["numpy"]  # the compiled loop wrote the second
