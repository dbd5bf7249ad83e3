"""The JSON fast path against a full parser, over many legal (and broken) encodings of requests."""

import base64
import os
import random
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.codecs.json_body import LONG_STRING, JsonBody, split_json_body
from app.errors import Fault, ServiceError

# A fixed, bounded run in CI; TENSOR_OPS_FUZZ_EXAMPLES=20000 explores fresh examples for longer.
_FUZZ = os.environ.get("TENSOR_OPS_FUZZ_EXAMPLES")
_SETTINGS = settings(
    max_examples=int(_FUZZ) if _FUZZ else 200,
    derandomize=not _FUZZ,
    database=None,  # no .hypothesis directory left in the working tree
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Base64 of this many bytes is just long enough to be left in the body.
_LONG_BYTES = 3 * LONG_STRING // 4
# Each character JSON gives a two-character escape, and that escape.
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "/": "\\/",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_WHITESPACE = " \t\n\r"
# What JSON requires escaped in a string.
_REQUIRED = re.compile('[\x00-\x1f"\\\\]')


# -- What a request may hold ------------------------------------------------------------------


@st.composite
def base64_text(draw: st.DrawFn) -> str:
    """Base64 of random bytes: long enough to be cut out of the body, or short."""
    seed = draw(st.integers(0, 2**32 - 1))
    size = draw(st.one_of(st.integers(0, 64), st.integers(_LONG_BYTES - 3, _LONG_BYTES + 3000)))
    return base64.b64encode(random.Random(seed).randbytes(size)).decode()


_CHARACTERS = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from('"\\/\n\t\r\b\f\x00\x1f\x7f\u2028é€😀'),
)
_SHORT_TEXT = st.text(_CHARACTERS, max_size=12)
# A long string that is no base64: quotes, backslashes and non-ASCII all through it.
_LONG_TEXT = st.text(_CHARACTERS, min_size=1, max_size=8).map(
    lambda text: text * (LONG_STRING // len(text) + 1)
)
_INTS = st.integers(-(2**63), 2**63 - 1)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    _INTS,
    st.floats(allow_nan=False, allow_infinity=False),
    _SHORT_TEXT,
    base64_text(),
)
_JSON = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_SHORT_TEXT, children, max_size=4)
    ),
    max_leaves=12,
)
_INDEX = st.one_of(_INTS, st.lists(st.integers(-10, 10), max_size=4))


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    """A request as a client would mean it: ``data`` and its fields, and odd extras."""
    request: dict[str, Any] = draw(st.dictionaries(_SHORT_TEXT, _JSON, max_size=3))
    optional = {
        "shift": _INDEX,
        "axes": _INDEX,
        "indices": base64_text(),
        "note": _SHORT_TEXT,
        "text": _LONG_TEXT,
        "nested": st.dictionaries(_SHORT_TEXT, _JSON, max_size=3),
        # A long string at the end of a long list.
        "many": st.tuples(st.lists(_INTS, max_size=80), base64_text()).map(
            lambda parts: [*parts[0], parts[1]]
        ),
    }
    for name, strategy in optional.items():
        if draw(st.booleans()):
            request[name] = draw(strategy)
    if draw(st.integers(0, 4)) == 0:
        # A long key: it must stay a key.
        request[draw(st.one_of(base64_text(), _LONG_TEXT))] = draw(_JSON)
    request["data"] = draw(base64_text())
    return request


# -- A JSON writer with every freedom the grammar leaves ----------------------------------------


@dataclass(frozen=True)
class Style:
    """How one body is written; the choices inside it come from a seeded generator."""

    seed: int
    #: Chance of whitespace in each gap between tokens.
    space: float
    #: Chance that a character is written as an escape (``\\uXXXX`` or its two-character form).
    escape: float
    #: Chance that a ``/`` is written ``\\/`` (PHP's json_encode writes every one so).
    slash: float
    #: Whether keys come in a shuffled order.
    shuffle: bool
    #: Chance that a key is written twice, a decoy value first (the last one wins).
    duplicate: float


_STYLES = st.builds(
    Style,
    seed=st.integers(0, 2**32 - 1),
    space=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    escape=st.sampled_from([0.0, 0.0, 0.001, 0.05, 1.0]),
    slash=st.sampled_from([0.0, 0.5, 1.0]),
    shuffle=st.booleans(),
    duplicate=st.sampled_from([0.0, 0.0, 0.2]),
)


class Writer:
    """Writes a value as JSON text, with random (but legal) whitespace, order and escapes."""

    def __init__(self, style: Style) -> None:
        self.style = style
        self.random = random.Random(style.seed)

    def document(self, value: Any) -> bytes:
        return (self.gap() + self.value(value) + self.gap()).encode()

    def gap(self) -> str:
        if self.random.random() >= self.style.space:
            return ""
        return "".join(self.random.choice(_WHITESPACE) for _ in range(self.random.randint(1, 4)))

    def value(self, value: Any) -> str:
        if value is None or isinstance(value, bool | int | float):
            return orjson.dumps(value).decode()
        if isinstance(value, str):
            return self.string(value)
        if isinstance(value, list):
            items = [self.gap() + self.value(item) + self.gap() for item in value]
            return "[" + (",".join(items) if items else self.gap()) + "]"
        members = list(value.items())
        if self.style.shuffle:
            self.random.shuffle(members)
        written = []
        for key, item in members:
            if self.random.random() < self.style.duplicate:
                written.append(self.member(key, self.decoy()))
            written.append(self.member(key, item))
        return "{" + (",".join(written) if written else self.gap()) + "}"

    def member(self, key: str, value: Any) -> str:
        gaps = [self.gap() for _ in range(4)]
        return f"{gaps[0]}{self.string(key)}{gaps[1]}:{gaps[2]}{self.value(value)}{gaps[3]}"

    def decoy(self) -> Any:
        return self.random.choice([0, "decoy", "D" * LONG_STRING, [1, "x"], {"a": None}])

    def string(self, text: str) -> str:
        # The characters JSON requires escaped, each in one of its legal forms for this string.
        table = {
            code: self.random.choice([_SHORT_ESCAPES.get(chr(code), ""), self.unicode(code)])
            or self.unicode(code)
            for code in [*range(0x20), ord('"'), ord("\\")]
        }
        if self.style.slash == 1.0:
            table[ord("/")] = "\\/"
        chosen: dict[int, str] = {}
        if 0.0 < self.style.slash < 1.0:
            for found in re.finditer("/", text):
                if self.random.random() < self.style.slash:
                    chosen[found.start()] = "\\/"
        if self.style.escape == 1.0:
            return '"' + self.all_escaped(text) + '"'
        if self.style.escape > 0.0:
            count = min(len(text), int(len(text) * self.style.escape) + self.random.randint(0, 2))
            for position in self.random.sample(range(len(text)), count):
                chosen[position] = self.escaped(text[position])
        # Most text (all base64) holds nothing JSON requires escaped: no lookup per character.
        plain = _REQUIRED.search(text) is None
        parts = ['"']
        last = 0
        for position in [*sorted(chosen), len(text)]:
            segment = text[last:position]
            if not plain:
                segment = segment.translate(table)
            elif self.style.slash == 1.0:
                segment = segment.replace("/", "\\/")
            parts.append(segment)
            parts.append(chosen.get(position, ""))
            last = position + 1
        parts.append('"')
        return "".join(parts)

    def escaped(self, character: str) -> str:
        """One character as an escape: its two-character form, or ``\\uXXXX`` (a surrogate pair
        past the BMP)."""
        short = _SHORT_ESCAPES.get(character)
        if short and self.random.random() < 0.5:
            return short
        code = ord(character)
        if code < 0x10000:
            return self.unicode(code)
        code -= 0x10000
        return self.unicode(0xD800 + (code >> 10)) + self.unicode(0xDC00 + (code & 0x3FF))

    def all_escaped(self, text: str) -> str:
        """Every character as ``\\uXXXX``: UTF-16 code units, so surrogate pairs past the BMP."""
        digits = text.encode("utf-16-be").hex()
        if self.random.random() < 0.5:
            digits = digits.upper()
        units = np.frombuffer(digits.encode(), dtype=np.uint8).reshape(-1, 4)
        written = np.empty((len(units), 6), dtype=np.uint8)
        written[:, 0] = ord("\\")
        written[:, 1] = ord("u")
        written[:, 2:] = units
        return written.tobytes().decode()

    def unicode(self, code: int) -> str:
        digits = f"{code:04x}"
        return "\\u" + (digits.upper() if self.random.random() < 0.5 else digits)


# -- The comparison ----------------------------------------------------------------------------


def as_text(value: Any) -> Any:
    """The parse with each view of the body read as the text it holds."""
    if isinstance(value, memoryview):
        return bytes(value).decode()
    if isinstance(value, dict):
        return {key: as_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_text(item) for item in value]
    return value


def bodies(body: bytes) -> list[bytes | bytearray | memoryview]:
    """One body as each kind of buffer a route may hold: bytes, bytearray, a NumPy buffer, and
    the start of a larger one (a /v2 body's JSON part, binary data after it)."""
    larger = np.frombuffer(body + b'"\\\xff', dtype=np.uint8).copy()
    return [
        body,
        bytearray(body),
        np.frombuffer(body, dtype=np.uint8).copy().data,
        larger.data[: len(body)],
    ]


def assert_same_as_orjson(body: bytes) -> JsonBody | None:
    """The fast path gives what ``orjson.loads`` gives, or fails where it fails, as it should;
    the split of the body when it is a JSON object."""
    try:
        expected = orjson.loads(body)
    except orjson.JSONDecodeError:
        expected = orjson.JSONDecodeError
    for buffer in bodies(body):
        if expected is orjson.JSONDecodeError:
            with pytest.raises(ServiceError) as caught:
                split_json_body(buffer).parse()
            assert caught.value.kind is Fault.JSON_INVALID
            assert caught.value.status == 400
        elif not isinstance(expected, dict):
            with pytest.raises(ServiceError) as caught:
                split_json_body(buffer).parse()
            assert caught.value.kind is Fault.INVALID_FIELD
            assert caught.value.status == 422
        else:
            assert as_text(split_json_body(buffer).parse()) == expected
    return split_json_body(body) if isinstance(expected, dict) else None


def record(parsed: JsonBody | None) -> None:
    """What the run covered (pytest --hypothesis-show-statistics)."""
    if parsed is None:
        event("refused")
        return
    event(f"long strings cut: {min(len(parsed.views), 2)}")
    event(f"escaped long strings: {min(sum(parsed.escaped), 2)}")


@_SETTINGS
@given(requests(), _STYLES)
def test_every_encoding_of_a_request_parses_as_a_full_parser_reads_it(
    request: dict[str, Any], style: Style
) -> None:
    body = Writer(style).document(request)
    assert orjson.loads(body) is not None  # the writer writes JSON
    if style.duplicate == 0.0:
        assert orjson.loads(body) == request
    record(assert_same_as_orjson(body))


_BREAKERS = [b'"', b"\\", b"\x00", b"\x1f", b"\n", b" ", b"}", b"]", b",", b":", b"\xff", b"\xc3"]


@_SETTINGS
@given(requests(), _STYLES, st.integers(0, 2**32 - 1))
def test_a_broken_body_fails_as_a_full_parser_fails(
    request: dict[str, Any], style: Style, seed: int
) -> None:
    body = bytearray(Writer(style).document(request))
    chance = random.Random(seed)
    for _ in range(chance.randint(1, 3)):
        position = chance.randrange(len(body) + 1)
        edit = chance.randrange(4)
        if edit == 0:
            del body[position : position + 1]
        elif edit == 1:
            body[position:position] = chance.choice(_BREAKERS)
        elif edit == 2:
            body[position : position + 1] = chance.choice(_BREAKERS)
        else:
            del body[position:]
    record(assert_same_as_orjson(bytes(body)))


# -- Regressions -------------------------------------------------------------------------------


def long_base64() -> str:
    # Bytes whose base64 starts "AAAA" (zeros) and has many '/' (0xff bytes encode to "////").
    raw = bytes(30) + random.Random(7).randbytes(_LONG_BYTES) + b"\xff" * 3000
    return base64.b64encode(raw).decode()


def test_php_escaped_slashes_in_base64_decode_to_the_same_text() -> None:
    data = long_base64()
    body = orjson.dumps({"data": data, "shift": 1, "axes": 0}).replace(b"/", b"\\/")
    assert body.count(b"\\/") >= 1000
    for buffer in bodies(body):
        payload = split_json_body(buffer).parse()
        assert payload["data"] == data
        assert base64.b64decode(payload["data"]) == base64.b64decode(data)
    assert_same_as_orjson(body)
    # Other spellings of the same text: \u002F, and \\ written as itself.
    spelled = orjson.dumps({"data": data, "note": "a\\b"}).replace(b"/", b"\\u002F")
    assert split_json_body(spelled).parse() == {"data": data, "note": "a\\b"}


def test_escaped_quotes_are_not_delimiters_however_many_backslashes_precede_them() -> None:
    for run in range(6):
        text = "A" * LONG_STRING + "\\" * run + '"' + "B"
        body = orjson.dumps({"data": text, "next": "\\" * run + '"', "shift": 1})
        assert_same_as_orjson(body)
        assert split_json_body(body).parse()["data"] == text


def test_a_long_key_stays_a_key() -> None:
    key = "K" * LONG_STRING
    body = orjson.dumps({key: 1, "data": long_base64()})
    parsed = split_json_body(body)
    assert len(parsed.views) == 1  # only the value is cut
    payload = parsed.parse()
    assert key in payload
    assert payload[key] == 1
    assert not any(name.startswith("tensor-ops-view") for name in payload)
    spaced = body.replace(b'":', b'" \n\t :')
    assert as_text(split_json_body(spaced).parse()) == orjson.loads(body)


def test_a_forged_mark_is_returned_as_written() -> None:
    data = long_base64()
    learned = split_json_body(orjson.dumps({"data": data})).mark
    for forged in [f"{learned}0", f"{learned}1", "tensor-ops-view-" + "0" * 32 + "-0"]:
        body = orjson.dumps({"data": data, "note": forged, "list": [forged]})
        payload = split_json_body(body).parse()
        assert payload["note"] == forged
        assert payload["list"] == [forged]
        assert bytes(payload["data"]) == data.encode()


def test_a_million_backslashes_parse_in_bounded_time() -> None:
    note = "\\" * 1_000_000 + '"' + "\\" * 999_999 + "/"
    body = orjson.dumps({"data": long_base64(), "note": note, "more": ["\\" * 4096] * 100})
    assert body.count(b"\\") > 2_000_000
    assert_same_as_orjson(body)
    assert split_json_body(body).parse()["note"] == note


def test_long_strings_are_found_in_lists_of_any_length_and_in_nested_objects() -> None:
    data = long_base64()
    body = orjson.dumps({"many": [*range(100), data], "deep": {"a": [{"b": data}]}})
    payload = split_json_body(body).parse()
    assert isinstance(payload["many"][100], memoryview)
    assert isinstance(payload["deep"]["a"][0]["b"], memoryview)
    assert as_text(payload) == orjson.loads(body)


def test_a_long_string_json_refuses_is_refused() -> None:
    data = long_base64()
    for bad in [b"\x01", b"\xff", b"\\x", b"\\u12", b"\\ud800"]:
        body = orjson.dumps({"data": data}).replace(b"AAAA", b"AA" + bad + b"AA", 1)
        assert b"AA" + bad in body
        assert_same_as_orjson(body)


def test_a_long_string_of_other_text_is_json_decoded() -> None:
    text = "é😀\u2028" * LONG_STRING
    body = orjson.dumps({"data": text})
    assert split_json_body(body).parse()["data"] == text


def test_a_long_string_dropped_by_a_duplicate_key_is_no_problem() -> None:
    data = long_base64()
    body = b'{"data": "' + data.encode() + b'", "data": 1}'
    assert split_json_body(body).parse() == {"data": 1}


def test_errors_come_from_the_one_error_root() -> None:
    with pytest.raises(ServiceError) as caught:
        split_json_body(b"[" + b'"' + b"A" * LONG_STRING + b'"]').parse()
    assert caught.value.kind is Fault.INVALID_FIELD
    assert caught.value.problems[0].loc == ("body",)
    assert caught.value.problems[0].msg == "body must be a JSON object, got list"
    with pytest.raises(ServiceError) as caught:
        split_json_body(b'{"data": "' + b"A" * LONG_STRING).parse()
    assert caught.value.kind is Fault.JSON_INVALID
    assert caught.value.problems[0].msg.startswith("body is not valid JSON: ")
    assert "AAAA" not in caught.value.problems[0].msg
