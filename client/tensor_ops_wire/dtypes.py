"""The one table of element types: every name a user may write, and the NumPy dtype it means."""

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

#: Client-supplied text quoted in a message is cut to this many characters (as the server's
#: ``app.errors.QUOTE_LIMIT``: this package does not import the server).
QUOTE_LIMIT = 64
#: An element type name is cut shorter: the longest valid one has 8 characters, so a typo shows
#: in full and anything longer is not a type name.
TYPE_NAME_LIMIT = 32


def shown(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``value`` as an error message may quote it: never more than a short prefix of it.

    A string is shown as its ``repr``, any other value (a shape, a header's value) as its
    ``repr`` unquoted; either is cut to ``limit`` characters, its full length said. Only the
    first ``limit`` items of a long list or tuple are ever turned into text.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value)} characters)"
    if isinstance(value, list | tuple) and len(value) > limit:
        return f"{repr(value[:limit])[:limit]}... ({len(value)} items)"
    try:
        text = repr(value)
    except ValueError:  # an integer of more digits than Python converts to text
        return f"<{type(value).__name__} too long to show>"
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


@dataclass(frozen=True)
class ElementType:
    """One element type under its three names."""

    numpy: str  # NumPy's name, the one responses use
    openvino: str  # OpenVINO's element type name
    kserve: str  # the KServe V2 / Triton datatype
    dtype: np.dtype[Any]


ELEMENT_TYPES: tuple[ElementType, ...] = (
    ElementType("bool", "boolean", "BOOL", np.dtype(np.bool_)),
    ElementType("int8", "i8", "INT8", np.dtype(np.int8)),
    ElementType("int16", "i16", "INT16", np.dtype(np.int16)),
    ElementType("int32", "i32", "INT32", np.dtype(np.int32)),
    ElementType("int64", "i64", "INT64", np.dtype(np.int64)),
    ElementType("uint8", "u8", "UINT8", np.dtype(np.uint8)),
    ElementType("uint16", "u16", "UINT16", np.dtype(np.uint16)),
    ElementType("uint32", "u32", "UINT32", np.dtype(np.uint32)),
    ElementType("uint64", "u64", "UINT64", np.dtype(np.uint64)),
    ElementType("float16", "f16", "FP16", np.dtype(np.float16)),
    ElementType("bfloat16", "bf16", "BF16", BFLOAT16),
    ElementType("float32", "f32", "FP32", np.dtype(np.float32)),
    ElementType("float64", "f64", "FP64", np.dtype(np.float64)),
)

#: Every accepted name, NumPy's, OpenVINO's and KServe's, to its element type.
BY_NAME: dict[str, ElementType] = {
    name: element
    for element in ELEMENT_TYPES
    for name in (element.numpy, element.openvino, element.kserve)
}

#: The names in the order the docs list them.
DTYPE_NAMES: tuple[str, ...] = tuple(BY_NAME)

_BY_DTYPE: dict[np.dtype[Any], ElementType] = {e.dtype: e for e in ELEMENT_TYPES}


class UnknownDTypeError(ValueError):
    """A name or a NumPy dtype that is not one of the supported element types."""


def dtype_from_name(name: str) -> np.dtype[Any]:
    """The NumPy dtype a user's type name means (``"f32"``, ``"FP32"`` and ``"float32"`` alike)."""
    element = BY_NAME.get(name)
    if element is None:
        raise UnknownDTypeError(
            f"unknown element type {shown(name, TYPE_NAME_LIMIT)}; supported: "
            f"{', '.join(e.numpy for e in ELEMENT_TYPES)} (or their OpenVINO and KServe names)"
        )
    return element.dtype


def canonical_bools(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` with every bool element stored as the byte 0 or 1.

    A bool byte on the wire (an ``.npy`` payload, a V2 binary tensor) may be any value; every
    nonzero byte is true, as NumPy's ``astype(bool)`` and OpenVINO's boolean read it, and is
    made 1 here so that every transport answers the same bytes. Arrays of other element types
    are returned unread; a bool array already all 0 and 1 (checked in one vectorised pass) is
    returned as it is, with no copy.
    """
    if array.dtype.kind != "b" or array.size == 0:
        return array
    raw = array.view(np.uint8)
    if int(raw.max()) <= 1:
        return array
    canonical: npt.NDArray[Any] = raw != 0
    return canonical


def element_type_of(dtype: np.dtype[Any]) -> ElementType:
    """The element type of a NumPy dtype in either byte order; refuses unsupported types."""
    element = _BY_DTYPE.get(dtype.newbyteorder("="))
    if element is None:
        raise UnknownDTypeError(
            f"element type {shown(dtype.str)} ({dtype.name}) is not supported; supported: "
            f"{', '.join(e.numpy for e in ELEMENT_TYPES)}"
        )
    return element
