"""Raw tensor bytes of V2 gRPC messages, split out and joined in without protobuf's copies.

A ``ModelInferRequest`` (or ``ModelInferResponse``) is mostly its raw contents: one
length-delimited field a tensor. Parsed by protobuf, each is copied into the message's arena and
again into a ``bytes`` object when read; set on a message, each is copied in, then again when
the message is serialised. Here the top level of the message is walked instead: the raw
contents come out as views of the received bytes (no copy), the rest (a few hundred bytes of
names, shapes and parameters) is parsed by protobuf; an answer is its small head serialised by
protobuf, then each raw tensor appended as its own field, in one copy.
"""

from collections.abc import Sequence
from typing import Any

#: The field numbers of the raw contents: ModelInferRequest.raw_input_contents and
#: ModelInferResponse.raw_output_contents.
RAW_INPUT_FIELD = 7
RAW_OUTPUT_FIELD = 6

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10


class FramingError(ValueError):
    """The bytes are not a protobuf message."""


def _varint(view: memoryview, position: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 7 * _MAX_VARINT_BYTES, 7):
        if position >= len(view):
            raise FramingError("the message ends inside a varint")
        byte = view[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
    raise FramingError("a varint is longer than 10 bytes")


def split_raw(message: Any, field: int) -> tuple[bytes, list[memoryview]]:
    """The message without its ``field`` entries (for protobuf to parse), and those entries'
    payloads as views of ``message``, in order."""
    view = memoryview(message).cast("B")
    rest: list[memoryview] = []
    raw: list[memoryview] = []
    position = 0
    size = len(view)
    while position < size:
        start = position
        key, position = _varint(view, position)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise FramingError("a field has number 0")
        if wire_type == _VARINT:
            _, position = _varint(view, position)
        elif wire_type == _FIXED64:
            position += 8
        elif wire_type == _FIXED32:
            position += 4
        elif wire_type == _LENGTH:
            length, position = _varint(view, position)
            if number == field:
                if position + length > size:
                    raise FramingError(f"field {number} runs past the end of the message")
                raw.append(view[position : position + length])
                position += length
                continue
            position += length
        else:
            raise FramingError(f"field {number} has wire type {wire_type}, which proto3 never uses")
        if position > size:
            raise FramingError(f"field {number} runs past the end of the message")
        rest.append(view[start:position])
    head = rest[0].tobytes() if len(rest) == 1 else b"".join(rest)
    return head, raw


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def join_raw(head: bytes, field: int, raw: Sequence[Any]) -> bytes:
    """``head`` (a serialised message) with each buffer of ``raw`` appended as a ``field``
    entry: the bytes protobuf would write had they been set on the message, in one copy."""
    key = _varint_bytes(field << 3 | _LENGTH)
    pieces: list[Any] = [head]
    for buffer in raw:
        view = memoryview(buffer).cast("B")
        pieces += [key, _varint_bytes(len(view)), view]
    return b"".join(pieces)
