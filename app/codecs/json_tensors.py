"""Tensors in a JSON body (nested arrays or base64 ``.npy``), to arrays and back, errors located.

A codec: it knows shapes, element types and how to compute an output (a callable), not the
request or the op that asks.
"""

import functools
import math
import re
from collections.abc import Callable, Sequence
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
from app.errors import QUOTE_LIMIT, Fault, ServiceError, from_wire
from tensor_ops_wire.dtypes import (
    BFLOAT16,
    UnknownDTypeError,
    dtype_from_name,
    element_type_of,
    shown,
)
from tensor_ops_wire.errors import TensorError, WireFault, unacceptable
from tensor_ops_wire.npy import (
    Base64Stream,
    decode_npy_base64,
    encode_npy_base64,
    npy_buffer,
)
from tensor_ops_wire.npz import npz_pieces


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
        raise _with_string_hint(from_wire(error, "data"), value, error, index=False) from None
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
        raise _with_string_hint(from_wire(error, field), value, error, index=True) from None
    return array


def decode_like(
    value: Any, field: str, dtype: np.dtype[Any], dtype_name: str | None
) -> npt.NDArray[Any]:
    """A value input beside ``data`` (Concat's ``data_1``, ScatterUpdate's ``updates``, Pad's
    ``pad_value``): in JSON form, of ``data``'s element type (so ``0`` is data's zero); in npy
    form, the header's (a ``dtype`` of bfloat16 read over 2-byte elements, as for data)."""
    try:
        if isinstance(value, str | memoryview):
            named = dtype_from_name(dtype_name) if dtype_name is not None else None
            return settle_npy_type(decode_npy_base64(value), named)
        return decode_json_data(value, dtype)
    except UnknownDTypeError as error:
        raise ServiceError(Fault.TENSOR_TYPE, ("body", "dtype"), str(error)) from None
    except TensorError as error:
        raise _with_string_hint(from_wire(error, field), value, error, index=False) from None


def decode_inferred(value: Any, field: str) -> npt.NDArray[Any]:
    """An input whose JSON form is typed as NumPy infers it (Reverse-1's ``axis``: booleans in
    mask mode, integers in index mode); an empty list is an empty int64 list."""
    try:
        if isinstance(value, str | memoryview):
            return decode_npy_base64(value)
        if isinstance(value, list) and _all_empty(value):
            return decode_json_indices(value)
        return decode_json_data(value, None)
    except TensorError as error:
        raise _with_string_hint(from_wire(error, field), value, error, index=True) from None


def _all_empty(value: list[Any]) -> bool:
    return not value or (isinstance(value[0], list) and all(_all_empty(item) for item in value))


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


def json_encoding_bytes(shape: tuple[int, ...], dtype: np.dtype[Any], text: int) -> int:
    """What a JSON-form answer of ``shape`` (every output's elements, for several) holds at its
    peak: the output, its copy ready for JSON (bfloat16 widened), the text, and the writer's
    temporaries (orjson's lists, or one piece's)."""
    count = math.prod(shape)
    ready = count * (4 if dtype == BFLOAT16 else dtype.itemsize)
    writing = writing_bytes(shape, dtype)
    return count * dtype.itemsize + ready + text + writing


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


#: Computes an output: into the array given (a response buffer), or into one of its own.
Compute = Callable[[npt.NDArray[Any] | None], npt.NDArray[Any]]


def encode_output(
    shape: tuple[int, ...], dtype: np.dtype[Any], compute: Compute, form: Form, raw_npy: bool
) -> tuple[list[Any], str]:
    """The answer of an output of ``shape`` and ``dtype`` that ``compute`` makes: the response
    body (as buffers to send in turn) and its media type.

    The raw and base64 ``.npy`` answers are written in place: the kernel fills the data part of
    a ready ``.npy`` buffer, and the JSON around the base64 is sent as separate small buffers.
    """
    if raw_npy or form is Form.NPY:
        buffer, target = npy_buffer(shape, dtype)
        compute(target)
        if raw_npy:
            return [buffer], "application/x-npy"
        name = element_type_of(dtype).numpy
        suffix = orjson.dumps({"dtype": name, "shape": list(shape)})
        return [b'{"data":"', Base64Stream(buffer), b'",' + suffix[1:]], "application/json"
    output = compute(None)
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


#: What an ``.npz`` answer of several outputs holds at its peak, in outputs' bytes: the outputs,
#: and a copy of any output not laid out as an ``.npy`` file's data (its headers are a few
#: hundred bytes a member).
NPZ_ANSWER_FACTOR = 2


def encode_outputs(
    names: Sequence[str], compute: Callable[[], list[npt.NDArray[Any]]], form: Form, raw_npy: bool
) -> tuple[list[Any], str]:
    """The answer of several outputs (Split-1's), named ``names``, that ``compute`` makes:
    ``{"outputs": [{"name", "data", "dtype", "shape"}, ...]}`` in the request's form, or with
    ``raw_npy`` an ``.npz`` archive of one ``<name>.npy`` member an output."""
    outputs = compute()
    if raw_npy:
        # The archive's headers between the outputs' own data: nothing joined or copied.
        archive = npz_pieces(dict(zip(names, outputs, strict=True)))
        return archive.buffers, "application/x-npz"
    pieces: list[bytes] = []
    for name, output in zip(names, outputs, strict=True):
        dtype = _numpy_name(output.dtype)
        if form is Form.NPY:
            data: Any = encode_npy_base64(output)
        else:
            require_json_can_carry(output, ("body", name), "send data in npy form")
            ready = json_ready(output)
            data = ready.item() if ready.ndim == 0 else ready
        pieces.append(
            orjson.dumps(
                {"name": name, "data": data, "dtype": dtype, "shape": output.shape},
                option=orjson.OPT_SERIALIZE_NUMPY,
            )
        )
    return [b'{"outputs":[' + b",".join(pieces) + b"]}"], "application/json"


# ------------------------------------------------------------------------------------------------
# A number sent as a string (read as base64 .npy): the refusal says what to send instead.

#: The start of the base64 of every .npy file (its magic string, ``\x93NUMPY``).
_NPY_BASE64_START = "k05VTVBZ"
#: An integer as a client may spell it in a string.
INTEGER_TEXT = re.compile(r"[+-]?[0-9]{1,19}")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_LIST = re.compile(r"\[[0-9eE.,+\-\s\[\]]*\]")
_NOT_BASE64 = "not valid base64"


def shown_string(text: str) -> str:
    """A client's string as JSON writes it, cut to a short prefix (its full length said)."""
    if len(text) <= QUOTE_LIMIT:
        return orjson.dumps(text).decode()
    return f"{orjson.dumps(text[:QUOTE_LIMIT]).decode()}... ({len(text)} characters)"


def string_advice(text: str, integers: bool) -> str:
    """What to send instead of the string ``text``: the number or list it spells, unquoted."""
    spelled = text.strip()
    if len(spelled) <= QUOTE_LIMIT:
        if INTEGER_TEXT.fullmatch(spelled) or (not integers and _NUMBER.fullmatch(spelled)):
            return f"send the number {spelled} or a list of numbers, or base64 of a .npy"
        if _LIST.fullmatch(spelled):
            return f"send the list {spelled} without the quotes, or base64 of a .npy"
    if integers:
        return "send an integer or a list of integers, or base64 of a .npy"
    return "send a number or a list of numbers, or base64 of a .npy"


def _with_string_hint(
    error: ServiceError, value: Any, cause: TensorError, index: bool
) -> ServiceError:
    """``error`` (a tensor that did not decode) saying, when it came as a short string that is no
    base64 .npy, that strings are read as such and what to send instead. A long string, or one
    that starts as an .npy does, is meant as one: its error stays as it is."""
    if (
        not isinstance(value, str)
        or cause.kind is not WireFault.UNDECODABLE
        or value.startswith(_NPY_BASE64_START)
    ):
        return error
    if cause.message.startswith(_NOT_BASE64):
        what = "this one is not valid base64"
    else:
        what = f"this one decodes to no .npy file ({cause.message})"
    problem = error.problems[0]
    problem.msg = (
        f"{shown_string(value)} is a string; strings are read as a base64 .npy file, and "
        f"{what}: {string_advice(value, index)}"
    )
    return error
