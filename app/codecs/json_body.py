"""Parses JSON request bodies, handing their long strings (base64 tensors) over as views."""

import ctypes
import re
import secrets
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from app.codecs.json_arrays import FLATTEN_BYTES_PER_BYTE, read_nested
from app.errors import Fault, ServiceError
from tensor_ops_wire.npy import MAX_RANK

# ``orjson.loads`` would turn a 90 MB base64 string into a 90 MB ``str`` (a copy, with the
# interpreter lock held all along) before base64 could even start. So the string delimiters are
# found with memchr, the long string values are cut out of the body and replaced by marks, only
# the small envelope left is parsed, and each mark is then replaced by a view of its string. The
# result must be exactly what ``orjson.loads(body)`` gives (or the same error): wherever the
# shortcut meets something it does not model, it parses the whole body plainly instead.

#: Strings at least this long are left in the body and handed over as views.
LONG_STRING = 1 << 16
# Past this many quotes a body is no envelope around a few tensors: parse it plainly.
_MAX_QUOTES = 4096
_QUOTE = ord('"')
_BACKSLASH = ord("\\")
_COMMA = ord(",")
_OPEN_BRACKET = ord("[")
_CLOSE_BRACKET = ord("]")
# What may follow a string's closing quote for the string to be an object key.
_KEY_END = re.compile(rb"[ \t\n\r]*:")
_SPACES = re.compile(rb"[ \t\n\r]*")
# Scans of a NumPy buffer without libc's memchr go this many bytes at a time (bounded temporaries).
_STEP = 1 << 20
# Bodies from this size on are counted by NumPy (smaller ones by bytes.count, with no setup).
_COUNT_BY_NUMPY = 1 << 12
# orjson's messages quote no input, but a message never grows past this anyway.
_MESSAGE_LIMIT = 200


# Not frozen: every JSON request makes one, and a frozen class sets each field through
# object.__setattr__ (1.5 us against 0.3 for seven fields). Nothing changes one once made.
@dataclass(slots=True)
class JsonBody:
    """A JSON body ready to parse: the text orjson will see, and the long strings cut out of it."""

    body: bytes | bytearray | memoryview
    text: bytes | bytearray | memoryview
    #: The long string values cut out of ``text``, without their quotes.
    views: list[memoryview]
    #: For each view, whether it holds a backslash (an escape: JSON must decode it, not base64).
    escaped: tuple[bool, ...] = ()
    #: Each view widened onto the quotes around it in the body: a JSON string in place.
    quoted: tuple[memoryview, ...] = ()
    #: What each cut string was replaced by in ``text``, followed by its index in ``views``.
    mark: str = ""
    #: Long nested arrays cut out of ``text`` (brackets and all), each replaced by a string of
    #: the mark and its index after the views': read by NumPy, not a list per nested list.
    arrays: tuple[memoryview, ...] = ()

    def parsing_bytes(self) -> int:
        """About what parsing holds beyond the body: the parsed envelope (some 64 bytes per
        element of a JSON array, counted by its commas), the decoded long strings, and the
        ``str`` JSON makes of each escaped one."""
        decoded = sum(3 * len(view) // 4 for view in self.views)
        unescaped = sum(
            len(view) for view, escaped in zip(self.views, self.escaped, strict=True) if escaped
        )
        # An array cut out costs what its plain parse would (that is what happens when it is
        # not a rectangular array of numbers), and flattening's temporaries.
        arrays = sum(
            parsing_bytes(array) + FLATTEN_BYTES_PER_BYTE * len(array) for array in self.arrays
        )
        return parsing_bytes(self.text) + decoded + unescaped + arrays

    def parse(self) -> dict[str, Any]:
        """The body as a JSON object, exactly as ``orjson.loads`` reads it (long strings as views
        of the body, or ``str`` when they hold escapes); 400 when it is not JSON, 422 when it is
        not an object."""
        try:
            payload = self.loads()
        except orjson.JSONDecodeError as error:
            message = f"body is not valid JSON: {error}"[:_MESSAGE_LIMIT]
            raise ServiceError(Fault.JSON_INVALID, ("body",), message) from None
        if not isinstance(payload, dict):
            raise ServiceError(
                Fault.INVALID_FIELD,
                ("body",),
                f"body must be a JSON object, got {type(payload).__name__}",
            )
        return payload

    def loads(self) -> Any:
        """The body as ``orjson.loads`` reads it (its ``JSONDecodeError`` included), but long
        strings as views (or ``str``) and long nested arrays as ``FlatArray``."""
        if self.views or self.arrays:
            payload = self._parse_cut()
            if payload is not None:
                return payload
        return orjson.loads(self.body)

    def _parse_cut(self) -> dict[str, Any] | None:
        """The envelope with its marks replaced by the long strings; None where the cut does not
        fit the body (the plain parse then gives the answer, or the error)."""
        try:
            payload = orjson.loads(self.text)
            values: list[Any] = [
                _string_value(quoted, escaped)
                for quoted, escaped in zip(self.quoted, self.escaped, strict=True)
            ]
        except orjson.JSONDecodeError:
            return None
        for array in self.arrays:
            nested = read_nested(array, MAX_RANK)
            if nested is None:
                return None
            values.append(nested)
        if not isinstance(payload, dict) or not _restore(payload, self.mark, values):
            return None
        return payload


#: What parsing holds for each piece of JSON, by the byte that marks it (parsing_bytes).
_PARSED_COSTS = ((b",", 64), (b"[", 120), (b"{", 640), (b":", 160), (b'"', 32))


def parsing_bytes(text: bytes | bytearray | memoryview) -> int:
    """About what ``orjson.loads``, and the validator after it, hold beyond ``text``, from what
    each piece of JSON costs as measured:

    - a number its object and its slot (some 64 bytes, counted by the commas);
    - a list its object, its slots' spare room and its slot in the list above (some 120): deep
      nesting makes one list an element, and a 12 MB body of them hundreds of MB;
    - an object its dict, and the model the validator may make of it (a V2 input: some 640);
    - an object's member its key's ``str`` and its entry (some 160, counted by the colons);
    - a string its ``str`` object beside its text (some 64, 32 a quote).
    """
    if len(text) < _COUNT_BY_NUMPY:
        # A small body: bytes.count beats NumPy's setup, five times over.
        small = text.tobytes() if isinstance(text, memoryview) else text
        return 2 * len(small) + sum(cost * small.count(mark) for mark, cost in _PARSED_COSTS)
    return 2 * len(text) + sum(cost * _count(text, mark[0]) for mark, cost in _PARSED_COSTS)


def split_json_body(body: bytes | bytearray | memoryview, long_strings: bool = True) -> JsonBody:
    """Find the long string values of a JSON body (memchr speed) and its long nested arrays,
    and cut them out of what is parsed (the arrays only, without ``long_strings``)."""
    whole = memoryview(body)
    if whole.ndim != 1 or whole.format != "B":
        whole = whole.cast("B")  # positions count bytes, and indexing gives them as ints
    if len(whole) < LONG_STRING:
        return JsonBody(body, body, [])
    search = _Search(whole)
    quotes = search.quotes()
    if quotes is None:
        return JsonBody(body, body, [])
    # Without a backslash anywhere no quote is escaped: each one opens or closes a string.
    backslashes = search.find(_BACKSLASH, 0, len(whole)) != -1
    if backslashes:
        quotes = [quote for quote in quotes if _backslashes_before(search.values, quote) % 2 == 0]
    if len(quotes) % 2:
        return JsonBody(body, body, [])  # not JSON: the plain parse says where
    spans = [
        (opening + 1, closing)
        for opening, closing in zip(quotes[::2], quotes[1::2], strict=True)
        if long_strings
        and closing - opening - 1 >= LONG_STRING
        and not _KEY_END.match(whole, closing + 1)
    ]
    arrays = _nested_arrays(search, quotes)
    if not spans and not arrays:
        return JsonBody(body, body, [])
    # A fresh mark each time: a client cannot learn it, so cannot write one into its body.
    mark = f"tensor-ops-view-{secrets.token_hex(16)}-"
    # Strings keep their quotes around the mark; an array becomes a string of the mark.
    cuts = sorted(
        [(opening, closing, f"{mark}{index}") for index, (opening, closing) in enumerate(spans)]
        + [
            (opening, closing, f'"{mark}{len(spans) + index}"')
            for index, (opening, closing) in enumerate(arrays)
        ]
    )
    parts: list[bytes] = []
    start = 0
    for opening, closing, replacement in cuts:
        parts.append(bytes(whole[start:opening]))
        parts.append(replacement.encode())
        start = closing
    parts.append(bytes(whole[start:]))
    escaped = tuple(
        backslashes and search.find(_BACKSLASH, opening, closing) != -1
        for opening, closing in spans
    )
    views = [whole[opening:closing] for opening, closing in spans]
    quoted = tuple(whole[opening - 1 : closing + 1] for opening, closing in spans)
    cut_arrays = tuple(whole[opening:closing] for opening, closing in arrays)
    return JsonBody(body, b"".join(parts), views, escaped, quoted, mark, cut_arrays)


def _nested_arrays(search: "_Search", quotes: list[int]) -> list[tuple[int, int]]:
    """Where the long nested arrays of numbers are: ``[start, end)`` of each member value that
    opens with two brackets, runs to the last ``]`` before the next string, is at least
    ``LONG_STRING`` long and has many lists for its values (where orjson's list a list costs
    more than reading the nesting with NumPy). Whether it is a rectangular array of numbers is
    found when it is read; when it is not, the body is parsed plainly."""
    whole = search.whole
    found: list[tuple[int, int]] = []
    for position, closing in enumerate(quotes[1::2], start=1):
        key_end = _KEY_END.match(whole, closing + 1)
        if key_end is None:
            continue
        value = _SPACES.match(whole, key_end.end())
        start = value.end() if value is not None else key_end.end()
        if start >= len(whole) or whole[start] != _OPEN_BRACKET:
            continue
        inner = _SPACES.match(whole, start + 1)
        second = inner.end() if inner is not None else start + 1
        if second >= len(whole) or whole[second] != _OPEN_BRACKET:
            continue
        limit = quotes[2 * position] if 2 * position < len(quotes) else len(whole)
        last = search.rfind(_CLOSE_BRACKET, start, limit)
        if last == -1 or last + 1 - start < LONG_STRING:
            continue
        span = whole[start : last + 1]
        if 4 * _count(span, _OPEN_BRACKET) >= _count(span, _COMMA):
            found.append((start, last + 1))
    return found


def _backslashes_before(values: np.ndarray[Any, np.dtype[np.uint8]], position: int) -> int:
    """How many backslashes directly precede ``position``: an odd count escapes the byte there.

    Windows doubling up to a bounded size: the cost is that of the run, never a step per
    backslash, however long a run a client sends.
    """
    if position == 0 or values[position - 1] != _BACKSLASH:
        return 0
    end = position
    width = 64
    while end > 0:
        start = max(0, end - width)
        others = np.flatnonzero(values[start:end] != _BACKSLASH)
        if others.size:
            return position - (start + int(others[-1]) + 1)
        end = start
        width = min(2 * width, _STEP)
    return position


def _string_value(quoted: memoryview, escaped: bool) -> memoryview | str:
    """A long string's value: a view of it when JSON would read it byte for byte (no escape,
    printable ASCII only), else what JSON decodes it to (raises on what JSON refuses)."""
    view = quoted[1:-1]
    # As int8, bytes past 0x7f are negative: one reduction finds control characters and
    # non-ASCII bytes (whose UTF-8 JSON must check) at once.
    if not escaped and int(np.frombuffer(view, dtype=np.int8).min()) >= 0x20:
        return view
    # The quotes are the body's own: JSON reads the string in place, no copy of it made.
    text: str = orjson.loads(quoted)
    return text


def _restore(payload: dict[str, Any], mark: str, values: list[Any]) -> bool:
    """Put each value where its mark is; False unless every mark is there exactly once.

    Breadth first, stopping once all are back: marks are normally top-level values, so the
    arrays nested below them (a tensor written as JSON numbers) are never walked.
    """
    left = len(values)
    seen = [False] * left
    pending: deque[dict[str, Any] | list[Any]] = deque([payload])
    while pending:
        node = pending.popleft()
        items: Iterable[tuple[Any, Any]] = (
            node.items() if isinstance(node, dict) else enumerate(node)
        )
        for key, value in items:
            if isinstance(value, dict | list):
                pending.append(value)
            elif isinstance(value, str) and value.startswith(mark):
                index = _mark_index(value, mark, len(values))
                if index is None or seen[index]:
                    return False
                seen[index] = True
                node[key] = values[index]
                left -= 1
                if not left:
                    return True
    return False


def _mark_index(value: str, mark: str, count: int) -> int | None:
    digits = value[len(mark) :]
    if not digits.isdigit() or not digits.isascii() or len(digits) > 9:
        return None
    index = int(digits)
    return index if index < count and f"{mark}{index}" == value else None


class _Search:
    """memchr over a body: ``bytes.find`` for bytes, libc's memchr (through ctypes) for a view of
    any other buffer (a NumPy array), with no copy."""

    def __init__(self, whole: memoryview) -> None:
        self.whole = whole
        obj = whole.obj
        self.exact: bytes | bytearray | None = (
            obj if isinstance(obj, bytes | bytearray) and len(obj) == len(whole) else None
        )
        self.values = np.frombuffer(whole, dtype=np.uint8)
        self.base: int = self.values.ctypes.data

    def find(self, byte: int, start: int, end: int) -> int:
        """The first position of ``byte`` in ``[start, end)``, or -1."""
        if start >= end:
            return -1
        if self.exact is not None:
            return self.exact.find(bytes((byte,)), start, end)
        if _MEMCHR is not None:
            hit = _MEMCHR(self.base + start, byte, end - start)
            return -1 if hit is None else int(hit) - self.base
        for step in range(start, end, _STEP):
            hits = np.flatnonzero(self.values[step : min(step + _STEP, end)] == byte)
            if hits.size:
                return step + int(hits[0])
        return -1

    def rfind(self, byte: int, start: int, end: int) -> int:
        """The last position of ``byte`` in ``[start, end)``, or -1 (from the end, a bounded
        piece at a time)."""
        if self.exact is not None:
            return self.exact.rfind(bytes((byte,)), start, end)
        while end > start:
            begin = max(start, end - _STEP)
            hits = self.values[begin:end] == byte
            if hits.any():
                return begin + len(hits) - 1 - int(hits[::-1].argmax())
            end = begin
        return -1

    def quotes(self) -> list[int] | None:
        """Every quote's position; None past ``_MAX_QUOTES``."""
        quotes: list[int] = []
        size = len(self.whole)
        position = self.find(_QUOTE, 0, size)
        while position != -1:
            quotes.append(position)
            if len(quotes) > _MAX_QUOTES:
                return None
            position = self.find(_QUOTE, position + 1, size)
        return quotes


def _count(data: bytes | bytearray | memoryview, byte: int) -> int:
    if len(data) < _COUNT_BY_NUMPY and not isinstance(data, memoryview):
        return data.count(bytes((byte,)))
    # NumPy compares 7-8 bytes a nanosecond; bytes.count of one byte goes one at a time (a
    # tenth of a millisecond for each 100 KB, twice a body).
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
