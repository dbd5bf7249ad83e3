"""Tensors in V2 gRPC's typed ``contents``: one repeated field per family of datatypes.

Raw contents (``raw_input_contents``, what tritonclient sends) are the binary data extension's
bytes and go through ``decode_v2_binary``; this module reads and writes the other form, where
each element is a protobuf scalar.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.codecs.v2_tensors import element_count, v2_datatype, v2_dtype
from tensor_ops_wire.dtypes import shown
from tensor_ops_wire.errors import unacceptable, undecodable
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2.framing import FramingError, nested, packed_fixed

#: The field of ``InferTensorContents`` each datatype's elements go in, and the NumPy type of
#: that field's scalars. FP16 and BF16 have none: they travel as raw contents only.
CONTENTS_FIELDS: dict[str, tuple[str, np.dtype[Any]]] = {
    "BOOL": ("bool_contents", np.dtype(np.bool_)),
    "INT8": ("int_contents", np.dtype(np.int32)),
    "INT16": ("int_contents", np.dtype(np.int32)),
    "INT32": ("int_contents", np.dtype(np.int32)),
    "INT64": ("int64_contents", np.dtype(np.int64)),
    "UINT8": ("uint_contents", np.dtype(np.uint32)),
    "UINT16": ("uint_contents", np.dtype(np.uint32)),
    "UINT32": ("uint_contents", np.dtype(np.uint32)),
    "UINT64": ("uint64_contents", np.dtype(np.uint64)),
    "FP32": ("fp32_contents", np.dtype(np.float32)),
    "FP64": ("fp64_contents", np.dtype(np.float64)),
}
_ALL_FIELDS = sorted({field for field, _ in CONTENTS_FIELDS.values()} | {"bytes_contents"})
#: Field numbers: a tensor's ``contents`` (input and output alike), its typed fields, and a
#: response's outputs, for the fields read and written as wire bytes.
CONTENTS_NUMBER = pb.ModelInferRequest.InferInputTensor.DESCRIPTOR.fields_by_name["contents"].number
FIELD_NUMBERS = {field.name: field.number for field in pb.InferTensorContents.DESCRIPTOR.fields}
OUTPUTS_NUMBER = pb.ModelInferResponse.DESCRIPTOR.fields_by_name["outputs"].number
#: The most a parsed element of typed contents holds in protobuf's arena (a 64-bit scalar);
#: each takes at least one byte on the wire.
ARENA_BYTES_PER_ELEMENT = 8


def decode_contents(
    contents: Any, shape: Sequence[int], datatype: str, wire: memoryview
) -> npt.NDArray[Any]:
    """A tensor from ``contents`` (an ``InferTensorContents``) and its declared shape; values
    must fit the datatype exactly, as JSON data must on ``/v2``. Floats are read from ``wire``,
    the input tensor's message as it came: every bit kept, NaN payloads included."""
    dtype = v2_dtype(datatype)
    entry = CONTENTS_FIELDS.get(datatype)
    if entry is None:
        raise undecodable(
            f"{datatype} has no typed contents in the protocol; send the tensor in "
            "raw_input_contents"
        )
    field, wide = entry
    for other in _ALL_FIELDS:
        if other != field and len(getattr(contents, other)):
            raise undecodable(f"{datatype} elements go in contents.{field}, not in {other}")
    values = getattr(contents, field)
    expected = element_count(list(shape), dtype)
    if len(values) != expected:
        raise undecodable(
            f"shape {shown(list(shape))} holds {expected} elements but contents.{field} has "
            f"{len(values)}"
        )
    if wide.kind == "f":
        # Read from the wire: protobuf hands floats over as Python floats, which quiet a NaN.
        try:
            data = packed_fixed(wire, (CONTENTS_NUMBER, FIELD_NUMBERS[field]), wide.itemsize)
        except FramingError as error:
            raise undecodable(f"contents.{field} cannot be read: {error}") from None
        return np.frombuffer(data, dtype=wide.newbyteorder("<")).reshape(shape)
    array = np.fromiter(values, dtype=wide, count=len(values))
    if dtype != wide:
        info = np.iinfo(dtype)
        outside = (array < info.min) | (array > info.max)
        if outside.any():
            bad = array[np.argmax(outside)]
            raise unacceptable(
                f"value {int(bad)} is out of range for {dtype.name} [{info.min}, {info.max}]"
            )
        array = array.astype(dtype)
    return array.reshape(shape)


def can_be_typed(dtype: np.dtype[Any]) -> bool:
    """Whether an output of ``dtype`` can travel as typed contents (not FP16 or BF16)."""
    return v2_datatype(dtype) in CONTENTS_FIELDS


#: Elements encoded as varints at a time: the temporaries of one chunk (about 40 bytes an
#: element) stay bounded whatever the output's size.
_VARINT_CHUNK = 1 << 20
_MAX_VARINT_BYTES = 10


def typed_wire_bytes(dtype: np.dtype[Any], count: int) -> int:
    """The most ``count`` elements of ``dtype`` take as typed contents on the wire: floats
    their own size; a varint 7 bits a byte, and ten bytes for any negative number (protobuf
    writes INT8-64 as 64-bit two's complement)."""
    if dtype.kind == "f":
        return count * dtype.itemsize
    if dtype.kind == "i":
        return count * _MAX_VARINT_BYTES
    bits = 1 if dtype.kind == "b" else 8 * dtype.itemsize
    return count * -(-bits // 7)


def typed_bytes(dtype: np.dtype[Any], count: int) -> int:
    """What an answer of ``count`` typed elements holds beyond the output array: the message
    (joined once), and for integers their varints first, written a chunk at a time (about 40
    bytes an element of the chunk's temporaries)."""
    wire = typed_wire_bytes(dtype, count)
    if dtype.kind == "f":
        return wire
    return 2 * wire + min(count, _VARINT_CHUNK) * 40


def packed_varints(values: npt.NDArray[Any]) -> list[npt.NDArray[np.uint8]]:
    """``values`` (integers or booleans) as protobuf writes a packed repeated varint field, in
    pieces to join: a negative number as its 64-bit two's complement (ten bytes), as protobuf
    writes ``int32`` and ``int64``. NumPy does the work a chunk at a time, no Python object an
    element."""
    pieces = []
    for start in range(0, values.size, _VARINT_CHUNK):
        chunk = values[start : start + _VARINT_CHUNK]
        wide = chunk.astype(np.int64 if chunk.dtype.kind == "i" else np.uint64, copy=False)
        bits = wide.view(np.uint64)
        sizes = np.ones(bits.shape, np.int64)
        for step in range(1, _MAX_VARINT_BYTES):
            sizes += bits >= np.uint64(1 << (7 * step))
        ends = np.cumsum(sizes)
        starts = ends - sizes
        out = np.empty(int(ends[-1]), np.uint8)
        for step in range(_MAX_VARINT_BYTES):
            chosen = np.flatnonzero(sizes > step)
            if not chosen.size:
                break
            seven = (bits[chosen] >> np.uint64(7 * step)) & np.uint64(0x7F)
            more = (sizes[chosen] > step + 1).astype(np.uint64) << np.uint64(7)
            out[starts[chosen] + step] = (seven | more).astype(np.uint8)
        pieces.append(out)
    return pieces


def encode_typed_several(response: Any, tensors: list[tuple[Any, npt.NDArray[Any]]]) -> bytes:
    """The serialised ``response`` whose outputs are ``tensors`` (each a name, datatype and
    shape with its array's elements as typed contents), in order."""
    pieces: list[Any] = [response.SerializeToString()]
    for tensor, array in tensors:
        one = encode_typed(type(response)(), tensor, array)
        pieces.append(one)  # an empty head serialises to nothing: only the output's field
    return b"".join(pieces)


def encode_typed(response: Any, tensor: Any, array: npt.NDArray[Any]) -> bytes:
    """The serialised ``response`` whose one output is ``tensor`` (name, datatype, shape) with
    ``array``'s elements, row-major, as its typed contents.

    The elements are written as protobuf packs them, by NumPy: floats as their bytes (never
    through Python floats, which would quiet a signalling NaN), the others as varints.
    """
    field, wide = CONTENTS_FIELDS[v2_datatype(array.dtype)]
    flat = np.ascontiguousarray(array).reshape(-1).astype(wide, copy=False)
    if wide.kind == "f":
        packed = [flat.astype(wide.newbyteorder("<"), copy=False).view(np.uint8)]
    else:
        packed = packed_varints(flat)
    contents = nested(FIELD_NUMBERS[field], packed) if flat.size else []
    body = [tensor.SerializeToString(), *nested(CONTENTS_NUMBER, contents)]
    # One join: the response's head, then its one output, its contents nested inside.
    return b"".join([response.SerializeToString(), *nested(OUTPUTS_NUMBER, body)])
