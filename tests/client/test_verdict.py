"""The verdict finds exactly what was changed in a correct output, and nothing else.

The hidden-corpus idea in reverse: correct outputs of every element type, one bit flipped at a
random place (mantissa, sign, exponent, a NaN's payload), a dimension dropped or added, the type
changed; each verdict must point at that change alone. ULP distances are checked against a
per-element oracle written apart from the module (Python integers, one element at a time).
"""

from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from tensor_ops_wire.verdict import (
    CHUNK_ELEMENTS,
    PRESETS,
    Tolerance,
    ToleranceError,
    compare,
    parse_tolerance,
)

FLOATS = {
    "float16": (np.dtype(np.float16), 10),  # dtype, mantissa bits
    "bfloat16": (np.dtype(ml_dtypes.bfloat16), 7),
    "float32": (np.dtype(np.float32), 23),
    "float64": (np.dtype(np.float64), 52),
}
INTEGERS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
SEEDS = range(12)


def _bits(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    return array.reshape(-1).view(UNSIGNED[array.dtype.itemsize])


def correct_output(dtype: np.dtype[Any], rng: np.random.Generator) -> npt.NDArray[Any]:
    """A reference output of ``dtype``: random bits, with every float's special values in it."""
    shape = tuple(int(size) for size in rng.integers(1, 6, size=int(rng.integers(1, 4))))
    count = int(np.prod(shape))
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    raw = rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    array = raw.view(dtype).reshape(shape).copy()
    if dtype.kind == "f" or dtype == FLOATS["bfloat16"][0]:
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -2.5], dtype=dtype)
        flat = array.reshape(-1)
        places = rng.choice(count, size=min(count, len(special)), replace=False)
        flat[places] = special[: len(places)]
    return array


def float_layout(dtype: np.dtype[Any]) -> tuple[int, int]:
    """(mantissa bits, sign bit) of a floating type."""
    mantissa = {np.dtype(d): m for d, m in FLOATS.values()}[dtype]
    return mantissa, dtype.itemsize * 8 - 1


def oracle_ulp(a: int, b: int, width: int) -> int:
    """ULPs between two floats' bits, one element in Python: each mapped to a signed integer
    (positive floats keep their magnitude, negative ones its negation), then subtracted."""

    def key(bits: int) -> int:
        magnitude = bits & ((1 << (width - 1)) - 1)
        return -magnitude if bits >> (width - 1) else magnitude

    return abs(key(a) - key(b))


def is_nan(bits: int, dtype: np.dtype[Any]) -> bool:
    mantissa, sign = float_layout(dtype)
    magnitude = bits & ((1 << sign) - 1)
    return magnitude >> mantissa == (1 << (sign - mantissa)) - 1 and bool(
        magnitude & ((1 << mantissa) - 1)
    )


def flip(array: npt.NDArray[Any], index: int, bit: int) -> npt.NDArray[Any]:
    changed = array.copy()
    flat = _bits(changed)
    flat[index] ^= flat.dtype.type(1 << bit)
    return changed


def only_output(verdict: dict[str, Any]) -> dict[str, Any]:
    assert len(verdict["outputs"]) == 1
    output: dict[str, Any] = verdict["outputs"][0]
    return output


# --- Unchanged: equal, nothing found -----------------------------------------------------------


@pytest.mark.parametrize("name", ["bool", *INTEGERS, *FLOATS])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_correct_output_is_equal_and_nothing_is_found(name: str, seed: int) -> None:
    dtype = FLOATS[name][0] if name in FLOATS else np.dtype(name)
    expected = correct_output(dtype, np.random.default_rng(seed))
    verdict = compare({"output": expected}, {"output": expected.copy()})
    assert verdict["equal"] is True
    assert verdict["rule"] == {"bit_equal": True}
    output = only_output(verdict)
    assert output["equal"] and output["shape_equal"] and output["dtype_equal"]
    assert output["compared"] == expected.size
    assert output["mismatches"] == output["bit_mismatches"] == 0
    assert output["first"] == []
    assert output["expected_dtype"] == name
    assert output["expected_shape"] == list(expected.shape)
    if name in FLOATS:
        assert (output["max_ulp"], output["nan_payload_only"], output["signed_zero_only"]) == (
            0,
            0,
            0,
        )
    else:
        assert "max_ulp" not in output and "nan_payload_only" not in output


# --- One bit flipped -----------------------------------------------------------------------------


@pytest.mark.parametrize("place", ["mantissa", "sign", "exponent"])
@pytest.mark.parametrize("name", list(FLOATS))
@pytest.mark.parametrize("seed", SEEDS)
def test_one_flipped_float_bit_is_found_alone(name: str, place: str, seed: int) -> None:
    dtype = FLOATS[name][0]
    rng = np.random.default_rng([seed, 1])
    expected = correct_output(dtype, rng)
    mantissa, sign = float_layout(dtype)
    bit = {
        "mantissa": int(rng.integers(0, mantissa)),
        "sign": sign,
        "exponent": int(rng.integers(mantissa, sign)),
    }[place]
    index = int(rng.integers(0, expected.size))
    got = flip(expected, index, bit)
    before, after = int(_bits(expected)[index]), int(_bits(got)[index])

    output = only_output(compare({"output": expected}, {"output": got}))

    assert not output["equal"] and output["shape_equal"] and output["dtype_equal"]
    assert output["mismatches"] == output["bit_mismatches"] == 1
    (first,) = output["first"]
    assert first["index"] == [int(i) for i in np.unravel_index(index, expected.shape)]
    assert int(first["expected_bits"], 16) == before
    assert int(first["got_bits"], 16) == after
    assert len(first["got_bits"]) == 2 + 2 * dtype.itemsize
    both_nan = is_nan(before, dtype) and is_nan(after, dtype)
    any_nan = is_nan(before, dtype) or is_nan(after, dtype)
    zero = (1 << sign) - 1
    both_zero = not (before & zero) and not (after & zero)
    assert output["nan_payload_only"] == int(both_nan)
    assert output["signed_zero_only"] == int(both_zero)
    assert output["max_ulp"] == (0 if any_nan else oracle_ulp(before, after, sign + 1))
    if both_nan:
        assert first["expected"] == first["got"] == "nan"


@pytest.mark.parametrize("name", list(FLOATS))
@pytest.mark.parametrize("seed", SEEDS)
def test_a_nan_payload_alone_is_found_and_can_be_ignored(name: str, seed: int) -> None:
    dtype = FLOATS[name][0]
    rng = np.random.default_rng([seed, 2])
    expected = correct_output(dtype, rng)
    mantissa, _ = float_layout(dtype)
    index = int(rng.integers(0, expected.size))
    expected.reshape(-1)[index] = np.nan
    # A payload bit that leaves it a NaN: any but the quiet bit when that is the only one set.
    quiet = mantissa - 1
    bit = int(rng.integers(0, quiet)) if quiet else 0
    got = flip(expected, index, bit)

    output = only_output(compare({"output": expected}, {"output": got}))
    assert output["mismatches"] == output["nan_payload_only"] == 1
    assert output["signed_zero_only"] == 0 and output["max_ulp"] == 0

    ignoring = compare({"output": expected}, {"output": got}, {"nan_payload": "ignore"})
    assert ignoring["equal"] is True
    assert ignoring["rule"]["nan_payload"] == "ignore"
    assert only_output(ignoring)["bit_mismatches"] == 1
    # The sign of a NaN is no number's sign either.
    negative = flip(expected, index, dtype.itemsize * 8 - 1)
    assert compare({"output": expected}, {"output": negative}, {"nan_payload": "ignore"})["equal"]


@pytest.mark.parametrize("name", ["bool", *INTEGERS])
@pytest.mark.parametrize("seed", SEEDS)
def test_one_flipped_integer_bit_is_found_alone(name: str, seed: int) -> None:
    dtype = np.dtype(name)
    rng = np.random.default_rng([seed, 3])
    expected = correct_output(dtype, rng)
    index = int(rng.integers(0, expected.size))
    got = expected.copy()
    if name == "bool":
        got.reshape(-1)[index] = not got.reshape(-1)[index]
    else:
        got = flip(expected, index, int(rng.integers(0, dtype.itemsize * 8)))

    output = only_output(compare({"output": expected}, {"output": got}))
    assert output["mismatches"] == 1
    (first,) = output["first"]
    assert first["index"] == [int(i) for i in np.unravel_index(index, expected.shape)]
    assert first["expected"] == expected.reshape(-1)[index].item()
    assert first["got"] == got.reshape(-1)[index].item()
    assert "max_ulp" not in output
    # No tolerance forgives an integer.
    lenient = {"ulp": 2**64 - 1, "atol": 1e300, "rtol": 1.0}
    assert compare({"output": expected}, {"output": got}, lenient)["equal"] is False


def test_a_bool_is_its_truth_whatever_its_byte() -> None:
    expected = np.array([True, False, True])
    got = np.array([7, 0, 1], dtype=np.uint8).view(bool)
    assert compare({"output": expected}, {"output": got})["equal"] is True


@pytest.mark.parametrize("seed", SEEDS)
def test_many_flips_are_counted_as_the_oracle_counts_them(seed: int) -> None:
    rng = np.random.default_rng([seed, 4])
    dtype = FLOATS[list(FLOATS)[seed % 4]][0]
    expected = correct_output(dtype, rng)
    got = expected.copy()
    flat = _bits(got)
    for _ in range(int(rng.integers(1, 6))):
        index = int(rng.integers(0, flat.size))
        flat[index] ^= flat.dtype.type(1 << int(rng.integers(0, dtype.itemsize * 8)))
    want, have = _bits(expected).tolist(), flat.tolist()
    differing = [i for i, (a, b) in enumerate(zip(want, have, strict=True)) if a != b]
    width = dtype.itemsize * 8
    numbers = [i for i in differing if not (is_nan(want[i], dtype) or is_nan(have[i], dtype))]

    output = only_output(compare({"output": expected}, {"output": got}, first_limit=3))

    assert output["mismatches"] == len(differing)
    flat_first = [
        int(np.ravel_multi_index(item["index"], expected.shape)) for item in output["first"]
    ]
    assert flat_first == differing[:3]
    assert output["max_ulp"] == max(
        (oracle_ulp(want[i], have[i], width) for i in numbers), default=0
    )


def test_the_first_mismatches_and_counts_span_chunks() -> None:
    expected = np.zeros(CHUNK_ELEMENTS * 2 + 5, dtype=np.float32)
    got = expected.copy()
    places = [3, CHUNK_ELEMENTS + 1, 2 * CHUNK_ELEMENTS + 4]
    got[places] = 1.0
    output = only_output(compare({"output": expected}, {"output": got}))
    assert output["mismatches"] == 3
    assert [item["index"][0] for item in output["first"]] == places
    assert output["max_ulp"] == int(np.float32(1.0).view(np.uint32))


# --- Shapes, types, names --------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["add", "drop", "flatten"])
@pytest.mark.parametrize("name", ["bool", "int8", "uint64", *FLOATS])
def test_a_dimension_added_or_dropped_is_a_shape_verdict(name: str, change: str) -> None:
    dtype = FLOATS[name][0] if name in FLOATS else np.dtype(name)
    expected = correct_output(dtype, np.random.default_rng(5)).reshape(-1)[:6]
    expected = np.resize(expected, 6).reshape(2, 3)
    got = {
        "add": expected[np.newaxis],
        "drop": expected[0],
        "flatten": expected.reshape(-1),  # the same elements: a broadcast must not hide it
    }[change]
    output = only_output(compare({"output": expected}, {"output": got}))
    assert output["equal"] is False
    assert output["shape_equal"] is False and output["dtype_equal"] is True
    assert output["got_shape"] == list(got.shape) and output["expected_shape"] == [2, 3]
    assert output["compared"] == 0 and output["first"] == []
    assert "shape" in output["why"]


@pytest.mark.parametrize(
    ("name", "other"),
    [
        ("float16", "bfloat16"),
        ("bfloat16", "float16"),
        ("float32", "int32"),
        ("int64", "uint64"),
        ("float64", "int64"),
        ("uint8", "bool"),
        ("int16", "float16"),
    ],
)
def test_a_type_changed_bits_kept_is_a_type_verdict(name: str, other: str) -> None:
    dtype = FLOATS[name][0] if name in FLOATS else np.dtype(name)
    target = FLOATS[other][0] if other in FLOATS else np.dtype(other)
    expected = np.zeros((2, 2), dtype=dtype)  # zeros: the same bits under either type
    got = expected.view(target)
    output = only_output(compare({"output": expected}, {"output": got}))
    assert output["equal"] is False
    assert output["dtype_equal"] is False and output["shape_equal"] is True
    assert output["got_dtype"] == other and output["expected_dtype"] == name
    assert output["compared"] == 0


def test_an_unsupported_type_is_a_verdict_not_an_error() -> None:
    expected = np.zeros(2, dtype=np.float32)
    verdict = compare({"output": expected}, {"output": np.array(["a", "b"])})
    assert verdict["equal"] is False
    assert only_output(verdict)["dtype_equal"] is False


def test_byte_order_is_no_difference() -> None:
    expected = np.array([1.5, -0.0, np.nan], dtype=np.float32)
    assert compare({"output": expected}, {"output": expected.astype(">f4")})["equal"] is True


def test_missing_and_extra_outputs_are_verdicts_and_the_others_still_judged() -> None:
    a, b = np.arange(4, dtype=np.int32), np.ones(3, dtype=np.float32)
    verdict = compare({"output_0": a, "output_1": b}, {"output_0": a, "surplus": b})
    assert verdict["equal"] is False
    names = [(item["name"], item["equal"]) for item in verdict["outputs"]]
    assert names == [("output_0", True), ("output_1", False), ("surplus", False)]
    assert verdict["outputs"][1]["why"] == "the candidate has no output of this name"
    assert verdict["outputs"][2]["why"] == "the op has no output of this name"
    assert verdict["outputs"][2]["expected_shape"] is None


def test_one_changed_output_of_several_leaves_the_others_equal() -> None:
    rng = np.random.default_rng(7)
    outputs = {f"output_{i}": correct_output(np.dtype(np.float32), rng) for i in range(3)}
    got = dict(outputs)
    got["output_1"] = flip(outputs["output_1"], 0, 0)
    verdict = compare(outputs, got)
    assert [item["equal"] for item in verdict["outputs"]] == [True, False, True]


# --- Tolerances --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FLOATS))
def test_ulp_tolerance_forgives_that_many_places_and_no_more(name: str) -> None:
    dtype = FLOATS[name][0]
    expected = np.array([1.0, -3.0, 0.0, 5.0], dtype=dtype)
    got = expected.copy()
    bits = _bits(got)
    bits[0] += bits.dtype.type(2)  # 2 ULPs up
    bits[1] += bits.dtype.type(3)  # 3 ULPs further from zero
    bits[2] = bits.dtype.type(1 << (dtype.itemsize * 8 - 1)) + bits.dtype.type(1)  # -tiny: 1 ULP
    two = only_output(compare({"output": expected}, {"output": got}, {"ulp": 2}))
    assert two["max_ulp"] == 3 and two["mismatches"] == 1 and two["bit_mismatches"] == 3
    assert two["first"][0]["index"] == [1]
    assert compare({"output": expected}, {"output": got}, {"ulp": 3})["equal"] is True


def test_signed_zero_alone_and_with_nan_payload() -> None:
    expected = np.array([0.0, np.nan, 1.0], dtype=np.float64)
    got = expected.copy()
    got[0] = -0.0
    _bits(got)[1] ^= np.uint64(1)
    plain = only_output(compare({"output": expected}, {"output": got}))
    assert (plain["mismatches"], plain["nan_payload_only"], plain["signed_zero_only"]) == (2, 1, 1)
    zero = compare({"output": expected}, {"output": got}, {"signed_zero": "ignore"})
    assert only_output(zero)["mismatches"] == 1
    both = compare(
        {"output": expected}, {"output": got}, {"signed_zero": "ignore", "nan_payload": "ignore"}
    )
    assert both["equal"] is True
    assert both["rule"] == {
        "bit_equal": False,
        "nan_payload": "ignore",
        "signed_zero": "ignore",
        "integer_outputs": "bit_equal",
    }


def test_atol_rtol_are_numpy_isclose_and_never_forgive_nan() -> None:
    expected = np.array([1.0, 100.0, np.nan, np.inf, 1.0], dtype=np.float32)
    got = np.array([1.001, 100.5, 1.0, np.inf, np.nan], dtype=np.float32)
    tolerance = {"atol": 0.01, "rtol": 0.001}
    output = only_output(compare({"output": expected}, {"output": got}, tolerance))
    close = np.isclose(got.astype(np.float64), expected.astype(np.float64), rtol=0.001, atol=0.01)
    differ = got.view(np.uint32) != expected.view(np.uint32)
    assert output["mismatches"] == int(np.count_nonzero(~close & differ))
    assert [item["index"][0] for item in output["first"]] == [1, 2, 4]


def test_float16_is_compared_on_its_bits_never_through_a_rounding_cast() -> None:
    # Two float16 values 1 ULP apart that are also equal after a bfloat16 round trip.
    expected = np.array([1.0], dtype=np.float16)
    got = np.array([1.0009765625], dtype=np.float16)
    assert got.astype(ml_dtypes.bfloat16).astype(np.float16)[0] == expected[0]
    output = only_output(compare({"output": expected}, {"output": got}))
    assert output["mismatches"] == 1 and output["max_ulp"] == 1
    # As the JSON wire writes a float16: its shortest text, which reads back to the same bits.
    assert output["first"][0]["got"] == 1.001
    assert np.float16(output["first"][0]["got"]).view(np.uint16) == 0x3C01
    assert output["first"][0]["got_bits"] == "0x3c01"


@pytest.mark.parametrize(
    ("tolerance", "field"),
    [
        ([1], "tolerance"),
        ({"ulps": 1}, "tolerance.ulps"),
        ({"ulp": -1}, "tolerance.ulp"),
        ({"ulp": 1.5}, "tolerance.ulp"),
        ({"ulp": True}, "tolerance.ulp"),
        ({"atol": "0.1"}, "tolerance.atol"),
        ({"rtol": float("nan")}, "tolerance.rtol"),
        ({"atol": -1e-3}, "tolerance.atol"),
        ({"nan_payload": "skip"}, "tolerance.nan_payload"),
        ({"signed_zero": True}, "tolerance.signed_zero"),
    ],
)
def test_a_bad_tolerance_is_refused_naming_its_field(tolerance: object, field: str) -> None:
    with pytest.raises(ToleranceError) as caught:
        parse_tolerance(tolerance)
    assert caught.value.field == field


def test_an_empty_tolerance_is_bit_equality() -> None:
    assert parse_tolerance({}) == parse_tolerance(None) == Tolerance()
    assert Tolerance().rule() == {"bit_equal": True}
    assert parse_tolerance({"rtol": 1e-5}).rule()["atol"] == 0.0


@pytest.mark.parametrize("tolerance", [{"ulp": 5}, {"atol": 1.0, "rtol": 0.5}])
def test_no_numeric_tolerance_hides_a_zeros_sign_or_a_nan(tolerance: dict[str, Any]) -> None:
    expected = np.array([0.0, np.nan, 1.0], dtype=np.float32)
    got = np.array([-0.0, np.nan, 1.0], dtype=np.float32)
    _bits(got)[1] ^= np.uint32(1)
    output = only_output(compare({"output": expected}, {"output": got}, tolerance))
    assert output["mismatches"] == 2
    assert output["why"] == (
        "2 of 3 elements differ (1 only in a NaN's payload, 1 only in a zero's sign)"
    )
    forgiven = compare(
        {"output": expected},
        {"output": got},
        {**tolerance, "signed_zero": "ignore", "nan_payload": "ignore"},
    )
    assert forgiven["equal"] is True


def _causes(expected: Any, got: Any) -> dict[str, int]:
    verdict = compare({"output": np.asarray(expected)}, {"output": np.asarray(got)})
    (output,) = verdict["outputs"]
    assert sum(output["causes"].values()) == output["mismatches"]
    causes: dict[str, int] = output["causes"]
    return causes


F32_MAX = float(np.finfo(np.float32).max)


@pytest.mark.parametrize(
    ("expected", "got", "cause"),
    [
        # A 64-bit integer as its low 32 bits, sign- or zero-extended.
        (np.array([2**40 + 7], np.int64), np.array([7], np.int64), "narrowed_to_32_bits"),
        (np.array([-(2**40) - 3], np.int64), np.array([-3], np.int64), "narrowed_to_32_bits"),
        (np.array([2**63 + 2**31], np.uint64), np.array([2**31], np.uint64), "narrowed_to_32_bits"),
        (np.array([2**40 + 7], np.int64), np.array([8], np.int64), "other"),
        (np.array([0.1]), np.array([float(np.float32(0.1))]), "through_float32"),
        (np.array([1e300]), np.array([F32_MAX]), "through_float32"),  # clamped on the way
        (
            np.array([0.1], np.float32),
            np.array([0.1], np.float32).astype(np.float16).astype(np.float32),
            "through_float16",
        ),
        (
            np.array([0.1]),
            np.array([0.1]).astype(ml_dtypes.bfloat16).astype(np.float64),
            "through_bfloat16",
        ),
        (np.array([np.inf]), np.array([F32_MAX]), "saturated"),
        (np.array([-np.inf], np.float32), np.array([-65504.0], np.float32), "saturated"),
        (np.array([np.inf], np.float16), np.array([65504], np.float16), "saturated"),
        (
            np.array([0x7C01], np.uint16).view(np.float16),
            np.array([0x7E01], np.uint16).view(np.float16),
            "nan_quieted",
        ),
        (
            np.array([0x7FF0000000000001], np.uint64).view(np.float64),
            np.array([0x7FF8000000000001], np.uint64).view(np.float64),
            "nan_quieted",
        ),
        (
            np.array([0x7FC00000], np.uint32).view(np.float32),
            np.array([0x7FC00001], np.uint32).view(np.float32),
            "nan_payload",
        ),
        (
            np.array([0x7C01], np.uint16).view(np.float16),
            np.array([0x7E02], np.uint16).view(np.float16),
            "nan_payload",
        ),
        (np.array([0.0], np.float32), np.array([-0.0], np.float32), "signed_zero"),
        (np.array([5e-324]), np.array([0.0]), "flushed_subnormal"),
        (np.array([1e-40], np.float32), np.array([-0.0], np.float32), "flushed_subnormal"),
        # Below float32's range: float32's zero; a float32 subnormal as zero: flushed.
        (np.array([1e-50]), np.array([0.0]), "through_float32"),
        (np.array([1e-40]), np.array([0.0]), "flushed_subnormal"),
        (np.array([1.0], np.float32), np.array([1.5], np.float32), "other"),
        (np.array([np.nan], np.float32), np.array([1.0], np.float32), "other"),
        (np.array([True]), np.array([False]), "other"),
        (np.array([3], np.int32), np.array([4], np.int32), "other"),
    ],
)
def test_each_mismatch_is_counted_under_its_cause(expected: Any, got: Any, cause: str) -> None:
    assert _causes(expected, got) == {cause: 1}


def test_causes_are_counted_once_each_and_none_for_a_wrong_shape() -> None:
    rng = np.random.default_rng(5)
    for dtype in (np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int64, np.uint8):
        width = np.dtype(dtype).itemsize
        expected = rng.integers(0, 256, 4096 * width, dtype=np.uint8).view(dtype)
        got = expected.copy()
        flips = rng.integers(0, got.size, 300)
        got.view(np.uint8)[flips * width + rng.integers(0, width, 300)] ^= np.uint8(1 << 3)
        _causes(expected, got)  # asserts the counts add up to the mismatches
    verdict = compare({"output": np.zeros(3)}, {"output": np.zeros(4)})
    assert verdict["outputs"][0]["causes"] == {}


def test_a_tolerance_may_be_a_preset_and_a_bad_key_is_one_element() -> None:
    nan, other_nan = np.array([0x7FC00000, 0x7FC00001], np.uint32).view(np.float32)
    assert compare({"o": np.array([nan])}, {"o": np.array([other_nan])}, "any_nan")["equal"]
    assert compare({"o": np.array([0.0])}, {"o": np.array([-0.0])}, "ieee")["equal"]
    assert not compare({"o": np.array([0.0])}, {"o": np.array([-0.0])}, "any_nan")["equal"]
    near = np.array([0.1]).astype(ml_dtypes.bfloat16).astype(np.float32)
    assert compare({"o": np.array([0.1], np.float32)}, {"o": near}, "bfloat16_precision")["equal"]
    assert not compare({"o": np.array([0.1], np.float32)}, {"o": near}, "float16_precision")[
        "equal"
    ]
    assert set(PRESETS) >= {"exact", "any_nan", "ieee", "ulp1"}
    with pytest.raises(ToleranceError) as refused:
        parse_tolerance({"u.l.p": 1})
    assert refused.value.loc == ("tolerance", "u.l.p")
    with pytest.raises(ToleranceError, match="is no preset; presets: exact"):
        parse_tolerance("loose")
