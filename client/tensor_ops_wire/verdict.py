"""Verdicts: a candidate's outputs compared with the reference's, bit for bit or within a tolerance.

Shared by the service (``POST /verify/{op}``) and the client (which can judge locally): NumPy
only, no HTTP. The JSON form is the contract's (docs/verify.md):

    {"equal": bool, "rule": {...}, "outputs": [{"name", "equal", "shape_equal", "dtype_equal",
     "expected_shape", "expected_dtype", "got_shape", "got_dtype", "why", "compared",
     "mismatches", "bit_mismatches", "first": [{"index", "expected", "got", "expected_bits",
     "got_bits"}], and for floating types "max_ulp", "nan_payload_only", "signed_zero_only"}]}

How elements are compared:

- Every element type is compared on its bits: both arrays are viewed as unsigned integers of
  the item size and compared in one vectorised pass, chunk by chunk (the workspace stays a few
  MiB whatever the size). Integer data is never converted to floating point; float16 and
  bfloat16 are never cast to a type that rounds. A bool element is its truth (any nonzero byte
  is true, as the wire reads it).
- Only the elements whose bits differ are looked at further: for floating types, how far apart
  they are in ULPs (the float's bits mapped to a monotonic signed integer, so ``+0.0`` and
  ``-0.0`` are 0 apart and the largest finite value is 1 from infinity), whether both are NaN
  (differing only in payload or sign), whether both are zeros (differing only in sign).
- A tolerance forgives some of those: ``{"ulp": N}``, ``{"atol": x, "rtol": y}`` (``|got -
  expected| <= atol + rtol * |expected|``, in float64, which holds every float16, bfloat16 and
  float32 value exactly), ``{"nan_payload": "ignore"}``, ``{"signed_zero": "ignore"}``, in any
  combination: an element is equal when its bits are, or when any rule given forgives it. NaN is
  never within ``ulp`` or ``atol`` of anything, nor is a zero of the other sign (0 ULPs apart,
  but only ``nan_payload`` and ``signed_zero`` forgive those: a sign bug stays seen). Tolerances
  apply to floating outputs; integer and bool outputs are compared bit for bit always (the ops
  only move their data: a different integer is a wrong one).
- A shape or element type other than the reference's, a missing output or one the op does not
  have is a verdict (``equal: false``, ``why`` saying which), never an exception.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tensor_ops_wire.dtypes import (
    BFLOAT16,
    QUOTE_LIMIT,
    UnknownDTypeError,
    element_type_of,
    shown,
)

#: Elements compared at a time: the mismatch mask of one chunk is all the workspace there is.
CHUNK_ELEMENTS = 1 << 20
#: Mismatches listed in a verdict's ``first``, by default.
FIRST_LIMIT = 10
#: Outputs the op does not have that a verdict lists (the rest are counted: ``unlisted_outputs``).
EXTRA_LIMIT = 10
#: What ``nan_payload`` and ``signed_zero`` may be.
_IGNORE_OR_COMPARE = ("ignore", "compare")
#: The keys of a JSON ``tolerance``.
TOLERANCE_KEYS = ("ulp", "atol", "rtol", "nan_payload", "signed_zero")
_TOLERANCE_KEYS = TOLERANCE_KEYS
#: Why an element differs, each mismatch counted under exactly one (shared/api.md section 10),
#: tried in this order: the first that explains it is its cause.
CAUSES = (
    "narrowed_to_32_bits",
    "nan_quieted",
    "nan_payload",
    "signed_zero",
    "saturated",
    "through_float32",
    "through_float16",
    "through_bfloat16",
    "flushed_subnormal",
    "other",
)
_FLOAT_TYPES = (np.dtype(np.float16), BFLOAT16, np.dtype(np.float32), np.dtype(np.float64))
_UNSIGNED: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
    8: np.dtype(np.uint64),
}


class ToleranceError(ValueError):
    """A tolerance that cannot be applied; ``loc`` is the path to the part of it at fault
    (``("tolerance", "ulp")``: a key is one element, dots and all), ``field`` that path in
    words."""

    def __init__(self, loc: tuple[str, ...], message: str) -> None:
        self.loc = loc
        self.field = ".".join(loc)
        super().__init__(f"{self.field}: {message}")
        self.message = message


@dataclass(frozen=True)
class Tolerance:
    """What a comparison forgives; the default forgives nothing (bit-equal)."""

    ulp: int | None = None
    atol: float | None = None
    rtol: float | None = None
    ignore_nan_payload: bool = False
    ignore_signed_zero: bool = False

    @property
    def bit_equal(self) -> bool:
        return (
            self.ulp is None
            and self.atol is None
            and self.rtol is None
            and not self.ignore_nan_payload
            and not self.ignore_signed_zero
        )

    @property
    def close(self) -> bool:
        """Whether an ``atol``/``rtol`` bound is asked for."""
        return self.atol is not None or self.rtol is not None

    def rule(self) -> dict[str, Any]:
        """The rule a verdict says it applied: ``{"bit_equal": true}``, or the tolerance."""
        if self.bit_equal:
            return {"bit_equal": True}
        rule: dict[str, Any] = {"bit_equal": False}
        if self.ulp is not None:
            rule["ulp"] = self.ulp
        if self.close:
            rule["atol"] = self.atol or 0.0
            rule["rtol"] = self.rtol or 0.0
        if self.ignore_nan_payload:
            rule["nan_payload"] = "ignore"
        if self.ignore_signed_zero:
            rule["signed_zero"] = "ignore"
        rule["integer_outputs"] = "bit_equal"
        return rule


#: Named tolerances (a tolerance may be given as one of these names; docs/verify.md).
PRESETS: dict[str, dict[str, Any]] = {
    # Bit for bit, the default.
    "exact": {},
    # A NaN for a NaN, whatever its payload or sign.
    "any_nan": {"nan_payload": "ignore"},
    # Equal as IEEE 754 compares numbers (0.0 == -0.0), and a NaN equal to a NaN.
    "ieee": {"nan_payload": "ignore", "signed_zero": "ignore"},
    # One ULP either way (a last-bit rounding difference), NaNs as in "any_nan".
    "ulp1": {"ulp": 1, "nan_payload": "ignore"},
    # A float32 or float64 output computed at float16's or bfloat16's precision (a plugin's
    # inference precision hint): within half a ULP of that type, relative (its unit roundoff).
    "float16_precision": {"rtol": 2.0**-11, "nan_payload": "ignore", "signed_zero": "ignore"},
    "bfloat16_precision": {"rtol": 2.0**-8, "nan_payload": "ignore", "signed_zero": "ignore"},
}


def tolerance_json(tolerance: Tolerance) -> dict[str, Any]:
    """A tolerance's JSON form, as ``parse_tolerance`` takes it (a preset given by name)."""
    form: dict[str, Any] = {}
    if tolerance.ulp is not None:
        form["ulp"] = tolerance.ulp
    if tolerance.atol is not None:
        form["atol"] = tolerance.atol
    if tolerance.rtol is not None:
        form["rtol"] = tolerance.rtol
    if tolerance.ignore_nan_payload:
        form["nan_payload"] = "ignore"
    if tolerance.ignore_signed_zero:
        form["signed_zero"] = "ignore"
    return form


def parse_tolerance(value: object, field: str = "tolerance") -> Tolerance:
    """The ``Tolerance`` a request's JSON ``tolerance`` asks for (None or ``{}``: bit-equal).

    Refused (``ToleranceError`` naming the key, e.g. ``tolerance.ulp``): a value that is not an
    object, an unknown key, ``ulp`` that is not a non-negative integer, ``atol``/``rtol`` that
    are not finite non-negative numbers, ``nan_payload``/``signed_zero`` other than ``"ignore"``
    or ``"compare"``.
    """
    if value is None:
        return Tolerance()
    if isinstance(value, Tolerance):
        return value
    if isinstance(value, str):
        preset = PRESETS.get(value)
        if preset is None:
            raise ToleranceError(
                (field,), f"{shown(value)} is no preset; presets: {', '.join(PRESETS)}"
            )
        return parse_tolerance(preset, field)
    if not isinstance(value, Mapping):
        raise ToleranceError(
            (field,),
            'must be an object such as {"ulp": 1} or {"atol": 1e-6, "rtol": 1e-5}, or a '
            f"preset's name ({', '.join(PRESETS)})",
        )
    for key in value:
        if key not in _TOLERANCE_KEYS:
            raise ToleranceError(
                (field, str(key)[:32]),
                f"is not a tolerance; the keys are {', '.join(_TOLERANCE_KEYS)}",
            )
    ulp = value.get("ulp")
    if ulp is not None and (
        isinstance(ulp, bool) or not isinstance(ulp, int) or not 0 <= ulp < 1 << 64
    ):
        raise ToleranceError((field, "ulp"), "must be an integer from 0 to 2**64 - 1")
    bounds = {}
    for key in ("atol", "rtol"):
        bound = value.get(key)
        if bound is None:
            continue
        if (
            isinstance(bound, bool)
            or not isinstance(bound, int | float)
            or not math.isfinite(bound)
            or bound < 0
        ):
            raise ToleranceError((field, key), "must be a finite number >= 0")
        bounds[key] = float(bound)
    ignored = {}
    for key in ("nan_payload", "signed_zero"):
        choice = value.get(key, "compare")
        if choice not in _IGNORE_OR_COMPARE:
            raise ToleranceError((field, key), 'must be "ignore" or "compare"')
        ignored[key] = choice == "ignore"
    return Tolerance(
        ulp=ulp,
        atol=bounds.get("atol"),
        rtol=bounds.get("rtol"),
        ignore_nan_payload=ignored["nan_payload"],
        ignore_signed_zero=ignored["signed_zero"],
    )


def type_name(dtype: np.dtype[Any]) -> str:
    """The element type's NumPy name (``bfloat16`` too); an unsupported type's own name."""
    try:
        return element_type_of(dtype).numpy
    except UnknownDTypeError:
        return str(dtype)


def _native(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` in native byte order and C order (a copy only when it is not already)."""
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return np.ascontiguousarray(array)


def _floating(dtype: np.dtype[Any]) -> bool:
    return dtype.kind == "f" or dtype == BFLOAT16


@dataclass(frozen=True)
class _FloatBits:
    """The bit layout of one floating type, as unsigned integers of its item size."""

    sign: int
    infinity: int
    #: The quiet bit of a NaN (the mantissa's highest): clear in a signalling NaN.
    quiet: int

    @classmethod
    def of(cls, dtype: np.dtype[Any]) -> "_FloatBits":
        width = dtype.itemsize * 8
        infinity = int(np.array(np.inf, dtype=dtype).view(_UNSIGNED[dtype.itemsize]))
        # Infinity's bits are the exponent's, all ones, above a mantissa of zeros.
        mantissa_bits = (infinity & -infinity).bit_length() - 1
        return cls(1 << (width - 1), infinity, 1 << (mantissa_bits - 1))


class _Output:
    """The running tally of one output's comparison, chunk by chunk."""

    def __init__(self, dtype: np.dtype[Any], tolerance: Tolerance, first_limit: int) -> None:
        self.dtype = dtype
        self.tolerance = tolerance
        self.first_limit = first_limit
        self.floating = _floating(dtype)
        self.layout = _FloatBits.of(dtype) if self.floating else None
        self.bit_mismatches = 0
        self.mismatches = 0
        self.max_ulp = 0
        self.nan_payload_only = 0
        self.signed_zero_only = 0
        #: Flat indices of the first mismatches under the rule, with their bits.
        self.first: list[tuple[int, int, int]] = []
        #: Mismatches under the rule, by cause (an index of CAUSES).
        self.causes = np.zeros(len(CAUSES), dtype=np.int64)

    def add(self, start: int, expected: npt.NDArray[Any], got: npt.NDArray[Any]) -> None:
        """Compare one chunk (unsigned views of the same length), ``start`` its flat offset."""
        differ = expected != got
        count = int(np.count_nonzero(differ))
        if not count:
            return
        self.bit_mismatches += count
        where = np.flatnonzero(differ)
        e, g = expected[where], got[where]
        if self.layout is not None:
            forgiven = self._floating(e, g)
            if forgiven is not None:
                kept = ~forgiven
                where, e, g = where[kept], e[kept], g[kept]
        self.mismatches += len(where)
        if len(where):
            self.causes += np.bincount(causes_of(self.dtype, e, g), minlength=len(CAUSES))
        room = self.first_limit - len(self.first)
        if room > 0:
            self.first += [
                (start + int(i), int(a), int(b))
                for i, a, b in zip(where[:room], e[:room], g[:room], strict=True)
            ]

    def _floating(self, e: npt.NDArray[Any], g: npt.NDArray[Any]) -> npt.NDArray[np.bool_] | None:
        """Tally the differing floats' kinds and distances; which ones the rule forgives."""
        assert self.layout is not None
        magnitude = np.uint64(self.layout.sign - 1)
        wide_e, wide_g = e.astype(np.uint64), g.astype(np.uint64)
        e_mag, g_mag = wide_e & magnitude, wide_g & magnitude
        infinity = np.uint64(self.layout.infinity)
        both_nan = (e_mag > infinity) & (g_mag > infinity)
        any_nan = (e_mag > infinity) | (g_mag > infinity)
        both_zero = (e_mag == 0) & (g_mag == 0)
        self.nan_payload_only += int(np.count_nonzero(both_nan))
        self.signed_zero_only += int(np.count_nonzero(both_zero))
        # ULPs on the monotonic mapping: same sign, the magnitudes' difference; opposite signs,
        # their sum (each below 2**63, so the sum fits in uint64).
        opposite = (wide_e ^ wide_g) >= np.uint64(self.layout.sign)
        apart = np.where(
            opposite,
            e_mag + g_mag,
            np.maximum(e_mag, g_mag) - np.minimum(e_mag, g_mag),
        )
        numbers = ~any_nan
        if numbers.any():
            self.max_ulp = max(self.max_ulp, int(apart[numbers].max()))
        tolerance = self.tolerance
        if tolerance.bit_equal:
            return None
        forgiven = np.zeros(len(e), dtype=bool)
        if tolerance.ignore_nan_payload:
            forgiven |= both_nan
        if tolerance.ignore_signed_zero:
            forgiven |= both_zero
        # Zeros of opposite signs are 0 ULPs apart and within any atol: only "signed_zero":
        # "ignore" forgives them, as only "nan_payload" forgives NaNs.
        numbers &= ~both_zero
        if tolerance.ulp is not None:
            forgiven |= numbers & (apart <= np.uint64(tolerance.ulp))
        if tolerance.close:
            unsigned = _UNSIGNED[self.dtype.itemsize]
            # Widening to float64 is exact for every floating type served.
            want = e.astype(unsigned).view(self.dtype).astype(np.float64)
            have = g.astype(unsigned).view(self.dtype).astype(np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                bound = (tolerance.atol or 0.0) + (tolerance.rtol or 0.0) * np.abs(want)
                forgiven |= numbers & (np.abs(have - want) <= bound)
        return forgiven


def causes_of(
    dtype: np.dtype[Any], expected: npt.NDArray[Any], got: npt.NDArray[Any]
) -> npt.NDArray[np.intp]:
    """Each mismatched element's cause, an index of ``CAUSES``: ``expected`` and ``got`` are
    the differing elements' bits (unsigned integers of the item size, or wider)."""
    e, g = expected.astype(np.uint64), got.astype(np.uint64)
    cause = np.full(len(e), CAUSES.index("other"), dtype=np.intp)
    if dtype.kind in "iu" and dtype.itemsize == 8:
        low = e & np.uint64(0xFFFFFFFF)
        signed = np.where(low >= np.uint64(1 << 31), low | np.uint64(0xFFFFFFFF00000000), low)
        cause[(g == low) | (g == signed)] = CAUSES.index("narrowed_to_32_bits")
        return cause
    if not _floating(dtype):
        return cause
    layout = _FloatBits.of(dtype)
    unsigned = _UNSIGNED[dtype.itemsize]
    magnitude = np.uint64(layout.sign - 1)
    infinity = np.uint64(layout.infinity)
    e_mag, g_mag = e & magnitude, g & magnitude
    e_nan, g_nan = e_mag > infinity, g_mag > infinity
    with np.errstate(invalid="ignore"):  # a NaN widened
        want = e.astype(unsigned).view(dtype).astype(np.float64)
        have = g.astype(unsigned).view(dtype).astype(np.float64)
    undecided = np.ones(len(e), dtype=bool)

    def settle(name: str, found: npt.NDArray[np.bool_]) -> None:
        chosen = undecided & found
        cause[chosen] = CAUSES.index(name)
        undecided[chosen] = False

    quiet = np.uint64(layout.quiet)
    both_nan = e_nan & g_nan
    settle("nan_quieted", both_nan & ((e & quiet) == 0) & (g == (e | quiet)))
    settle("nan_payload", both_nan)
    settle("signed_zero", (e_mag == 0) & (g_mag == 0))
    # An infinity as the largest finite value of this type or of a narrower one it went
    # through (float32's 3.4028234663852886e+38 for a float64 inf), of the infinity's sign.
    largest = [_largest(kind) for kind in _FLOAT_TYPES if kind.itemsize <= dtype.itemsize]
    held = [value for value in largest if _holds(dtype, value)]
    with np.errstate(invalid="ignore", over="ignore"):
        saturated = (
            (e_mag == infinity)
            & np.isin(np.abs(have), held)
            & (np.signbit(want) == np.signbit(have))
        )
        settle("saturated", saturated)
        # A subnormal of this type returned as a zero; then rounding to float32 (a float64
        # below float32's range is its zero); then a subnormal of a narrower type returned as
        # a zero (flushed on the way); then rounding to the 16-bit types.
        own_subnormal = (e_mag != 0) & (e_mag < np.uint64(layout.quiet << 1))
        settle("flushed_subnormal", own_subnormal & (g_mag == 0))
        finite = np.isfinite(want)
        if dtype.itemsize > 4:
            settle("through_float32", finite & _through(want, have, np.dtype(np.float32), dtype))
        tiny = max(
            _smallest_normal(kind) for kind in _FLOAT_TYPES if kind.itemsize <= dtype.itemsize
        )
        settle("flushed_subnormal", (e_mag != 0) & (np.abs(want) < tiny) & (g_mag == 0))
        for name, narrow in (
            ("through_float16", np.dtype(np.float16)),
            ("through_bfloat16", BFLOAT16),
        ):
            if narrow.itemsize < dtype.itemsize:
                settle(name, finite & _through(want, have, narrow, dtype))
    return cause


def _largest(dtype: np.dtype[Any]) -> float:
    """The largest finite value of a floating type."""
    infinity = int(np.array(np.inf, dtype=dtype).view(_UNSIGNED[dtype.itemsize]))
    return float(np.array(infinity - 1).astype(_UNSIGNED[dtype.itemsize]).view(dtype))


def _smallest_normal(dtype: np.dtype[Any]) -> float:
    layout = _FloatBits.of(dtype)
    return float(np.array(layout.quiet << 1).astype(_UNSIGNED[dtype.itemsize]).view(dtype))


def _holds(dtype: np.dtype[Any], value: float) -> bool:
    """Whether ``dtype`` holds ``value`` exactly."""
    with np.errstate(over="ignore"):
        return float(np.array(value).astype(dtype)) == value


def _through(
    want: npt.NDArray[np.float64],
    have: npt.NDArray[np.float64],
    narrow: np.dtype[Any],
    dtype: np.dtype[Any],
) -> npt.NDArray[np.bool_]:
    """Whether each ``have`` is ``want`` rounded to ``narrow`` (to nearest, directly or through
    float32; or clamped to its largest finite value when beyond it), same sign of zero."""
    rounded = [want.astype(narrow).astype(np.float64)]
    if narrow != np.float32:
        rounded.append(want.astype(np.float32).astype(narrow).astype(np.float64))
    largest = _largest(narrow)
    clamped = np.where(np.abs(want) > largest, np.copysign(largest, want), want)
    rounded.append(clamped.astype(narrow).astype(np.float64))
    found = np.zeros(len(want), dtype=bool)
    for value in rounded:
        found |= (value == have) & (np.signbit(value) == np.signbit(have))
    return found


def _shown(bits: int, dtype: np.dtype[Any]) -> Any:
    """One element as the JSON wire shows it: a number (a float's shortest repr in its own
    type), a boolean, or ``"nan"``/``"inf"``/``"-inf"``, which JSON has no numbers for."""
    if dtype.kind == "b":
        return bool(bits)
    value = np.array(bits, dtype=np.uint64).astype(_UNSIGNED[dtype.itemsize]).view(dtype)[()]
    if dtype.kind in "iu":
        return int(value)
    number = float(value)  # exact: every served float widens to float64 without rounding
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    # The JSON wire writes bfloat16 as float32, and each float type in its shortest repr.
    return float(str(np.float32(number) if dtype == BFLOAT16 else value))


def _hex(bits: int, dtype: np.dtype[Any]) -> str:
    return f"0x{bits:0{dtype.itemsize * 2}x}"


def _unsigned_view(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    flat = array.reshape(-1)
    if array.dtype.kind == "b":
        # A bool is its truth: any nonzero byte is true.
        truth: npt.NDArray[Any] = (flat.view(np.uint8) != 0).view(np.uint8)
        return truth
    bits: npt.NDArray[Any] = flat.view(_UNSIGNED[array.dtype.itemsize])
    return bits


def compare_output(
    name: str,
    expected: npt.NDArray[Any] | None,
    got: npt.NDArray[Any] | None,
    tolerance: Tolerance | None = None,
    first_limit: int = FIRST_LIMIT,
) -> dict[str, Any]:
    """The verdict on one output (``expected`` None: the op has no such output; ``got`` None:
    the candidate lacks it)."""
    tolerance = tolerance or Tolerance()
    verdict: dict[str, Any] = {
        "name": name,
        "equal": False,
        "shape_equal": False,
        "dtype_equal": False,
        "expected_shape": None if expected is None else list(expected.shape),
        "expected_dtype": None if expected is None else type_name(expected.dtype),
        "got_shape": None if got is None else list(got.shape),
        "got_dtype": None if got is None else type_name(got.dtype),
        "why": None,
        "compared": 0,
        "mismatches": 0,
        "bit_mismatches": 0,
        "first": [],
        "causes": {},
    }
    floating = expected is not None and _floating(expected.dtype)
    if floating:
        verdict.update(max_ulp=0, nan_payload_only=0, signed_zero_only=0)
    if expected is None:
        verdict["why"] = "the op has no output of this name"
        return verdict
    if got is None:
        verdict["why"] = "the candidate has no output of this name"
        return verdict
    verdict["shape_equal"] = expected.shape == got.shape
    verdict["dtype_equal"] = expected.dtype.newbyteorder("=") == got.dtype.newbyteorder("=")
    reasons = []
    if not verdict["dtype_equal"]:
        reasons.append(f"element type {verdict['got_dtype']}, expected {verdict['expected_dtype']}")
    if not verdict["shape_equal"]:
        reasons.append(f"shape {list(got.shape)}, expected {list(expected.shape)}")
    if reasons:
        verdict["why"] = "; ".join(reasons) + " (no element compared)"
        return verdict
    tally = _Output(expected.dtype, tolerance, first_limit)
    want, have = _unsigned_view(_native(expected)), _unsigned_view(_native(got))
    for start in range(0, want.size, CHUNK_ELEMENTS):
        stop = start + CHUNK_ELEMENTS
        tally.add(start, want[start:stop], have[start:stop])
    verdict["compared"] = int(want.size)
    verdict["mismatches"] = tally.mismatches
    verdict["bit_mismatches"] = tally.bit_mismatches
    verdict["equal"] = tally.mismatches == 0
    if tally.mismatches:
        kinds = [
            f"{count} {words}"
            for count, words, forgiven in (
                (tally.nan_payload_only, "only in a NaN's payload", tolerance.ignore_nan_payload),
                (tally.signed_zero_only, "only in a zero's sign", tolerance.ignore_signed_zero),
            )
            if count and not forgiven
        ]
        detail = f" ({', '.join(kinds)})" if kinds else ""
        verdict["why"] = f"{tally.mismatches} of {want.size} elements differ{detail}"
    verdict["causes"] = {
        name: int(count) for name, count in zip(CAUSES, tally.causes, strict=True) if count
    }
    dtype = expected.dtype
    verdict["first"] = [
        {
            "index": [int(i) for i in np.unravel_index(flat, expected.shape)],
            "expected": _shown(e, dtype),
            "got": _shown(g, dtype),
            "expected_bits": _hex(e, dtype),
            "got_bits": _hex(g, dtype),
        }
        for flat, e, g in tally.first
    ]
    if floating:
        verdict.update(
            max_ulp=tally.max_ulp,
            nan_payload_only=tally.nan_payload_only,
            signed_zero_only=tally.signed_zero_only,
        )
    return verdict


def compare(
    expected: Mapping[str, npt.NDArray[Any]],
    got: Mapping[str, npt.NDArray[Any]],
    tolerance: object = None,
    *,
    first_limit: int = FIRST_LIMIT,
) -> dict[str, Any]:
    """The verdict on a candidate's outputs ``got`` against the reference's ``expected``.

    ``tolerance`` is a ``Tolerance`` or its JSON form (``parse_tolerance``; a bad one raises
    ``ToleranceError``). Outputs are listed in the reference's order, then any the candidate
    has that the op does not (each ``equal: false``).
    """
    rule = parse_tolerance(tolerance)
    outputs = [
        compare_output(name, array, got.get(name), rule, first_limit)
        for name, array in expected.items()
    ]
    extra = [name for name in got if name not in expected]
    # A candidate's names are the client's: each shown cut short, and only the first few.
    outputs += [
        compare_output(_cut(name), None, got[name], rule, first_limit)
        for name in extra[:EXTRA_LIMIT]
    ]
    verdict: dict[str, Any] = {
        "equal": not extra and bool(outputs) and all(output["equal"] for output in outputs),
        "rule": rule.rule(),
        "outputs": outputs,
    }
    if len(extra) > EXTRA_LIMIT:
        verdict["unlisted_outputs"] = len(extra) - EXTRA_LIMIT
    return verdict


def _cut(name: str) -> str:
    if len(name) <= QUOTE_LIMIT:
        return name
    return f"{name[:QUOTE_LIMIT]}... ({len(name)} characters)"
