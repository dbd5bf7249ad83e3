"""Grammars of structured but wrong inputs: ``.npy`` files piece by piece, JSON values, header
values. Each strategy builds something close to legal, then bends one part of it."""

import ast
import json
import random
import struct
import warnings
from typing import Any

import numpy as np
from hypothesis import strategies as st

# Re-exported: the fuzz modules take every body builder from here.
from tests.support import b64 as b64  # noqa: PLC0414
from tests.support import npy_bytes as npy_bytes  # noqa: PLC0414
from tests.support import zip_bytes

# -- numbers that sit on an edge -----------------------------------------------------------------

#: Dimensions and sizes at the edges that matter: 0, small, the limits, NumPy's, 64-bit, beyond.
EDGE_SIZES = [
    0, 1, 2, 3, 4, 7, 8, 64, 65, 255, 256, 4096, 2**16, 2**20,
    2**31 - 1, 2**31, 2**32, 2**40, 2**53 + 1, 2**61, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64,
    2**93, 10**30,
]  # fmt: skip
SIZES = st.one_of(st.sampled_from(EDGE_SIZES), st.integers(0, 9), st.integers(0, 2**70))
#: Integers as JSON may carry them, and past what 64 bits hold.
INTS = st.one_of(
    st.sampled_from([*EDGE_SIZES, *(-size for size in EDGE_SIZES), -1]),
    st.integers(-(2**65), 2**65),
)


def _rng(seed: int) -> random.Random:
    return random.Random(seed)


# -- .npy files ----------------------------------------------------------------------------------

_GOOD_DESCRS = [
    "<f4", "<f8", "<f2", "|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8",
    ">f4", ">i8", ">u2", "|V2", "<V2", "bool", "int", "float", "f4", "i8", "?", "b", "B",
]  # fmt: skip
#: Element types of indices (shift, axes, indices, axis): integers mostly, as the specs want.
_INDEX_DESCRS = ["<i8", "<i4", "<i8", "<i4", "|i1", "<u8", ">i8", "<u2", "|u1", ">i4", "<f4"]
_ODD_DESCRS = [
    "", "O", "|O", "<U3", "|S0", "|S2", "V0", "<V4", "<c8", "<c16", "M8[s]", "<m8[ns]", "a", "g",
    "f16", "zz", "<f4 ", " <f4", "<f4,<f4", "(2,)f4", "(70,)f4", "i" * 300, "<f\u00e9", "\x00",
    "bfloat16", "M8[10000000000000000000000s]", "<q", "=f4", "|f4", "<i16",
]  # fmt: skip
_NOT_STRINGS = [
    "[('a', '<f4')]", "[('a', '<f4'), ('b', '|O')]", "[('', '<i4', (2,))]", "None", "4",
    "0x" + "f" * 4000, "b'<f4'", "{'a': 1}", "('<f4',)", "[" * 50 + "]" * 50,
]  # fmt: skip
_ODD_DIMENSIONS = [
    "1.0", "True", "False", "None", "'3'", "(2,)", "[2]", "1j", "...", "-0", "+3", "2e3",
    "-1", "-9223372036854775808", "-" + "9" * 40, "0x" + "f" * 4000, "-0x" + "f" * 4000,
]  # fmt: skip
_ODD_SHAPES = ["[2, 3]", "3", "None", "((2,),)", "'(2,)'", "{2}", "(2, (3,))", "range(3)"]
_ODD_FORTRAN = ["0", "1", "'False'", "None", "[]", "0x" + "f" * 4000, "1.0", "b''", "(False,)"]
_ODD_KEYS = ['"descr"', "b'descr'", "'Descr'", "'shape '", "('shape',)", "1", "None"]
_NOT_DICTS = [
    "__import__('os').system('true')",
    "[1, 2]",
    "dict(descr='<f4', fortran_order=False, shape=())",
    "(" * 3000 + ")" * 3000,
    "{" * 200 + "}" * 200,
    "",
    "{**{'descr': '<f4'}}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} + 1",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)",
]
_KEYS = ["'descr'", "'fortran_order'", "'shape'"]
_VERSIONS = [(1, 0), (2, 0), (3, 0)]
_ODD_VERSIONS = [(0, 0), (4, 0), (1, 1), (2, 5), (255, 255)]
_PADDING = [" ", "\t", "\n", "\x00", "\x0c", "\xe9", "\xff", "\r"]
_ODD_MAGIC = [b"\x93NUMPX", b"\x93NUMP", b"", b"PK\x03\x04", b"\x93numpy", b"NUMPY"]

#: Which piece of a file is bent: none (an edge case of a valid file) most often.
BENDS = [
    *["none"] * 12, "descr", "fortran_order", "shape", "shape", "keys", "literal", "magic",
    "version", "header_length", "padding", "payload", "truncated",
]  # fmt: skip
_BEND = st.sampled_from(BENDS)
_RANKS = st.one_of(st.integers(0, 4), st.sampled_from([5, 8, 31, 32, 33, 63, 64, 65, 100, 900]))
_DIMENSION_STYLES = st.sampled_from([0, 0, 0, 0, 1, 2, 3])
_SHAPE_KINDS = st.sampled_from(["small", "empty", "empty", "any"])


def _size_literal(size: int, style: int) -> str:
    """A non-negative integer as a Python literal: decimal, hex, with underscores, or octal."""
    if style == 1:
        return hex(size)
    if style == 2:
        return f"{size:_}"
    if style == 3:
        return oct(size)
    return str(size)


def _shape_literal(draw: st.DrawFn, bend: str) -> str:
    """A tuple of edge sizes, often with a 0 beside huge ones, of any rank (65 and more too);
    bent, a dimension or the whole value is no tuple of non-negative integers."""
    rank = draw(_RANKS)
    kind = draw(_SHAPE_KINDS)
    if rank > 8:
        parts = [draw(st.sampled_from(["1", "0", "2"]))] * rank
        if draw(st.booleans()):
            parts[draw(st.integers(0, rank - 1))] = _size_literal(draw(SIZES), 0)
    elif kind == "small":  # a tensor that holds data
        parts = [str(draw(st.integers(1, 4))) for _ in range(rank)]
    else:
        parts = [_size_literal(draw(SIZES), draw(_DIMENSION_STYLES)) for _ in range(rank)]
        if parts and kind == "empty":  # a 0 beside sizes of any edge: no data, a legal header?
            parts[draw(st.integers(0, rank - 1))] = "0"
    if bend == "shape":
        in_a_dimension = draw(st.booleans())
        if parts and in_a_dimension:
            parts[draw(st.integers(0, len(parts) - 1))] = draw(st.sampled_from(_ODD_DIMENSIONS))
        else:
            return draw(st.sampled_from(_ODD_SHAPES))
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _header_literal(draw: st.DrawFn, bend: str, index: bool) -> str:
    """The header's dict literal, as NumPy writes it or with one part bent: a value, a key (one
    missing, doubled, renamed), the order, or no dict at all."""
    if bend == "literal":
        return draw(st.sampled_from(_NOT_DICTS))
    if bend == "descr":
        descr = draw(st.sampled_from(_ODD_DESCRS).map(repr) | st.sampled_from(_NOT_STRINGS))
    else:
        descr = repr(draw(st.sampled_from(_INDEX_DESCRS if index else _GOOD_DESCRS)))
    fortran = draw(st.sampled_from(_ODD_FORTRAN)) if bend == "fortran_order" else "False"
    if bend == "none" and draw(st.integers(0, 3)) == 0:
        fortran = "True"
    entries = [[_KEYS[0], descr], [_KEYS[1], fortran], [_KEYS[2], _shape_literal(draw, bend)]]
    if bend == "keys":
        mutation = draw(st.integers(0, 2))
        if mutation == 0:
            entries.pop(draw(st.integers(0, 2)))
        elif mutation == 1:
            entries.append([draw(st.sampled_from(["'extra'", *_KEYS])), "1"])
        else:
            entries[draw(st.integers(0, 2))][0] = draw(st.sampled_from(_ODD_KEYS))
    if draw(st.booleans()):
        entries = [entries[i] for i in draw(st.permutations(range(len(entries))))]
    body = ", ".join(f"{key}: {value}" for key, value in entries)
    return "{" + body + draw(st.sampled_from([", }", "}", ",}", " }"]))


def honest_payload_size(literal: str) -> int | None:
    """The payload bytes a header literal announces, when it parses and is small; else None."""
    try:
        header = ast.literal_eval(literal.strip())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated aliases ('a')
            size = np.dtype(header["descr"]).itemsize
        shape = header["shape"]
        if not all(type(dimension) is int and dimension >= 0 for dimension in shape):
            return None
        if 0 in shape:
            return 0
        for dimension in shape:
            size *= dimension
            if size > 4096:  # stop early: a product of huge numbers takes long
                return None
    except Exception:
        return None
    return int(size)


@st.composite
def npy_files(draw: st.DrawFn, index: bool = False) -> bytes:
    """An ``.npy`` file built piece by piece (magic, version, header length, the header's dict,
    its padding, the payload) with at most one piece bent; the others tell the truth, so that
    the bent piece is what the reader meets. ``index``: of an integer type, mostly."""
    bend = draw(_BEND)
    literal = _header_literal(draw, bend, index)
    major, minor = draw(st.sampled_from(_ODD_VERSIONS if bend == "version" else _VERSIONS))
    prefix = 10 if major == 1 else 12
    if bend == "padding":
        padding = "".join(draw(st.lists(st.sampled_from(_PADDING), max_size=70)))
    else:  # as NumPy writes it: spaces to a multiple of 64, then a newline
        padding = " " * (-(prefix + len(literal) + 1) % 64) + "\n"
    text = (literal + padding).encode("utf-8" if major == 3 else "latin-1", "replace")
    length = len(text)
    if bend == "header_length":
        length += draw(st.sampled_from([-length, -1, 1, 10_000, 10_001, 0xFFFF, 2**32 - 1]))
        length = max(0, min(length, 0xFFFF if major == 1 else 2**32 - 1))
    size_field = struct.pack("<H" if major == 1 else "<I", length)
    magic = draw(st.sampled_from(_ODD_MAGIC)) if bend == "magic" else b"\x93NUMPY"
    honest = honest_payload_size(literal)
    if honest is None or bend == "payload":
        size = (honest or 0) + draw(st.sampled_from([-8, -1, 1, 2, 8, 64, 4096]))
    else:
        size = honest
    payload = _rng(draw(st.integers(0, 2**32 - 1))).randbytes(max(size, 0))
    raw = magic + bytes((major, minor)) + size_field + text + payload
    if bend == "truncated":
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    return raw


# .npz bodies of raw members: unlike tests.support.npz_bytes (arrays, written by np.savez), the
# members are bytes as they are (the bent .npy files above), each named ``<name>.npy``.
def npz_bytes(members: dict[str, bytes]) -> bytes:
    """An archive as ``np.savez`` writes one (stored members), with members of any bytes."""
    return zip_bytes({f"{name}.npy": raw for name, raw in members.items()})


# -- JSON ----------------------------------------------------------------------------------------

_TEXT = st.one_of(
    st.sampled_from(["", "data", "output", "x" * 300, "\u00e9", "\x00", "'", '"', "\\"]),
    st.text(max_size=8),
)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    _TEXT,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_TEXT, children, max_size=3),
    max_leaves=10,
)


def json_text(value: Any) -> bytes:
    """``value`` as JSON text; integers of any size, and NaN and Infinity as Python writes them
    (a body the service must refuse, not choke on)."""
    return json.dumps(value).encode("utf-8", "surrogatepass")


# -- header values -------------------------------------------------------------------------------

#: Lengths of digit strings, past the 4300 digits Python's int() reads.
LONG_NUMBERS = [19, 20, 40, 4300, 4301, 9000]
#: Digits that are not ASCII: str.isdigit() says yes to all, int() to only some.
ODD_DIGITS = [
    "\u00b2",
    "\u00b3",
    "\u00b9",
    "\u0661\u0662",
    "\uff11",
    "\u0969",
    "\u2082",
    "\U0001d7d9",
]


_ODD_NUMBERS = [
    b"",
    b" ",
    b"-1",
    b"+1",
    b" 1",
    b"1 ",
    b"0x10",
    b"1e3",
    b"1.0",
    b"1,1",
    b"\xff",
    b"0" * 50 + b"1",
    b"\t2",
    b"NaN",
]
_NUMBER_CHOICES = st.integers(0, 11)
_NUMBER_SHIFTS = st.sampled_from([-1, 1, 10**6, 2**31, 0])
_ODD_DIGIT_BYTES = st.sampled_from(
    [digits.encode("utf-8") for digits in ODD_DIGITS]
    + [
        digits.encode("latin-1")
        for digits in ODD_DIGITS
        if digits.isascii() or ord(digits[0]) < 256
    ]
)
_LONG_DIGITS = st.sampled_from([b"9" * size for size in LONG_NUMBERS])
_EDGE_NUMBERS = st.sampled_from([str(size).encode() for size in EDGE_SIZES])
_ODD_NUMBER_STRATEGY = st.sampled_from(_ODD_NUMBERS)


def number_header_value(draw: st.DrawFn, honest: int) -> bytes:
    """A header that should hold a byte count: ``honest``, or a number that is not one (to be
    called inside a composite strategy)."""
    choice = draw(_NUMBER_CHOICES)
    if choice <= 3:
        return str(honest).encode()
    if choice == 4:
        return str(max(0, honest + draw(_NUMBER_SHIFTS))).encode()
    if choice == 5:
        return draw(_ODD_DIGIT_BYTES)
    if choice == 6:
        return draw(_LONG_DIGITS)
    if choice == 7:
        return draw(_EDGE_NUMBERS)
    if choice == 8:
        return str(honest).encode() + b"\x00"
    return draw(_ODD_NUMBER_STRATEGY)


def odd_text_values() -> st.SearchStrategy[bytes]:
    """Header values of every odd kind: empty, long, non-ASCII, control characters."""
    return st.one_of(
        st.sampled_from(
            [
                b"",
                b" ",
                b"\xff\xfe",
                b"\xc3\xa9",
                b"\x00",
                b"\x7f",
                b"a" * 10_000,
                b";;;",
                b"=",
                b"*/*",
                b",",
                b"\t",
            ]
        ),
        st.binary(max_size=24),
    )
