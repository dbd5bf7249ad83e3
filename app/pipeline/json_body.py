"""Parsing JSON bodies whose tensors are long base64 strings, without copying those strings.

``orjson.loads`` would turn a 90 MB base64 string into a 90 MB ``str`` (a copy, with the
interpreter lock held all along) before base64 could even start. Here the long strings are found
with ``bytes.find`` (memchr) and cut out of the body; only the small envelope left is parsed,
and each long string reaches the base64 decoder as a ``memoryview`` of the body.
"""

import ctypes
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from app.api.errors import ApiError

#: Strings at least this long are left in the body and handed over as views.
LONG_STRING = 1 << 16
# Past this many quotes a body is no envelope around a few tensors: parse it plainly.
_MAX_QUOTES = 4096
# Marks where a long string was cut; the random part keeps a body from forging one.
_MARK = f"tensor-ops-view-{secrets.token_hex(8)}:"


@dataclass(frozen=True)
class JsonBody:
    """A JSON body ready to parse: the text orjson will see, and the long strings cut out of it."""

    body: bytes | bytearray | memoryview
    text: bytes | bytearray | memoryview
    views: list[memoryview]

    def parsing_bytes(self) -> int:
        """About what parsing holds beyond the body: the parsed envelope (some 64 bytes per
        element of a JSON array, counted by its commas) and the decoded long strings."""
        decoded = sum(3 * len(view) // 4 for view in self.views)
        return 2 * len(self.text) + 64 * _count(self.text, ord(",")) + decoded

    def parse(self) -> dict[str, Any]:
        """The body as a JSON object; 400 when it is not JSON, 422 when it is not an object."""
        if self.views:
            try:
                payload = orjson.loads(self.text)
            except orjson.JSONDecodeError:
                payload = None  # the cut met something it does not model: parse plainly
            if isinstance(payload, dict):
                restored: dict[str, Any] = _restore(payload, self.views)
                return restored
        try:
            payload = orjson.loads(self.body)
        except orjson.JSONDecodeError as error:
            raise ApiError(
                400, ["body"], f"body is not valid JSON: {error}", "json_invalid"
            ) from None
        if not isinstance(payload, dict):
            raise ApiError(
                422,
                ["body"],
                f"body must be a JSON object, got {type(payload).__name__}",
                "model_type",
            )
        return payload


def split_json_body(body: bytes | bytearray | memoryview) -> JsonBody:
    """Find the long strings of a JSON body (memchr speed) and cut them out of what is parsed."""
    cut = _cut_long_strings(body)
    if cut is None:
        return JsonBody(body, body, [])
    envelope, views = cut
    return JsonBody(body, envelope, views)


def _cut_long_strings(
    body: bytes | bytearray | memoryview,
) -> tuple[bytes, list[memoryview]] | None:
    """The body with each long string replaced by a mark, and the strings; None if none."""
    if len(body) < LONG_STRING:
        return None
    find = _finder(body, ord('"'))
    quotes = []
    position = find(0)
    while position != -1:
        quotes.append(position)
        if len(quotes) > _MAX_QUOTES:
            return None
        position = find(position + 1)
    if len(quotes) % 2:
        return None
    parts: list[bytes] = []
    views: list[memoryview] = []
    whole = memoryview(body)
    start = 0
    for opening, closing in zip(quotes[::2], quotes[1::2], strict=True):
        if closing - opening - 1 >= LONG_STRING:
            parts.append(bytes(whole[start : opening + 1]))
            parts.append(f"{_MARK}{len(views)}".encode())
            views.append(whole[opening + 1 : closing])
            start = closing
    if not views:
        return None
    parts.append(bytes(whole[start:]))
    envelope = b"".join(parts)
    if b"\\" in envelope:
        return None  # escapes could hide quotes the pairing above did not see
    return envelope, views


def _finder(data: bytes | bytearray | memoryview, byte: int) -> Callable[[int], int]:
    """``find(start)``: the next position of ``byte`` in ``data`` from ``start``, or -1.

    bytes and bytearray have ``find`` (memchr); a view of a NumPy buffer gets libc's memchr
    through ctypes, at the same speed, with no copy.
    """
    if not isinstance(data, memoryview) or _MEMCHR is None:
        needle = bytes((byte,))
        whole = data if not isinstance(data, memoryview) else data.tobytes()
        return lambda start: whole.find(needle, start)
    base = np.frombuffer(data, dtype=np.uint8).ctypes.data
    size = len(data)
    memchr = _MEMCHR

    def find(start: int) -> int:
        if start >= size:
            return -1
        hit = memchr(base + start, byte, size - start)
        return -1 if hit is None else int(hit) - base

    return find


def _count(data: bytes | bytearray | memoryview, byte: int) -> int:
    if not isinstance(data, memoryview):
        return data.count(bytes((byte,)))
    values = np.frombuffer(data, dtype=np.uint8)
    step = 1 << 22  # a bounded temporary per step
    return sum(
        int(np.count_nonzero(values[start : start + step] == byte))
        for start in range(0, len(values), step)
    )


def _load_memchr() -> Any:
    try:
        libc = ctypes.CDLL(None)
        memchr = libc.memchr
    except (OSError, AttributeError):
        return None
    memchr.restype = ctypes.c_void_p
    memchr.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    return memchr


_MEMCHR = _load_memchr()


def _restore(node: Any, views: list[memoryview]) -> Any:
    if isinstance(node, str) and node.startswith(_MARK):
        return views[int(node[len(_MARK) :])]
    if isinstance(node, dict):
        return {key: _restore(value, views) for key, value in node.items()}
    if isinstance(node, list) and len(node) < 64:
        return [_restore(item, views) for item in node]
    return node
