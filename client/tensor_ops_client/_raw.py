"""What the binary transports (V2 over HTTP, and gRPC) share: a tensor as raw little-endian
bytes and back, and the seconds of a ``retry-after``. No I/O, no gRPC."""

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from tensor_ops_client._errors import TensorOpsError
from tensor_ops_wire.dtypes import ElementType, UnknownDTypeError, element_type_of


def raw_input(
    name: str, tensor: npt.NDArray[Any], detail: Any = None
) -> tuple[ElementType, npt.NDArray[np.uint8]]:
    """The input's element type and its bytes, little-endian and in C order, as the protocols'
    raw contents are (no copy when the tensor is so already). An element type with no V2
    datatype is refused here (422, ``tensor_type``), as the service refuses it."""
    try:
        element = element_type_of(tensor.dtype)
    except UnknownDTypeError as error:
        raise TensorOpsError(
            422, f"{name}: {error}", detail, kind="tensor_type", field=name
        ) from None
    little = np.ascontiguousarray(tensor, dtype=element.dtype.newbyteorder("<"))
    return element, little.reshape(-1).view(np.uint8)


def raw_output(
    raw: bytes | memoryview, dtype: np.dtype[Any], shape: tuple[int, ...]
) -> npt.NDArray[Any]:
    """A read-only view of an output's raw contents, whose size has been checked; on a
    big-endian machine, the values in its own byte order, as the other transports give."""
    array = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(shape)
    return array if array.dtype == dtype else array.astype(dtype)


def fits(raw_size: int, dtype: np.dtype[Any], shape: tuple[int, ...]) -> bool:
    """Whether ``raw_size`` bytes are exactly an output of this shape and type."""
    return all(size >= 0 for size in shape) and math.prod(shape) * dtype.itemsize == raw_size


def seconds(value: str | None) -> float | None:
    """A ``retry-after`` of seconds (an HTTP date is not used by the service: None)."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None
