"""Tensors of the KServe V2 / Open Inference Protocol: JSON data and Triton's binary data."""

import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from app.codecs.json_form import decode_json_data, json_ready
from tensor_ops_wire.dtypes import (
    BFLOAT16,
    ELEMENT_TYPES,
    TYPE_NAME_LIMIT,
    canonical_bools,
    element_type_of,
    shown,
)
from tensor_ops_wire.errors import too_large, unacceptable, undecodable
from tensor_ops_wire.npy import MAX_NBYTES, MAX_RANK, numpy_can_hold

#: The protocol's datatypes this service takes (all but BYTES) and BF16, to NumPy dtypes.
V2_DTYPES: dict[str, np.dtype[Any]] = {e.kserve: e.dtype for e in ELEMENT_TYPES}


def v2_dtype(datatype: str) -> np.dtype[Any]:
    """The NumPy dtype of a V2 datatype name; BYTES and unknown names are refused."""
    dtype = V2_DTYPES.get(datatype)
    if dtype is None:
        raise unacceptable(
            f"datatype {shown(datatype, TYPE_NAME_LIMIT)} is not supported; use one of "
            f"{', '.join(V2_DTYPES)}"
        )
    return dtype


def v2_datatype(dtype: np.dtype[Any]) -> str:
    """The V2 datatype name of a NumPy dtype."""
    return element_type_of(dtype).kserve


def element_count(shape: list[int], dtype: np.dtype[Any]) -> int:
    """The elements of a declared ``shape`` (non-negative integers), in Python integers.

    The transport checks shapes against the service's limits later; this guards the codec from
    NumPy's own (a ValueError, a 500, past them): 413 for more than 64 dimensions, or for
    nonzero dimensions spanning more bytes than NumPy can index, even beside a 0 (``[0, 2**93]``
    holds no element, and still no array can have that shape).
    """
    if len(shape) <= 1:
        # A scalar, or one dimension: the bytes it spans, as numpy_can_hold counts them.
        if not shape:
            return 1
        if shape[0] * dtype.itemsize <= MAX_NBYTES:
            return shape[0]
    if len(shape) > MAX_RANK:
        raise too_large(f"shape has rank {len(shape)}; at most {MAX_RANK} is supported")
    if not numpy_can_hold(shape, dtype.itemsize):
        raise too_large(
            f"shape {shown(shape)} of {dtype.itemsize}-byte elements spans more than "
            f"{MAX_NBYTES} bytes (its nonzero dimensions), more than NumPy can index"
        )
    return math.prod(shape)


def decode_v2_json(data: Any, shape: list[int], datatype: str) -> npt.NDArray[Any]:
    """A tensor from its ``data`` (flat or nested, in row-major order) and declared ``shape``."""
    dtype = v2_dtype(datatype)
    expected = element_count(shape, dtype)
    array = decode_json_data(data, dtype)
    if array.size != expected:
        raise undecodable(
            f"shape {shown(shape)} holds {expected} elements but data has {array.size}"
        )
    return array.reshape(shape)


def decode_v2_binary(
    chunk: bytes | memoryview, shape: list[int], datatype: str, size_name: str = "binary_data_size"
) -> npt.NDArray[Any]:
    """A tensor from its raw little-endian, row-major bytes (Triton's binary data extension, or
    gRPC's raw contents: ``size_name`` says which); a BOOL byte other than 0 or 1 is read as
    true and kept as 1."""
    dtype = v2_dtype(datatype)
    expected = element_count(shape, dtype) * dtype.itemsize
    if len(chunk) != expected:
        raise undecodable(
            f"shape {shown(shape)} of {datatype} takes {expected} bytes but {size_name} "
            f"is {len(chunk)}"
        )
    # A BOOL byte other than 0 or 1 is true, and is answered as 1, as on every transport.
    return canonical_bools(np.frombuffer(chunk, dtype=wire_dtype(dtype))).reshape(shape)


def v2_json_data(array: npt.NDArray[Any]) -> npt.NDArray[Any] | Any:
    """The flat, row-major ``data`` of an output tensor, ready for orjson."""
    ready = json_ready(array)
    return ready.reshape(-1)


def v2_output_buffer(shape: tuple[int, ...], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """An array for an output sent as binary data: little-endian, row-major, sent as it is."""
    return np.empty(shape, dtype=wire_dtype(dtype))


@functools.cache
def wire_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """``dtype`` as binary tensors carry it: little-endian (made once per type, not per call)."""
    return dtype if dtype.itemsize == 1 or dtype == BFLOAT16 else dtype.newbyteorder("<")
