"""Tensors as JSON values: a number, a boolean, or a rectangular nested array of them."""

from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from app.codecs.json_arrays import FlatArray
from tensor_ops_wire.dtypes import BFLOAT16, shown
from tensor_ops_wire.errors import too_large, unacceptable, undecodable
from tensor_ops_wire.npy import MAX_RANK

JsonValue = Any
_INT64 = np.dtype(np.int64)
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_NUMBER_TYPES = {int, float}
_FLOAT64 = np.dtype(np.float64)
#: From this many elements on, arrays are filled by ``np.fromiter``.
_FROMITER_FROM = 64


def _to_array(value: JsonValue) -> tuple[tuple[int, ...], list[list[Any]], set[type]]:
    """The shape of a nested JSON array, the lists of its last level (which hold its leaves in
    C order) and the leaves' types, at C speed."""
    if type(value) is FlatArray:
        # Read from the body's text with its nesting already checked (app.codecs.json_arrays).
        return value.shape, [value.values], set(map(type, value.values))
    if type(value) is not list:
        if isinstance(value, bool | int | float):
            return (), [[value]], {type(value)}
        if not isinstance(value, list):
            raise unacceptable(
                "a tensor must be a number, a boolean, a nested array or a base64 .npy string, "
                f"got {'null' if value is None else type(value).__name__}"
            )
    elif not value or type(value[0]) is not list:
        # One dimension (the most common index, and small tensors): the list is its leaves.
        types = set(map(type, value))
        if list in types:
            raise _ragged(1)
        return (len(value),), [value], types
    # The shape is read down the first elements; then each level is checked to hold lists of
    # that length and flattened in turn (C speed, one list of the level's items at a time), but
    # the last: the leaves stay in their lists (a flat list of them cost a third of the
    # conversion). No object per element beyond the parse's own (NumPy's object-array discovery
    # cost seconds and hundreds of MB on deep nesting).
    shape: list[int] = []
    node: Any = value
    while type(node) is list:
        shape.append(len(node))
        if len(shape) > MAX_RANK:
            raise too_large(
                f"arrays nested deeper than {MAX_RANK} levels (the most NumPy holds; the service's "
                "own limit is TENSOR_OPS_MAX_RANK)"
            )
        if not node:
            break
        node = node[0]
    level: list[Any] = [value]
    last = len(shape) - 1
    for depth, size in enumerate(shape):
        if set(map(type, level)) != {list} or set(map(len, level)) != {size}:
            raise _ragged(depth)
        if depth < last:
            level = list(chain.from_iterable(level))
    # The leaves' types in one pass (map and set at C speed): a list among them is a level
    # deeper than the first elements said.
    types = set(map(type, chain.from_iterable(level)))
    if list in types:
        raise _ragged(len(shape))
    return tuple(shape), level, types


def _numbers(rows: list[list[Any]], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The leaves held by ``rows`` (of types already checked, as many in each) as a flat array
    of ``dtype``; OverflowError for an integer out of its range, as ``np.array`` raises it.

    ``np.fromiter`` takes each element as it comes, where ``np.array`` first looks into every one
    for a sequence: half the time from some 64 elements up, a little more below.
    """
    count = len(rows) * len(rows[0]) if rows else 0
    if count >= _FROMITER_FROM:
        return np.fromiter(chain.from_iterable(rows), dtype=dtype, count=count)
    return np.array(rows[0] if len(rows) == 1 else list(chain.from_iterable(rows)), dtype=dtype)


def _ragged(depth: int) -> Exception:
    return undecodable(
        "ragged array: the nested lists must all have the same length at each depth, "
        f"and hold numbers or booleans at depth {depth}"
    )


def _kind_words(types: set[type]) -> str:
    names = {
        bool: "booleans",
        int: "integers",
        float: "fractions",
        str: "strings",
        list: "arrays",
        dict: "objects",
        type(None): "nulls",
    }
    return ", ".join(sorted(names.get(t, t.__name__) for t in types))


def decode_json_data(value: JsonValue, dtype: np.dtype[Any] | None) -> npt.NDArray[Any]:
    """The ``data`` tensor of a JSON value, of ``dtype`` or of the type NumPy would infer.

    Values must fit the type exactly: integers in range, booleans only for bool, no booleans mixed
    with numbers, no value that would become infinite in a float type.
    """
    shape, rows, types = _to_array(value)
    if not types <= {bool, int, float}:
        raise unacceptable(
            "a tensor's elements must be numbers or booleans, found "
            + _kind_words(types - {bool, int, float})
        )
    if bool in types and types & _NUMBER_TYPES:
        raise unacceptable("a tensor's elements must be all booleans or all numbers, not a mix")
    if dtype is None:
        if not types or float in types:
            dtype = _FLOAT64
        elif bool in types:
            dtype = np.dtype(np.bool_)
        else:
            dtype = _INT64
    return _convert(rows, types, shape, dtype)


def _convert(
    rows: list[list[Any]], types: set[type], shape: tuple[int, ...], dtype: np.dtype[Any]
) -> npt.NDArray[Any]:
    if dtype.kind == "b":
        if types - {bool}:
            raise unacceptable(
                "elements of a bool tensor must be true or false, found "
                + _kind_words(types - {bool})
                + _float_hint(types)
            )
        return _numbers(rows, dtype).reshape(shape)
    if dtype.kind in "iu":
        if types - {int}:
            raise unacceptable(
                f"elements of an {dtype.name} tensor must be integers, found "
                f"{_kind_words(types - {int})}{_float_hint(types)}"
            )
        try:
            return _numbers(rows, dtype).reshape(shape)
        except OverflowError:
            info = np.iinfo(dtype.type)
            bad = next(x for x in chain.from_iterable(rows) if not info.min <= x <= info.max)
            raise unacceptable(
                f"value {shown(bad)} is out of range for {dtype.name} [{info.min}, {info.max}]"
            ) from None
    if types - _NUMBER_TYPES:
        raise unacceptable(
            f"elements of a {dtype.name} tensor must be numbers, found "
            + _kind_words(types - _NUMBER_TYPES)
        )
    if dtype.kind == "f":
        # float16, 32 and 64 straight from the Python numbers: each rounded once from its
        # double, exactly as through a float64 array (ties included).
        with np.errstate(over="ignore"):
            narrow = _numbers(rows, dtype)
        # JSON numbers are finite: an infinity here is an overflow (looked for only when one is).
        if dtype.itemsize == 8 or np.isfinite(narrow).all():
            return narrow.reshape(shape)
    else:  # bfloat16, through float64 as ml_dtypes casts it
        with np.errstate(over="ignore"):
            narrow = _numbers(rows, _FLOAT64).astype(dtype)
        if np.isfinite(narrow.astype(np.float32)).all():
            return narrow.reshape(shape)
    wide = _numbers(rows, _FLOAT64)
    overflowed = ~np.isfinite(narrow.astype(np.float64)) & np.isfinite(wide)
    if overflowed.any():
        bad = wide[overflowed][0]
        raise unacceptable(f"value {float(bad)!r} overflows {dtype.name}: it would become infinite")
    return narrow.reshape(shape)


def _float_hint(types: set[type]) -> str:
    """What a "fraction" may be: the JSON parser reads an integer past 64 bits as a double."""
    if float in types:
        return " (a number written with a fraction or an exponent, or beyond 64 bits)"
    return ""


def decode_json_indices(value: JsonValue) -> npt.NDArray[np.int64]:
    """An index tensor (shift, axes, indices, axis) in JSON form: int64 integers only."""
    if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
        return np.array(value, dtype=_INT64)  # a scalar, the commonest attribute: no lists
    shape, rows, types = _to_array(value)
    if types - {int}:
        found = _kind_words(types - {int})
        raise unacceptable(f"must hold integers (int64), found {found}{_float_hint(types)}")
    try:
        return _numbers(rows, _INT64).reshape(shape)
    except OverflowError:
        bad = next(x for x in chain.from_iterable(rows) if not -(1 << 63) <= x < 1 << 63)
        raise unacceptable(f"value {shown(bad)} does not fit in int64") from None


def json_ready(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` in a form orjson serialises exactly: C order, native, bfloat16 widened to f32."""
    if array.dtype == BFLOAT16:
        return array.astype(np.float32)
    if array.dtype.isnative and array.flags.c_contiguous:
        return array  # as the kernels write their outputs: nothing to do
    return np.asarray(array, dtype=array.dtype.newbyteorder("="), order="C")


def json_can_carry(array: npt.NDArray[Any]) -> bool:
    """False when ``array`` holds NaN or an infinity: JSON has no numbers for them."""
    if array.dtype.kind != "f" and array.dtype != BFLOAT16:
        return True
    values = array.astype(np.float32) if array.dtype == BFLOAT16 else array
    return bool(np.isfinite(values).all())
