"""ScatterNDUpdate-15: the spec's examples (the text's answers where they contradict it), its
rules, every reduction on every element type, and OpenVINO's CPU plugin.

Two generated corpora from a fixed seed (every element type, data ranks 1-4, tuple lengths 0 to
the rank, int32 and int64 indices with negative values, repeated tuples, empty dimensions,
strided inputs, NaN payloads, -0.0, infinities):

* ``none``: OpenVINO is given *positions* (data 1..n, updates -1..-m, int32), so its answer says
  where each element came from and the comparison is bit-exact for every type.
* reductions: every case is checked bit for bit against ``reference``, the spec's NumPy snippet
  written out (one tuple at a time, in ``np.ndindex`` order, ``func(x, y)`` computed in the
  element type), and OpenVINO's CPU plugin is run on the real values to count its agreement:
  it computes float16, bfloat16 and float64 through float32 (accumulating repeated updates
  there), int64 through 32 bits, and bool sub not as XOR, so only its agreement is asserted on
  the cases outside those classes.
"""

import functools
import math
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import openvino as ov
import openvino.opset1 as ov_opset1
import openvino.opset15 as ov_opset15
import pytest
from openvino import op as ov_op

from app.ops.errors import SpecError
from app.ops.scatter_nd_update import OP, REDUCTIONS, scatter_nd_update, scatter_nd_update_plan
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

SEED = 20261131
NONE_CASES = 200
REDUCTION_CASES = 250


def _func(reduction: str, x: npt.NDArray[Any], y: npt.NDArray[Any]) -> Any:
    """The snippet's ``func(x, y)`` on arrays of the element type."""
    boolean = x.dtype.kind == "b"
    if reduction == "none":
        return y.copy()
    if reduction == "sum":
        return np.logical_or(x, y) if boolean else x + y
    if reduction == "sub":
        return np.logical_xor(x, y) if boolean else x - y
    if reduction == "prod":
        return np.logical_and(x, y) if boolean else x * y
    if reduction == "max":
        return np.where(y > x, y, x)  # Python's max(x, y): y only when greater
    return np.where(y < x, y, x)


def reference(
    data: npt.NDArray[Any], indices: npt.NDArray[Any], updates: npt.NDArray[Any], reduction: str
) -> npt.NDArray[Any]:
    """The spec's snippet: ``out[indices[i]] = func(out[indices[i]], updates[i])`` for every
    tuple ``i`` in ``np.ndindex`` order, computed in the element type."""
    native = data.dtype.newbyteorder("=")
    out = np.array(data, dtype=native)
    k = indices.shape[-1]
    updates = np.asarray(updates, dtype=native).reshape(indices.shape[:-1] + data.shape[k:])
    with np.errstate(all="ignore"):
        for place in np.ndindex(*indices.shape[:-1]):
            where = tuple(int(v) for v in indices[place])
            before = np.array(out[where], dtype=native)
            out[where] = _func(reduction, before, np.asarray(updates[place]))
    return out


def check(data: Any, indices: Any, updates: Any, reduction: str = "none") -> npt.NDArray[Any]:
    data, indices, updates = np.asarray(data), np.asarray(indices), np.asarray(updates)
    got = scatter_nd_update(data, indices, updates, reduction)
    assert got.dtype == data.dtype
    expected = reference(data, indices, updates, reduction).astype(got.dtype)
    if reduction in ("sum", "sub", "prod"):
        # Bit for bit, but that a NaN computed from NaNs may carry another NaN's payload.
        assert same_values(got, expected)
    else:
        np.testing.assert_array_equal(raw(got), raw(expected))
    return got


# ------------------------------------------------------------------------------------------------
# The spec's examples


@pytest.mark.parametrize("name", sorted(OP.examples))
def test_declared_examples(name: str) -> None:
    request = dict(OP.examples[name]["value"])
    dtype = request.get("dtype")
    got = check(
        np.array(request["data"], dtype=dtype),
        np.array(request["indices"]),
        np.array(request["updates"], dtype=dtype),
        request.get("reduction", "none"),
    )
    assert got.tolist() == OP.examples[name]["x-expected-output"]


def test_examples_where_the_text_contradicts_the_printed_output() -> None:
    # First snippet example: [4] sets 9, then [-4] (= 4) sets 14; printed: 4.
    out = check([1, 2, 3, 4, 5, 6, 7, 8], [[4], [3], [1], [7], [-2], [-4]], [9, 10, 11, 12, 13, 14])
    assert out.tolist() == [1, 11, 3, 10, 14, 6, 13, 12]
    indices = [[0], [2], [-3], [-3], [0]]
    tens = [10.0, 20.0, 30.0, 40.0, 50.0]
    # Example 1 (none): printed [50, 20, 20, 4].
    assert check(
        np.array([1, 2, 3, 4], np.float32), indices, np.array(tens, np.float32)
    ).tolist() == [50, 40, 20, 4]
    # Example 4 (prod): printed [500, 3600, 40, 4].
    out = check(np.array([1, 2, 3, 4], np.float32), indices, np.array(tens, np.float32), "prod")
    assert out.tolist() == [500, 2400, 60, 4]
    # Examples 2 and 3 agree with the text.
    out = check(np.array([1, 2, 3, 4], np.float16), indices, np.array(tens, np.float16), "sum")
    assert out.tolist() == [61, 72, 23, 4]
    out = check(
        np.array([1, 2, 3, 4], np.int32), indices, np.array([10, 20, 30, 40, 50], np.int32), "sub"
    )
    assert out.tolist() == [-59, -68, -17, 4]


def test_example_5_shapes() -> None:
    data = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (1000, 256, 10, 15), (0,) * 4)
    updates = np.zeros((25, 125, 15), np.float32)
    plan = scatter_nd_update_plan(data, np.zeros((25, 125, 3), np.int64), updates)
    assert plan.output_shape == (1000, 256, 10, 15)


# ------------------------------------------------------------------------------------------------
# Rules and readings


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
def test_every_reduction_on_every_type(reduction: str, dtype: np.dtype[Any]) -> None:
    rng = np.random.default_rng(7)
    data = make_data(rng, dtype, (4, 3), strided=False)
    updates = make_data(rng, dtype, (6, 3), strided=True)
    indices = np.array([[1], [3], [1], [-3], [0], [1]], dtype=np.int32)
    check(data, indices, updates, reduction)
    elements = np.array([[0, 0], [3, 2], [0, 0], [-4, -3]])
    check(data, elements, make_data(rng, dtype, (4,), strided=False), reduction)


def test_float16_and_bfloat16_round_after_every_step() -> None:
    ones = [[0], [0], [0], [0]]
    out = check(np.array([1.0], np.float16), ones, np.array([0.0004] * 4, np.float16), "sum")
    assert out.tolist() == [1.0]  # 1 + 0.0004 rounds back to 1 each time (f32 would give 1.0016)
    out = check(np.array([256.0], ml_dtypes.bfloat16), ones, np.ones(4, ml_dtypes.bfloat16), "sum")
    assert out.astype(np.float32).tolist() == [256.0]


@pytest.mark.parametrize("reduction", REDUCTIONS[1:])
@pytest.mark.parametrize("times", [1, 2, 16, 17, 40])
def test_many_repeats_in_rounds_or_one_by_one(reduction: str, times: int) -> None:
    # Up to 16 occurrences of a position go in vectorised rounds, more one after the other.
    rng = np.random.default_rng(times)
    for dtype in (np.float16, np.int8, np.bool_, np.float64):
        data = make_data(rng, np.dtype(dtype), (3, 2), strided=False)
        indices = np.array([[1], [0], [-2]] * times, dtype=np.int32)
        updates = make_data(rng, np.dtype(dtype), (3 * times, 2), strided=False)
        check(data, indices, updates, reduction)


def test_integers_wrap_around() -> None:
    assert check(np.array([127], np.int8), [[0]], np.array([1], np.int8), "sum").tolist() == [-128]
    assert check(np.array([0], np.uint8), [[0]], np.array([1], np.uint8), "sub").tolist() == [255]
    big = check(np.array([2**40], np.int64), [[0]], np.array([2**30], np.int64), "prod")
    assert big.tolist() == [(2**70) % 2**64]


def test_bool_reductions() -> None:
    data = [False, True, False, True]
    indices = [[0], [1], [2], [2]]
    assert check(data, indices, [True] * 4, "sum").tolist() == [True, True, True, True]
    assert check(data, indices, [True] * 4, "sub").tolist() == [True, False, False, True]
    assert check(data, indices, [False] * 4, "prod").tolist() == [False, False, False, True]
    assert check(data, indices, [False, False, True, False], "min").tolist() == [
        False, False, False, True,
    ]  # fmt: skip
    assert check(data, indices, [True, False, False, True], "max").tolist() == [
        True, True, True, True,
    ]  # fmt: skip


def test_max_and_min_keep_nan_there_ignore_nan_updates_and_keep_the_first_zero() -> None:
    data = np.array([np.nan, 1.0, -1.0, 0.0, -1.0], np.float32)
    indices = [[0], [1], [2], [2], [3], [4], [4]]
    updates = np.array([3.0, np.nan, -0.0, 0.0, -0.0, 0.0, -0.0], np.float32)
    out = check(data, indices, updates, "max")
    assert_same_bits(out, np.array([np.nan, 1.0, -0.0, 0.0, 0.0], np.float32))
    out = check(
        np.array([1.0, 0.0], np.float32),
        [[0], [0], [1]],
        np.array([0.0, -0.0, -0.0], np.float32),
        "min",
    )
    assert_same_bits(out, np.array([0.0, 0.0], np.float32))
    payload = np.array([0x7FC00123], np.uint32).view(np.float32)
    out = check(payload, [[0]], np.array([5.0], np.float32), "min")
    assert_same_bits(out, payload)


def test_slices_and_whole_data() -> None:
    data = np.arange(24.0).reshape(2, 3, 4)
    check(data, [[1, -1], [0, 0], [1, 2]], -np.arange(12.0).reshape(3, 4), "sum")
    check(data, [[1], [1]], -np.arange(24.0).reshape(2, 3, 4), "none")
    check(data, np.zeros((2, 0), np.int64), -np.arange(48.0).reshape(2, 2, 3, 4), "sub")
    check(data, np.zeros((2, 0), np.int64), -np.arange(48.0).reshape(2, 2, 3, 4), "none")


@pytest.mark.parametrize("width", [1, 2, 3, 8, 31, 32, 33, 64])
def test_every_slice_width(width: int) -> None:
    rng = np.random.default_rng(width)
    data = rng.integers(0, 2**63, (9, width), dtype=np.int64).view(np.float64)
    updates = rng.integers(0, 2**63, (12, width), dtype=np.int64).view(np.float64)
    indices = rng.integers(-9, 9, (12, 1))
    check(data, indices, updates)
    check(data.view(np.uint8), indices, updates.view(np.uint8))


def test_a_single_element_update_for_a_0d_one() -> None:
    out = check([1, 2, 3], [1], [9])  # expected rank 0: a tensor with one element
    assert out.tolist() == [1, 9, 3]
    assert scatter_nd_update([[1, 2], [3, 4]], [1, 0], [[7]], "sum").tolist() == [[1, 2], [10, 4]]


def test_empty_dimensions() -> None:
    check(np.zeros((0, 3)), np.zeros((0, 1), np.int64), np.zeros((0, 3)))
    check(np.zeros((2, 0)), np.array([[1], [0]]), np.zeros((2, 0)), "sum")
    check(np.zeros((2, 3)), np.zeros((0, 2), np.int64), np.zeros((0,)), "max")


def test_byte_orders_strides_and_out() -> None:
    data = np.arange(20, dtype=">f4").reshape(4, 5)[:, ::2]
    updates = np.array([[-0.0, np.nan, 1.5]], dtype="<f4")
    for reduction in ("none", "sum", "max"):
        got = check(data, [[2]], updates, reduction)
        assert got.dtype == data.dtype
        out = np.zeros((4, 6), dtype=">f4")[:, ::2]
        assert scatter_nd_update(data, [[2]], updates, reduction, out=out) is out
        assert_same_bits(out, got)


def test_input_is_not_modified() -> None:
    data = np.arange(4.0)
    scatter_nd_update(data, [[1]], [9.0], "sum")
    assert data.tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("dtype", DATA_TYPES, ids=lambda t: t.name)
def test_none_moves_bits(dtype: np.dtype[Any]) -> None:
    specials = special_bits(dtype)
    values = specials.astype(bool) if dtype.kind == "b" else specials.view(dtype)
    data = np.zeros(values.size, dtype=dtype)
    indices = np.arange(values.size)[::-1].reshape(-1, 1)
    assert_same_bits(scatter_nd_update(data, indices, values), values[::-1])


# ------------------------------------------------------------------------------------------------
# Refusals


@pytest.mark.parametrize(
    ("data", "indices", "updates", "reduction", "field"),
    [
        (np.zeros(()), np.zeros((1, 0), np.int64), np.zeros((1,)), "none", "data"),
        (np.zeros(3), np.array(0, np.int64), np.zeros(()), "none", "indices"),
        (np.zeros(3), np.zeros((1, 2), np.int64), np.zeros(1), "none", "indices"),  # k > r
        (np.zeros(3), np.zeros((1, 1), np.int16), np.zeros(1), "none", "indices"),
        (np.zeros(3), np.zeros((1, 1), np.uint64), np.zeros(1), "none", "indices"),
        (np.zeros(3), np.zeros((1, 1), np.float32), np.zeros(1), "none", "indices"),
        (np.zeros(3), np.zeros((1, 1), np.int64), np.zeros(1, np.float32), "none", "updates"),
        (np.zeros(3), np.zeros((1, 1), np.int64), np.zeros(2), "none", "updates"),
        (np.zeros((2, 3)), np.zeros((1, 1), np.int64), np.zeros((1, 2)), "none", "updates"),
        (np.zeros(3), [[0]], np.zeros(1), "average", "reduction"),
        (np.zeros(3), [[3]], np.zeros(1), "none", "indices"),
        (np.zeros(3), [[-4]], np.zeros(1), "sum", "indices"),
        (np.zeros(3), np.array([[2**31 - 1]], np.int32), np.zeros(1), "none", "indices"),
        (np.zeros(3), [[-(2**63)]], np.zeros(1), "none", "indices"),
        (np.zeros(3), [[2**63 - 1]], np.zeros(1), "none", "indices"),
        (np.zeros((2, 3)), [[0, 1], [1, 3]], np.zeros(2), "none", "indices"),
        (np.zeros((0, 3)), [[0]], np.zeros((1, 3)), "none", "indices"),
    ],
)
def test_refusals(data: Any, indices: Any, updates: Any, reduction: str, field: str) -> None:
    with pytest.raises(SpecError) as error:
        scatter_nd_update(data, np.asarray(indices), updates, reduction)
    assert error.value.field == field


# ------------------------------------------------------------------------------------------------
# Differential against OpenVINO's CPU plugin

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


@functools.cache
def compiled(type_name: str, data_rank: int, indices_rank: int, k: int, reduction: str) -> Any:
    data = ov_op.Parameter(OV_TYPES[type_name], ov.PartialShape([-1] * data_rank))
    indices = ov_op.Parameter(ov.Type.i64, ov.PartialShape([-1] * (indices_rank - 1) + [k]))
    rank = data_rank - k + indices_rank - 1
    updates = ov_op.Parameter(OV_TYPES[type_name], ov.PartialShape([-1] * rank))
    node = ov_opset15.scatter_nd_update(data, indices, updates, reduction)
    model = ov.Model([node], [data, indices, updates])
    # One thread: repeated indices are written in the spec's order (several threads may write
    # them in any order, and a loaded machine makes them do so).
    return ov.Core().compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 1})


Case = tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any], str]


def random_case(kind: int, i: int, reduction: str) -> Case:
    rng = np.random.default_rng((SEED, kind, i))
    dtype = DATA_TYPES[i % len(DATA_TYPES)]
    rank = 1 + i // len(DATA_TYPES) % 4
    lengths, weights = [0, 1, 2, 3, 4, 5], [0.03, 0.2, 0.3, 0.25, 0.12, 0.1]
    data_shape = tuple(int(d) for d in rng.choice(lengths, size=rank, p=weights))
    k = int(rng.integers(0 if rng.random() < 0.1 else 1, rank + 1))
    extra = tuple(int(d) for d in rng.choice(lengths[1:], size=int(rng.integers(0, 3))))
    if 0 in data_shape[:k]:
        extra = (0, *extra)
    count = math.prod(extra)
    columns = [rng.integers(-s, max(s, 1), count) for s in data_shape[:k]]
    table = np.stack(columns, axis=-1) if columns else np.zeros((count, 0), np.int64)
    index_type = np.int32 if rng.random() < 0.5 else np.int64
    indices = table.astype(index_type).reshape((*extra, k))
    data = make_data(rng, dtype, data_shape, strided=bool(rng.random() < 0.2))
    updates = make_data(rng, dtype, extra + data_shape[k:], strided=bool(rng.random() < 0.2))
    return data, indices, updates, reduction


NONE = [random_case(0, i, "none") for i in range(NONE_CASES)]
REDUCED = [random_case(1, i, REDUCTIONS[1 + i // 13 % 5]) for i in range(REDUCTION_CASES)]


def test_cases_cover_what_they_should() -> None:
    for cases in (NONE, REDUCED):
        assert {case[0].dtype for case in cases} == set(DATA_TYPES)
        assert {case[1].dtype for case in cases} == {np.dtype(np.int32), np.dtype(np.int64)}
        assert any(case[0].size == 0 for case in cases)
        assert any((case[1] < 0).any() for case in cases if case[1].size)
        assert any(case[1].shape[-1] == 0 for case in cases)
    assert {case[3] for case in REDUCED} == set(REDUCTIONS[1:])
    assert any(
        np.unique(case[1].reshape(-1, case[1].shape[-1]) % 97, axis=0).shape[0]
        < math.prod(case[1].shape[:-1])
        for case in REDUCED
        if case[1].shape[-1]
    )


def test_reductions_match_the_spec_snippet() -> None:
    for number, (data, indices, updates, reduction) in enumerate(REDUCED):
        got = scatter_nd_update(data, indices, updates, reduction)
        expected = reference(data, indices, updates, reduction)
        # Bit for bit, but that a NaN computed from NaNs may carry another NaN's payload.
        assert same_values(got, expected.astype(got.dtype)), f"case {number}"


def repeats(data: npt.NDArray[Any], indices: npt.NDArray[Any]) -> bool:
    """Whether two tuples of indices name the same element or slice."""
    k = indices.shape[-1]
    table = indices.reshape(-1, k).astype(np.int64) % np.array(data.shape[:k], dtype=np.int64)
    return bool(np.unique(table, axis=0).shape[0] < table.shape[0])


def test_none_matches_openvino() -> None:
    sent = agreed = 0  # 179 sent, 179 agreed (78 with repeats; one run reordered one once)
    failures: list[int] = []
    reordered: list[int] = []
    for number, (data, indices, updates, _) in enumerate(NONE):
        got = scatter_nd_update(data, indices, updates)
        np.testing.assert_array_equal(
            raw(got), raw(reference(data, indices, updates, "none")), err_msg=f"case {number}"
        )
        if data.size == 0 or updates.size == 0 or indices.shape[-1] == 0:
            continue
        where = np.arange(1, data.size + 1, dtype=np.int32).reshape(data.shape)
        new = -np.arange(1, updates.size + 1, dtype=np.int32).reshape(updates.shape)
        sent_indices, sent_new = plugin_form(indices, new)
        model = compiled("int32", data.ndim, sent_indices.ndim, indices.shape[-1], "none")
        answer = np.asarray(model([where, sent_indices, sent_new])[0]).reshape(-1)
        sent += 1
        pool = np.concatenate([raw(updates).reshape(-1)[::-1], raw(data).reshape(-1)])
        if answer.min(initial=0) >= -updates.size and answer.max(initial=0) <= data.size:
            theirs = pool[answer + updates.size - (answer > 0)].reshape(data.shape)
            if np.array_equal(theirs, raw(got)):
                agreed += 1
                continue
        if repeats(data, indices):
            reordered.append(number)  # the spec leaves the order undefined: not a disagreement
        else:
            failures.append(number)
    assert sent >= NONE_CASES // 2
    assert len(reordered) <= sent // 20, f"{reordered}: the plugin reorders often"
    assert not failures, f"OpenVINO disagreed on {failures} ({sent} sent, {agreed} agreed)"


def plugin_form(
    indices: npt.NDArray[Any], updates: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Indices as int64, and of rank 2 at least: the plugin takes no scalar updates, so a single
    tuple goes as a batch of one (its updates with a leading dimension of 1)."""
    if indices.ndim == 1:
        return indices.astype(np.int64)[None], np.array(updates, order="C")[None]
    return indices.astype(np.int64), np.ascontiguousarray(updates)


def plugin_output(answer: npt.NDArray[Any], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The plugin's output in the element type: bfloat16 comes back as its bits in a float16
    array."""
    if dtype == ml_dtypes.bfloat16:
        return answer.view(np.uint16).view(dtype)
    return answer.astype(dtype)


def _known_difference(data: npt.NDArray[Any], reduction: str) -> bool:
    """The classes where the plugin computes otherwise than the spec (module docstring)."""
    name = data.dtype.name
    if name in ("float16", "bfloat16", "float64", "int64", "uint64", "uint32"):
        return True
    return name == "bool" and reduction in ("sub", "prod")


def same_values(left: npt.NDArray[Any], right: npt.NDArray[Any]) -> bool:
    """Equal bits, or both NaN (a computed NaN's payload is the CPU's)."""
    if np.array_equal(raw(left), raw(right)):
        return True
    if left.dtype.kind != "f" and left.dtype != ml_dtypes.bfloat16:
        return False
    with np.errstate(all="ignore"):
        both_nan = np.isnan(left.astype(np.float32)) & np.isnan(right.astype(np.float32))
    return bool(((raw(left) == raw(right)) | both_nan).all())


def test_reductions_against_openvino() -> None:
    sent = agreed = 0  # 222 sent, 165 agreed: the 57 others are all in the known classes
    unexplained = []
    for number, (data, indices, updates, reduction) in enumerate(REDUCED):
        if data.size == 0 or updates.size == 0 or indices.shape[-1] == 0:
            continue
        got = scatter_nd_update(data, indices, updates, reduction)
        sent_indices, sent_updates = plugin_form(indices, updates)
        model = compiled(
            data.dtype.name, data.ndim, sent_indices.ndim, indices.shape[-1], reduction
        )
        answer = model([np.ascontiguousarray(data), sent_indices, sent_updates])[0]
        theirs = plugin_output(np.asarray(answer), data.dtype)
        sent += 1
        if theirs.shape != got.shape:
            unexplained.append(number)
        elif same_values(theirs, got):
            agreed += 1
        elif not _known_difference(data, reduction):
            unexplained.append(number)
    assert sent >= REDUCTION_CASES // 2
    assert not unexplained, f"OpenVINO disagreed on {unexplained} ({sent} sent, {agreed} agreed)"


# --- tests/benchmarks/bench_kernels.py's case ------------------------------------------------


def benchmark_cases(nbytes: int) -> list[BenchmarkCase]:
    """ScatterNDUpdate of 16 rows of a matrix of ``nbytes`` (the copy dominates), float32 and int8."""
    return [_benchmark_case(nbytes, dtype) for dtype in BENCHMARK_DTYPES]


def _benchmark_case(nbytes: int, dtype: Any) -> BenchmarkCase:
    """ScatterNDUpdate of 16 rows of a matrix of ``nbytes`` (the copy dominates)."""
    data = square(nbytes, dtype)
    indices = np.arange(16).reshape(16, 1)
    updates = np.ones((16, data.shape[1]), dtype)

    def model() -> Any:
        import openvino.opset15 as ov_opset15  # noqa: PLC0415

        build = lambda p: ov_opset15.scatter_nd_update(  # noqa: E731
            p, constant(indices), ov_opset1.constant(updates)
        )
        return plugin_model(build, data)

    arrays = {"data": data, "indices": indices, "updates": updates}
    return BenchmarkCase("scatter_nd_update", f"16 rows, {short(dtype)}", arrays, {"reduction": "none"},
                         data.dtype, 2 * data.nbytes, model)  # fmt: skip
