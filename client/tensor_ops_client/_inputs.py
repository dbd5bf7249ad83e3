"""The inputs of a call as NumPy arrays, and what NumPy cannot hold refused before anything is
sent, in the words the service refuses the same values with on its JSON route.

NumPy takes a ragged list only as an error of its own, a list holding a string, ``None`` or an
object as an array of objects or strings that no transport carries, and a Python integer beyond
int64 as an object, or silently as a float (``[2**63, 1]``). Each of these is refused here as a
``TensorOpsError`` with the status, fault kind and field the service gives it:

- a ragged list: 400 ``tensor_decode``, ``"data: ragged array: ..."``;
- elements that are not numbers or booleans: 422 ``tensor_type``;
- an integer beyond int64: 422 ``tensor_type``.

No I/O here. Arrays are taken as they are: only lists, tuples and Python scalars (and arrays of
objects) are looked into.
"""

import warnings
from collections.abc import Mapping
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from tensor_ops_client._errors import TensorOpsError
from tensor_ops_wire.dtypes import shown
from tensor_ops_wire.errors import FAULT_STATUS
from tensor_ops_wire.ops import OPS

_INT64 = np.iinfo(np.int64)
#: The inputs the service reads as integers (int64 in JSON): every op's but its first, data.
INDEX_INPUTS = frozenset(item.name for op in OPS for item in op.inputs[1:])
#: Element types of arrays NumPy makes of values it cannot hold as numbers.
_NOT_NUMBERS = frozenset("OUS")
#: Element types NumPy may give a list holding a Python integer beyond int64 (an object array
#: is looked into anyway): float64 for ``[2**63, 1]``, uint64 for ``[2**63]``.
_MAY_HIDE_BIG_INTEGERS = frozenset("fu")
_WORDS: dict[type, str] = {
    bool: "booleans",
    int: "integers",
    float: "fractions",
    complex: "complex numbers",
    str: "strings",
    bytes: "bytes",
    type(None): "None",
    dict: "dicts",
    list: "arrays",
    tuple: "arrays",
}


def tensors_of(arrays: Mapping[str, npt.ArrayLike]) -> dict[str, npt.NDArray[Any]]:
    """Each input as a NumPy array; ``TensorOpsError`` for one NumPy cannot hold as numbers."""
    return {name: tensor_of(name, value) for name, value in arrays.items()}


def tensor_of(name: str, value: npt.ArrayLike) -> npt.NDArray[Any]:
    """``value`` as a NumPy array, or ``TensorOpsError`` (the service's status, fault kind and
    words, ``field`` the input's name) when it is ragged, holds what is not a number or a
    boolean, or a Python integer beyond int64."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O":
            _check(name, value.tolist())
        return value
    try:
        array = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as error:
        _check(name, value)
        # Not ragged, no odd element, no large integer, and still NumPy's error: said as it is.
        raise _refusal(name, f"not a tensor NumPy can hold ({error})", "tensor_decode") from None
    kind = array.dtype.kind
    if isinstance(value, list | tuple | int):
        # Python's own values: looked into where NumPy may have hidden a large integer too.
        if kind in _NOT_NUMBERS or kind in _MAY_HIDE_BIG_INTEGERS:
            _check(name, value)
    elif kind in _NOT_NUMBERS:
        # Anything else NumPy took (a string, None, an array-like of objects): as NumPy has it.
        _check(name, array.tolist())
    return array


def _refusal(name: str, words: str, kind: str) -> TensorOpsError:
    return TensorOpsError(FAULT_STATUS[kind], f"{name}: {words}", kind=kind, field=name)


def _nested(value: Any) -> Any:
    """An array found inside a list, as the nested lists (or the scalar) it holds."""
    return value.tolist() if isinstance(value, np.ndarray) else value


def _lists(kinds: set[type]) -> set[type]:
    """Those of ``kinds`` that are nested lists (lists and tuples, as NumPy reads them)."""
    return {kind for kind in kinds if issubclass(kind, list | tuple)}


def _leaves(name: str, value: Any) -> list[Any]:
    """The elements of a nested list in C order; ``TensorOpsError`` when it is ragged. Read a
    level at a time (each at C speed) as the service reads JSON: the depth it names is the
    service's."""
    value = _nested(value)
    if not isinstance(value, list | tuple):
        return [value]
    level: list[Any] = [value]
    depth = 0
    while True:
        if len(set(map(len, level))) > 1:
            raise _ragged(name, depth)
        items = list(chain.from_iterable(level))
        kinds = set(map(type, items))
        if any(issubclass(kind, np.ndarray) for kind in kinds):
            items = [_nested(item) for item in items]
            kinds = set(map(type, items))
        depth += 1
        lists = _lists(kinds)
        if not lists:
            return items
        if lists != kinds:
            raise _ragged(name, depth)
        level = items


def _ragged(name: str, depth: int) -> TensorOpsError:
    return _refusal(
        name,
        "ragged array: the nested lists must all have the same length at each depth, "
        f"and hold numbers or booleans at depth {depth}",
        "tensor_decode",
    )


def _is_number(kind: type) -> bool:
    return issubclass(kind, bool | int | float | np.number | np.bool_)


def _words(kinds: set[type]) -> str:
    names = (
        _WORDS.get(kind, "objects" if kind is object else f"objects of type {kind.__name__}")
        for kind in kinds
    )
    return ", ".join(sorted(names))


def _check(name: str, value: Any) -> None:
    """Raises the service's refusal of ``value``, if it has one: ragged, elements that are not
    numbers or booleans, a Python integer beyond int64."""
    leaves = _leaves(name, value)
    kinds = set(map(type, leaves))
    odd = {kind for kind in kinds if not _is_number(kind)}
    if odd:
        if name in INDEX_INPUTS:
            raise _refusal(name, f"must hold integers (int64), found {_words(odd)}", "tensor_type")
        raise _refusal(
            name,
            f"a tensor's elements must be numbers or booleans, found {_words(odd)}",
            "tensor_type",
        )
    if int not in kinds:
        return
    big = next(
        (leaf for leaf in leaves if type(leaf) is int and not _INT64.min <= leaf <= _INT64.max),
        None,
    )
    if big is None:
        return
    if name in INDEX_INPUTS:
        raise _refusal(name, f"value {shown(big)} does not fit in int64", "tensor_type")
    raise _refusal(
        name,
        f"value {shown(big)} is out of range for int64 [{_INT64.min}, {_INT64.max}]",
        "tensor_type",
    )


def given_as_numbers(value: object) -> bool:
    """Whether an input was given as Python numbers (a scalar, nested lists), not as an array
    whose element type the caller chose."""
    return not isinstance(value, np.ndarray | np.generic)


def typed_like(array: npt.NDArray[Any], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """An input given as numbers, in ``dtype`` (the data's), as the JSON route types
    ``pad_value``, ``updates`` or ``data_1``: ``0.5`` beside float32 data is float32's 0.5,
    ``[1, 2]`` beside float32 is float32, ``0.1`` is rounded to float32 as the JSON route
    rounds it. Values ``dtype`` cannot hold (``0.5`` beside int32 data, 300 beside int8, a
    fraction that would overflow) stay as NumPy read them, for the service to refuse in its
    words: nothing is truncated or wrapped here."""
    if array.dtype == dtype or (array.dtype.kind == "b") != (dtype.kind == "b"):
        return array  # booleans are no numbers' values and numbers no booleans, as in JSON
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a NaN or an overflow cast: refused below
        try:
            cast = array.astype(dtype)
            back = cast.astype(array.dtype)
        except (ValueError, TypeError, OverflowError):
            return array
    if array.dtype.kind == "f" and _is_float(dtype):
        # Rounded to the nearer float, as the JSON route reads a fraction; not past the range.
        overflowed = np.isinf(back) & ~np.isinf(array)
        return array if overflowed.any() else cast
    same = (
        np.array_equal(back, array, equal_nan=True)
        if array.dtype.kind == "f"
        else np.array_equal(back, array)
    )
    return cast if same else array


def _is_float(dtype: np.dtype[Any]) -> bool:
    return dtype.kind == "f" or dtype.name == "bfloat16"
