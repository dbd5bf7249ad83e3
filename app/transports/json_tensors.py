"""Tensors in a JSON body (nested arrays or base64 ``.npy``), to arrays and back, errors located."""

import functools
from enum import Enum
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from app.codecs.json_form import (
    decode_json_data,
    decode_json_indices,
    json_can_carry,
    json_ready,
)
from app.codecs.json_text import nested_json, text_bytes, writes_whole, writing_bytes
from app.errors import Fault, ServiceError, from_wire
from app.pipeline.jobs import Job
from tensor_ops_wire.dtypes import (
    BFLOAT16,
    UnknownDTypeError,
    dtype_from_name,
    element_type_of,
    shown,
)
from tensor_ops_wire.errors import TensorError, unacceptable
from tensor_ops_wire.npy import Base64Stream, decode_npy_base64, npy_buffer


class Form(Enum):
    """The two ways a tensor travels in a JSON body."""

    JSON = "json"
    NPY = "npy"


def decode_data(value: Any, dtype_name: str | None) -> tuple[npt.NDArray[Any], Form]:
    """The ``data`` tensor and the form it came in, its element type settled."""
    try:
        dtype = dtype_from_name(dtype_name) if dtype_name is not None else None
    except UnknownDTypeError as error:
        raise ServiceError(Fault.TENSOR_TYPE, ("body", "dtype"), str(error)) from None
    try:
        if isinstance(value, str | memoryview):
            array = decode_npy_base64(value)
            array = settle_npy_type(array, dtype)
            form = Form.NPY
        else:
            array = decode_json_data(value, dtype)
            form = Form.JSON
    except TensorError as error:
        raise from_wire(error, "data") from None
    return array, form


def settle_npy_type(array: npt.NDArray[Any], dtype: np.dtype[Any] | None) -> npt.NDArray[Any]:
    """The element type of an npy ``data``: the header's, or bfloat16 over 2-byte elements."""
    if dtype == BFLOAT16 and array.dtype.itemsize == 2 and array.dtype.kind in "uiV":
        # 2-byte payload reinterpreted as bfloat16: bring it to native order, then retype.
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("="))
        return array.view(BFLOAT16)
    try:
        element = element_type_of(array.dtype)
    except UnknownDTypeError as error:
        hint = (
            ' (2-byte elements are bfloat16 only with "dtype": "bfloat16")'
            if array.dtype.kind == "V"
            else ""
        )
        raise unacceptable(f"{error}{hint}") from None
    if dtype is not None and dtype != element.dtype:
        raise unacceptable(
            f"dtype {dtype.name!r} does not match the .npy payload, which holds {element.numpy}"
        )
    return array


def decode_index(value: Any, field: str) -> npt.NDArray[Any]:
    """An index input (shift, axes, indices, axis): int64 in JSON form, as sent in npy form.

    The element type of an npy index is judged by the op, whose spec says which it accepts.
    """
    try:
        if isinstance(value, str | memoryview):
            array = decode_npy_base64(value)
            if array.dtype.kind not in "biuf":
                raise unacceptable(
                    f"{field} must be of an integer type, got {shown(array.dtype.str)}"
                )
        else:
            array = decode_json_indices(value)
    except TensorError as error:
        raise from_wire(error, field) from None
    return array


def check_json_text_size(
    shape: tuple[int, ...], dtype: np.dtype[Any], max_output_bytes: int
) -> int:
    """The most bytes the output's JSON text can take; 413 when that could pass the limit.

    The bound counts each element's longest text and every bracket of every nested list (a
    rank-31 output of size-1 dimensions has 60 of them an element); large outputs belong in
    the npy form.
    """
    size = text_bytes(shape, dtype)
    if size > max_output_bytes:
        raise ServiceError(
            Fault.TOO_LARGE,
            ("body", "data"),
            f"the output of shape {shape} takes up to {size} bytes as JSON text, above the "
            f"limit of {max_output_bytes} bytes (raise it with TENSOR_OPS_MAX_OUTPUT_BYTES,"
            " or send data in npy form)",
        )
    return size


def json_encoding_bytes(job: Job, text: int) -> int:
    """What a JSON-form answer holds at its peak: the output, its copy ready for JSON (bfloat16
    widened), the text, and the writer's temporaries (orjson's lists, or one piece's)."""
    ready = job.output_count * (4 if job.output_dtype == BFLOAT16 else job.output_dtype.itemsize)
    writing = writing_bytes(job.output_shape, job.output_dtype)
    return job.output_bytes + ready + text + writing


def require_json_can_carry(output: npt.NDArray[Any], loc: tuple[str, ...], advice: str) -> None:
    """422 when ``output`` holds NaN or infinity, which JSON has no numbers for."""
    if not json_can_carry(output):
        raise ServiceError(
            Fault.NOT_JSON,
            loc,
            f"the output holds NaN or infinity, which JSON cannot carry; {advice}",
        )


@functools.cache
def _numpy_name(dtype: np.dtype[Any]) -> str:
    """The NumPy name of ``dtype``'s element type, looked up once per type."""
    return element_type_of(dtype).numpy


def encode_output(job: Job, form: Form, raw_npy: bool) -> tuple[list[Any], str]:
    """Run ``job`` and give the response body (as buffers to send in turn) and its media type.

    The raw and base64 ``.npy`` answers are written in place: the kernel fills the data part of
    a ready ``.npy`` buffer, and the JSON around the base64 is sent as separate small buffers.
    """
    if raw_npy or form is Form.NPY:
        buffer, target = npy_buffer(job.output_shape, job.output_dtype)
        job.output(target)
        if raw_npy:
            return [buffer], "application/x-npy"
        name = element_type_of(job.output_dtype).numpy
        suffix = orjson.dumps({"dtype": name, "shape": list(job.output_shape)})
        return [b'{"data":"', Base64Stream(buffer), b'",' + suffix[1:]], "application/json"
    output = job.output()
    require_json_can_carry(output, ("body", "data"), "send data in npy form")
    ready = json_ready(output)
    name = _numpy_name(output.dtype)
    if writes_whole(ready.shape, ready.dtype):
        # The whole answer in one orjson call: one buffer, as nested_json would write its data.
        data = ready.item() if ready.ndim == 0 else ready
        answer = {"data": data, "dtype": name, "shape": output.shape}
        return [orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY)], "application/json"
    suffix = orjson.dumps({"dtype": name, "shape": output.shape})
    return [b'{"data":', *nested_json(ready), b"," + suffix[1:]], "application/json"
