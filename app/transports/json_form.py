"""Tensors as JSON values: a number, a boolean, or a rectangular nested array of them."""

from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from tensor_ops_wire.dtypes import BFLOAT16, shown
from tensor_ops_wire.errors import too_large, unacceptable, undecodable
from tensor_ops_wire.npy import MAX_RANK

JsonValue = Any
_INT64 = np.dtype(np.int64)
_NUMBER_TYPES = {int, float}


def _to_array(value: JsonValue) -> tuple[tuple[int, ...], list[Any]]:
    """The shape of a nested JSON array and its leaves in C order, at C speed."""
    if isinstance(value, bool | int | float):
        return (), [value]
    if not isinstance(value, list):
        raise unacceptable(
            "a tensor must be a number, a boolean, a nested array or a base64 .npy string, "
            f"got {'null' if value is None else type(value).__name__}"
        )
    # The shape is read down the first elements; then each level is flattened in turn (C
    # speed, one list of the level's items at a time) and checked to hold lists of that
    # length. No object per element beyond the parse's own (NumPy's object-array discovery
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
    for depth, size in enumerate(shape):
        if set(map(type, level)) != {list} or set(map(len, level)) != {size}:
            raise _ragged(depth)
        level = list(chain.from_iterable(level))
    if any(type(leaf) is list for leaf in level):
        raise _ragged(len(shape))
    return tuple(shape), level


def _ragged(depth: int) -> Exception:
    return undecodable(
        "ragged array: the nested lists must all have the same length at each depth, "
        f"and hold numbers or booleans at depth {depth}"
    )


def _leaf_types(leaves: list[Any]) -> set[type]:
    return set(map(type, leaves))


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
    shape, leaves = _to_array(value)
    types = _leaf_types(leaves)
    if not types <= {bool, int, float}:
        raise unacceptable(
            "a tensor's elements must be numbers or booleans, found "
            + _kind_words(types - {bool, int, float})
        )
    if bool in types and types & _NUMBER_TYPES:
        raise unacceptable("a tensor's elements must be all booleans or all numbers, not a mix")
    if dtype is None:
        if not types or float in types:
            dtype = np.dtype(np.float64)
        elif bool in types:
            dtype = np.dtype(np.bool_)
        else:
            dtype = _INT64
    return _convert(leaves, types, shape, dtype)


def _convert(
    leaves: list[Any], types: set[type], shape: tuple[int, ...], dtype: np.dtype[Any]
) -> npt.NDArray[Any]:
    if dtype.kind == "b":
        if types - {bool}:
            raise unacceptable(
                "elements of a bool tensor must be true or false, found "
                + _kind_words(types - {bool})
            )
        return np.array(leaves, dtype=dtype).reshape(shape)
    if dtype.kind in "iu":
        if types - {int}:
            raise unacceptable(
                f"elements of an {dtype.name} tensor must be integers, found "
                f"{_kind_words(types - {int})}"
            )
        try:
            return np.array(leaves, dtype=dtype).reshape(shape)
        except OverflowError:
            info = np.iinfo(dtype.type)
            bad = next(x for x in leaves if not info.min <= x <= info.max)
            raise unacceptable(
                f"value {shown(bad)} is out of range for {dtype.name} [{info.min}, {info.max}]"
            ) from None
    if types - _NUMBER_TYPES:
        raise unacceptable(
            f"elements of a {dtype.name} tensor must be numbers, found "
            + _kind_words(types - _NUMBER_TYPES)
        )
    wide = np.array(leaves, dtype=np.float64)
    with np.errstate(over="ignore"):
        narrow = wide.astype(dtype)
    overflowed = ~np.isfinite(narrow.astype(np.float64)) & np.isfinite(wide)
    if overflowed.any():
        bad = wide[overflowed][0]
        raise unacceptable(f"value {float(bad)!r} overflows {dtype.name}: it would become infinite")
    return narrow.reshape(shape)


def decode_json_indices(value: JsonValue) -> npt.NDArray[np.int64]:
    """An index tensor (shift, axes, indices, axis) in JSON form: int64 integers only."""
    shape, leaves = _to_array(value)
    types = _leaf_types(leaves)
    if types - {int}:
        found = _kind_words(types - {int})
        hint = (
            " (a number written with a fraction or an exponent, or beyond 64 bits)"
            if float in types
            else ""
        )
        raise unacceptable(f"must hold integers (int64), found {found}{hint}")
    try:
        return np.array(leaves, dtype=_INT64).reshape(shape)
    except OverflowError:
        bad = next(x for x in leaves if not -(1 << 63) <= x < 1 << 63)
        raise unacceptable(f"value {shown(bad)} does not fit in int64") from None


def json_ready(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` in a form orjson serialises exactly: C order, native, bfloat16 widened to f32."""
    if array.dtype == BFLOAT16:
        return array.astype(np.float32)
    return np.asarray(array, dtype=array.dtype.newbyteorder("="), order="C")


def json_can_carry(array: npt.NDArray[Any]) -> bool:
    """False when ``array`` holds NaN or an infinity: JSON has no numbers for them."""
    if array.dtype.kind != "f" and array.dtype != BFLOAT16:
        return True
    values = array.astype(np.float32) if array.dtype == BFLOAT16 else array
    return bool(np.isfinite(values).all())
