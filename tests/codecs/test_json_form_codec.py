"""Tensors in JSON form: shapes, inferred and named types, exact values, refusals."""

import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from app.codecs.json_form import decode_json_data, decode_json_indices, json_ready
from app.errors import from_wire
from tensor_ops_wire.dtypes import BY_NAME, ELEMENT_TYPES, dtype_from_name, element_type_of
from tensor_ops_wire.errors import TensorError


@pytest.mark.parametrize(
    ("value", "dtype", "shape"),
    [
        (5, "int64", ()),
        (2.5, "float64", ()),
        (True, "bool", ()),
        ([1, 2, 3], "int64", (3,)),
        ([1, 2.5], "float64", (2,)),
        ([[True], [False]], "bool", (2, 1)),
        ([], "float64", (0,)),
        ([[], []], "float64", (2, 0)),
    ],
)
def test_types_inferred_as_numpy_does(value: Any, dtype: str, shape: tuple[int, ...]) -> None:
    array = decode_json_data(value, None)
    assert array.dtype == np.dtype(dtype)
    assert array.shape == shape


@pytest.mark.parametrize("element", ELEMENT_TYPES, ids=lambda e: e.numpy)
def test_every_named_type(element: Any) -> None:
    value = [True, False] if element.numpy == "bool" else [[0, 1], [2, 3]]
    array = decode_json_data(value, element.dtype)
    assert array.dtype == element.dtype
    assert array.astype(np.float64).tolist() == np.array(value, dtype=np.float64).tolist()


def test_uint64_values_beyond_int64_are_exact() -> None:
    array = decode_json_data([2**64 - 1, 2**63, 0], np.dtype(np.uint64))
    assert array.tolist() == [2**64 - 1, 2**63, 0]


def test_int64_extremes_are_exact() -> None:
    array = decode_json_data([-(2**63), 2**63 - 1], None)
    assert array.dtype == np.int64
    assert array.tolist() == [-(2**63), 2**63 - 1]


def test_floats_round_to_the_named_type() -> None:
    array = decode_json_data([0.1, 65504, 1e-8], np.dtype(np.float16))
    assert array.tolist() == np.array([0.1, 65504, 1e-8], dtype=np.float16).tolist()
    bf16 = decode_json_data([0.1, 3.0], np.dtype(ml_dtypes.bfloat16))
    assert bf16.dtype == np.dtype(ml_dtypes.bfloat16)
    assert bf16.astype(np.float32).tolist() == [0.10009765625, 3.0]


@pytest.mark.parametrize(
    ("value", "dtype", "status", "words"),
    [
        ([[1, 2], [3]], None, 400, "ragged"),
        ([[1, 2], 3], None, 400, "ragged"),
        ([1, [2]], None, 400, "ragged"),
        ([True, 2], None, 422, "not a mix"),
        ([1, "a"], None, 422, "strings"),
        ([1, None], None, 422, "nulls"),
        ([{"a": 1}], None, 422, "objects"),
        ({"a": 1}, None, 422, "got dict"),
        (None, None, 422, "got null"),
        ([2**63], None, 422, "out of range for int64"),
        ([300], "int8", 422, "300 is out of range for int8"),
        ([-1], "uint64", 422, "-1 is out of range for uint64"),
        ([1.5], "int32", 422, "must be integers"),
        ([1], "bool", 422, "true or false"),
        ([True], "float32", 422, "must be numbers"),
        ([1e39], "float32", 422, "overflows float32"),
        ([70000], "float16", 422, "overflows float16"),
        ([1e39], "bfloat16", 422, "overflows bfloat16"),
    ],
)
def test_refusals(value: Any, dtype: str | None, status: int, words: str) -> None:
    with pytest.raises(TensorError, match=words) as caught:
        decode_json_data(value, dtype_from_name(dtype) if dtype else None)
    assert from_wire(caught.value, None).status == status


def test_nesting_deeper_than_numpy_allows_is_refused() -> None:
    value: Any = 1
    for _ in range(80):
        value = [value]
    with pytest.raises(TensorError, match="TENSOR_OPS_MAX_RANK") as caught:
        decode_json_data(value, None)
    assert from_wire(caught.value, None).status == 413


@pytest.mark.parametrize(
    ("value", "expected"), [(3, 3), ([1, -2], [1, -2]), ([], []), ([[0], [1]], [[0], [1]])]
)
def test_indices_are_int64(value: Any, expected: Any) -> None:
    array = decode_json_indices(value)
    assert array.dtype == np.int64
    assert array.tolist() == expected


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (1.5, "fractions"),
        (1.0, "fractions"),
        (True, "booleans"),
        ([1, False], "booleans"),
        (2**63, "does not fit in int64"),
        (float(2**70), "fractions"),
        ("1", "strings"),
    ],
)
def test_indices_refusals(value: Any, words: str) -> None:
    with pytest.raises(TensorError, match=words) as caught:
        decode_json_indices(["1"] if value == "1" else value)
    assert from_wire(caught.value, None).status == 422


def test_json_ready_widens_bfloat16_exactly() -> None:
    array = np.array([0.1, -3.5], dtype=ml_dtypes.bfloat16)
    ready = json_ready(array)
    assert ready.dtype == np.float32
    assert (
        ready.astype(ml_dtypes.bfloat16).view(np.uint16).tolist() == array.view(np.uint16).tolist()
    )


def test_dtype_names_of_numpy_openvino_and_kserve() -> None:
    for numpy_name, openvino_name, kserve_name in [
        ("float32", "f32", "FP32"),
        ("bool", "boolean", "BOOL"),
        ("bfloat16", "bf16", "BF16"),
        ("uint64", "u64", "UINT64"),
    ]:
        assert dtype_from_name(numpy_name) == dtype_from_name(openvino_name)
        assert dtype_from_name(openvino_name) == dtype_from_name(kserve_name)
    assert len(BY_NAME) == 39
    assert element_type_of(np.dtype(">i4")).numpy == "int32"
    with pytest.raises(ValueError, match="not supported"):
        element_type_of(np.dtype(np.complex64))


LONG = 100  # past the few dozen elements from which arrays are filled by np.fromiter


@pytest.mark.parametrize(
    ("value", "dtype", "status", "message"),
    [
        ([[1] * LONG] * 3 + [[1] * (LONG - 1)], None, 400, "at depth 1"),
        ([[1] * LONG, 3], None, 400, "at depth 1"),
        ([[[1]] * LONG, [[1]] * (LONG - 1) + [1]], None, 400, "at depth 2"),
        ([[1] * LONG, [1] * (LONG - 1) + [[2]]], None, 400, "at depth 2"),
        ([1] * LONG + [True], None, 422, "all booleans or all numbers, not a mix"),
        ([[1.5] * LONG, [1.5] * (LONG - 1) + ["a"]], None, 422, "found strings"),
        ([0.5] * LONG + [None], "float32", 422, "found nulls"),
        ([1] * LONG + [2**63], None, 422, "value 9223372036854775808 is out of range for int64"),
        ([0] * LONG + [300, -300], "int8", 422, "value 300 is out of range for int8 [-128, 127]"),
        ([[0] * LONG, [0] * (LONG - 1) + [-1]], "uint64", 422, "value -1 is out of range for"),
        ([1] * LONG + [1.5], "int32", 422, "must be integers, found fractions"),
        ([[1] * LONG] * 2, "bool", 422, "must be true or false, found integers"),
        ([[True] * LONG] * 2, "float32", 422, "must be numbers, found booleans"),
        ([[0.5] * LONG, [0.5] * (LONG - 1) + [1e39]], "float32", 422, "value 1e+39 overflows"),
        ([1.0] * LONG + [70000, 80000], "float16", 422, "value 70000.0 overflows float16"),
        ([1.0] * LONG + [1e39], "bfloat16", 422, "value 1e+39 overflows bfloat16"),
    ],
)
def test_refusals_of_long_arrays_say_the_same(
    value: Any, dtype: str | None, status: int, message: str
) -> None:
    with pytest.raises(TensorError, match=re.escape(message)) as caught:
        decode_json_data(value, dtype_from_name(dtype) if dtype else None)
    assert from_wire(caught.value, None).status == status


def test_long_index_refusals_say_the_same() -> None:
    with pytest.raises(TensorError, match="value 9223372036854775808 does not fit in int64"):
        decode_json_indices([0] * LONG + [2**63])
    with pytest.raises(TensorError, match=r"must hold integers \(int64\), found booleans$"):
        decode_json_indices([[0] * LONG, [0] * (LONG - 1) + [False]])


@pytest.mark.parametrize("count", [3, LONG, 4096])
@pytest.mark.parametrize("name", ["float16", "float32", "float64", "bfloat16"])
def test_floats_round_once_from_their_double(name: str, count: int) -> None:
    # Each number rounded from its double to the type, ties and subnormals included: the same
    # bits as NumPy's float64 array cast to the type, and an integer as its double.
    dtype = dtype_from_name(name)
    rng = np.random.default_rng(count)
    doubles = rng.standard_normal(count) * 10.0 ** rng.integers(-8, 5, count)
    narrow = doubles.astype(np.float32 if name == "bfloat16" else dtype)
    above = np.nextafter(narrow, np.array(np.inf, narrow.dtype)).astype(np.float64)
    ties = (narrow.astype(np.float64) + above) / 2  # halfway between two neighbours
    values = [*np.concatenate([doubles, ties])[: count - 2].tolist(), -0.0, 2049]
    array = decode_json_data([values[: count // 2], values[count // 2 : 2 * (count // 2)]], dtype)
    expected = np.array(values[: 2 * (count // 2)], dtype=np.float64).astype(dtype)
    assert array.dtype == dtype
    assert (
        array.view(f"u{dtype.itemsize}").tolist()
        == expected.reshape(2, -1).view(f"u{dtype.itemsize}").tolist()
    )


@pytest.mark.parametrize("element", ELEMENT_TYPES, ids=lambda e: e.numpy)
def test_long_arrays_of_every_type_are_exact(element: Any) -> None:
    rng = np.random.default_rng(3)
    if element.numpy == "bool":
        value = rng.integers(0, 2, (3, LONG)).astype(bool).tolist()
    elif element.dtype.kind in "iu":
        info = np.iinfo(element.dtype)
        value = rng.integers(info.min, info.max, (3, LONG), dtype=element.dtype).tolist()
    else:
        value = (rng.standard_normal((3, LONG)) * 1000).tolist()
    array = decode_json_data(value, element.dtype)
    assert array.shape == (3, LONG)
    expected = np.array(value, dtype=np.float64 if element.numpy == "bfloat16" else element.dtype)
    assert array.tolist() == expected.astype(element.dtype).tolist()
