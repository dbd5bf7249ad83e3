"""Raw tensor bytes of V2 gRPC messages, split out and joined in without protobuf's copies.

A ``ModelInferRequest`` (or ``ModelInferResponse``) is mostly its raw contents: one
length-delimited field a tensor. Parsed by protobuf, each is copied into the message's arena and
again into a ``bytes`` object when read; set on a message, each is copied in, then again when
the message is serialised. Here the top level of the message is walked instead: the raw
contents come out as views of the received bytes (no copy), the rest (a few hundred bytes of
names, shapes and parameters) is parsed by protobuf; an answer is its small head serialised by
protobuf, then each raw tensor appended as its own field, in one copy.
"""

from collections.abc import Iterator, Sequence
from typing import Any

#: The field numbers of the raw contents: ModelInferRequest.raw_input_contents and
#: ModelInferResponse.raw_output_contents.
RAW_INPUT_FIELD = 7
RAW_OUTPUT_FIELD = 6

_VARINT, _FIXED64, _LENGTH, _START_GROUP, _END_GROUP, _FIXED32 = 0, 1, 2, 3, 4, 5
#: How deep groups may nest (protobuf's own recursion limit).
_MAX_DEPTH = 100
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


def _field_end(
    view: memoryview, position: int, number: int, wire_type: int, depth: int
) -> tuple[int, int]:
    """Where the field whose key ends at ``position`` ends, and where its payload ends (a
    group's, before its end marker)."""
    if wire_type == _VARINT:
        _, position = _varint(view, position)
    elif wire_type == _FIXED64:
        position += 8
    elif wire_type == _FIXED32:
        position += 4
    elif wire_type == _LENGTH:
        length, position = _varint(view, position)
        position += length
    elif wire_type == _START_GROUP:
        # proto3 never writes a group, but protobuf reads one as an unknown field: so do we.
        if depth >= _MAX_DEPTH:
            raise FramingError(f"groups are nested more than {_MAX_DEPTH} deep")
        while True:
            if position >= len(view):
                raise FramingError(f"group {number} is not closed")
            closing = position
            key, position = _varint(view, position)
            inner, inner_type = key >> 3, key & 7
            if inner == 0:
                raise FramingError("a field has number 0")
            if inner_type == _END_GROUP:
                if inner != number:
                    raise FramingError(f"group {number} is closed as group {inner}")
                return position, closing
            position, _ = _field_end(view, position, inner, inner_type, depth + 1)
    else:
        what = "an end of group outside any group" if wire_type == _END_GROUP else "wire type"
        raise FramingError(f"field {number} has {what} {wire_type}, which protobuf does not read")
    if position > len(view):
        raise FramingError(f"field {number} runs past the end of the message")
    return position, position


def fields(message: Any) -> Iterator[tuple[int, int, memoryview, memoryview]]:
    """Every field entry at the top level of ``message``: its number, its wire type, the whole
    entry and its payload (a varint's bytes, a fixed value's, a length-delimited field's or a
    group's contents), all views of ``message``. What protobuf's parser refuses to read is a
    ``FramingError``; what it reads, this reads alike (tested against it)."""
    view = memoryview(message).cast("B")
    position = 0
    size = len(view)
    while position < size:
        start = position
        key, position = _varint(view, position)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise FramingError("a field has number 0")
        payload_start = position
        if wire_type == _LENGTH:
            _, payload_start = _varint(view, position)
        end, payload_end = _field_end(view, position, number, wire_type, 0)
        yield number, wire_type, view[start:end], view[payload_start:payload_end]
        position = end


def split_raw(message: Any, field: int) -> tuple[bytes, list[memoryview]]:
    """The message without its ``field`` entries (for protobuf to parse), and those entries'
    payloads as views of ``message``, in order."""
    head, raw, _ = split_raw_counted(message, field)
    return head, raw


def split_raw_counted(message: Any, field: int) -> tuple[bytes, list[memoryview], int]:
    """``split_raw``, and how many entries the head has: each becomes an object of its own
    when parsed (a repeated message's element, a map's entry), at a cost its bytes on the wire
    do not tell (two bytes make an empty input tensor, some 80 bytes parsed)."""
    rest: list[memoryview] = []
    raw: list[memoryview] = []
    for number, wire_type, entry, payload in fields(message):
        if number == field and wire_type == _LENGTH:
            raw.append(payload)
        else:
            rest.append(entry)
    head = rest[0].tobytes() if len(rest) == 1 else b"".join(rest)
    return head, raw, len(rest)


def packed_fixed(message: Any, path: Sequence[int], itemsize: int) -> bytes:
    """The elements of a repeated fixed-size field (``float``, ``double``) as the bytes they
    are on the wire (little-endian): packed or not, every entry in order, entries of the
    messages on ``path`` merged as protobuf merges them. ``path`` is the field numbers from
    ``message`` down to the repeated field (``(5, 6)``: an input tensor's ``contents``, then
    its ``fp32_contents``).

    protobuf's Python API hands floats over as Python floats (doubles): a float's signalling
    NaN comes back quiet, its payload changed. Read from the wire, every bit stays.
    """
    fixed_type = _FIXED32 if itemsize == 4 else _FIXED64
    pieces: list[memoryview] = []

    def walk(messages: list[memoryview], depth: int) -> None:
        number = path[depth]
        last = depth == len(path) - 1
        found: list[memoryview] = []
        for within in messages:
            for entry_number, wire_type, _, payload in fields(within):
                if entry_number != number:
                    continue
                if last and wire_type in (_LENGTH, fixed_type):
                    pieces.append(payload)
                elif not last and wire_type == _LENGTH:
                    found.append(payload)
        if not last:
            walk(found, depth + 1)

    walk([memoryview(message).cast("B")], 0)
    joined = b"".join(pieces)
    if len(joined) % itemsize:
        raise FramingError(
            f"packed field {path[-1]} is not a whole number of {itemsize}-byte values"
        )
    return joined


def entry(message: Any, number: int, index: int) -> memoryview:
    """The payload of the ``index``-th entry of the length-delimited field ``number``."""
    seen = 0
    for entry_number, wire_type, _, payload in fields(message):
        if entry_number == number and wire_type == _LENGTH:
            if seen == index:
                return payload
            seen += 1
    raise FramingError(f"field {number} has no entry {index}")


def nested(number: int, payload: Sequence[Any]) -> list[Any]:
    """The pieces of one length-delimited field ``number`` whose contents are ``payload``'s
    pieces one after the other (to be joined, once, with the rest of a message)."""
    length = sum(
        len(piece) if type(piece) is bytes else len(memoryview(piece).cast("B"))
        for piece in payload
    )
    return [_varint_bytes(number << 3 | _LENGTH), _varint_bytes(length), *payload]


def _varint_bytes(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]  # a tag, or a small message's length
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: Each varint of one byte, made once.
_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def join_raw(head: bytes, field: int, raw: Sequence[Any]) -> bytes:
    """``head`` (a serialised message) with each buffer of ``raw`` appended as a ``field``
    entry: the bytes protobuf would write had they been set on the message, in one copy."""
    pieces: list[Any] = [head]
    for buffer in raw:
        pieces += nested(field, [memoryview(buffer).cast("B")])
    return b"".join(pieces)
