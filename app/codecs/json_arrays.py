"""Nested JSON arrays of numbers read without a Python list per nested list.

``orjson.loads`` makes a list object for every list of a nested array: 200,000 elements nested
30 deep are six million lists, 2.5 s with the interpreter lock held (no other request, not even
``/health``, is answered meanwhile) and hundreds of MB. A rectangular array's nesting says
nothing its shape does not, so here the nesting is read by NumPy (vectorised, the lock
released): the shape is worked out, the structure checked against the one that shape makes,
and only the flat run of values is left for orjson, which reads each value exactly as it would
have in place. Anything else (a string, an object, a ragged array, whitespace between two
values, a token out of place) is not read here: the caller parses the body plainly and gets
orjson's answer, or its error.
"""

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

# Character classes.
_BAD, _SPACE, _VALUE, _OPEN, _CLOSE, _COMMA = range(6)
_CLASSES = np.full(256, _BAD, dtype=np.int8)
# What a number or a literal (true, false, null) is written with; anything else (a quote, a
# brace, a colon) leaves the array to the plain parse.
for _byte in b"0123456789+-.eEtruefalsn":
    _CLASSES[_byte] = _VALUE
for _byte in b" \t\n\r":
    _CLASSES[_byte] = _SPACE
_CLASSES[ord("[")] = _OPEN
_CLASSES[ord("]")] = _CLOSE
_CLASSES[ord(",")] = _COMMA
_TABLE = _CLASSES.tobytes()
# Which token may follow which (value runs count as one token): after "[" a value, "[" or
# "]"; after "," a value or "["; after a value "," or "]"; after "]" "," or "]".
_FOLLOWS = np.zeros((6, 6), dtype=bool)
for _before, _after in (
    (_OPEN, _VALUE),
    (_OPEN, _OPEN),
    (_OPEN, _CLOSE),
    (_COMMA, _VALUE),
    (_COMMA, _OPEN),
    (_VALUE, _COMMA),
    (_VALUE, _CLOSE),
    (_CLOSE, _COMMA),
    (_CLOSE, _CLOSE),
):
    _FOLLOWS[_before, _after] = True
#: What flattening holds at its peak, per byte of the array's text: classes, masks, depths
#: (four bytes each) and the flat copy.
FLATTEN_BYTES_PER_BYTE = 12


@dataclass(frozen=True)
class FlatArray:
    """A nested JSON array as its shape and its values in C order (as orjson read them)."""

    shape: tuple[int, ...]
    values: list[Any]


def read_nested(span: bytes | bytearray | memoryview, max_depth: int) -> FlatArray | None:
    """The rectangular nested array ``span`` holds (all of it, brackets included), read as
    ``orjson.loads`` would read it; None for anything else, or nested past ``max_depth``."""
    flat = flatten(span, max_depth)
    if flat is None:
        return None
    text, shape = flat
    try:
        values = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(values, list) or len(values) != math.prod(shape):
        return None
    return FlatArray(shape, values)


def flatten(
    span: bytes | bytearray | memoryview, max_depth: int
) -> tuple[bytes, tuple[int, ...]] | None:
    """The values of the rectangular nested array ``span`` as one flat JSON array's text, and
    its shape; None where ``span`` is not exactly such an array (the plain parse decides)."""
    raw: npt.NDArray[np.uint8] = np.frombuffer(span, dtype=np.uint8)
    # Classified by bytes.translate (C, a byte at a time): NumPy's table lookup would index
    # with 8-byte integers.
    kinds = np.frombuffer(bytes(span).translate(_TABLE), dtype=np.int8)
    if kinds.size < 2 or bool((kinds == _BAD).any()):
        return None
    chars = raw
    spaces = kinds == _SPACE
    if spaces.any():
        # Whitespace between two value characters separates what JSON reads as two values
        # (an error): left to the plain parse. (Masks only: no index arrays, 8 bytes each.)
        after_space = np.zeros_like(spaces)
        after_space[1:] = spaces[:-1]
        kept = ~spaces
        del spaces
        kinds = kinds[kept]
        chars = raw[kept]
        after_space = after_space[kept]
        del kept
        split = after_space[1:] & (kinds[1:] == _VALUE) & (kinds[:-1] == _VALUE)
        if bool(split.any()):
            return None
        del after_space, split
    if kinds[0] != _OPEN or kinds[-1] != _CLOSE:
        return None
    opens = kinds == _OPEN
    closes = kinds == _CLOSE
    # The nesting depth after each character: at least 1 until the last closes the array.
    steps = opens.view(np.int8) - closes.view(np.int8)
    depth = np.cumsum(steps, dtype=np.int32)
    del steps
    if depth[-1] != 0 or (kinds.size > 1 and int(depth[:-1].min()) < 1):
        return None
    rank = int(depth.max())
    if rank > max_depth:
        return None
    values = kinds == _VALUE
    firsts = values.copy()
    firsts[1:] &= ~values[:-1]
    # Every value sits at the deepest level (else the array is ragged, or a number is a list).
    if bool((depth[firsts] != rank).any()):
        return None
    # The tokens in order, each value run once: each must follow the one before as JSON says.
    tokens = kinds[~values | firsts]
    if not _tokens_follow(tokens):
        return None
    del tokens
    shape = _first_shape(kinds, depth, rank)
    # The structure the shape makes, character by character (each value one "v"), must be the
    # one sent: then every list at every level has the length of the first.
    skeleton = np.where(values, np.uint8(ord("v")), chars)[~values | firsts]
    if _skeleton_length(shape) != skeleton.size or skeleton.tobytes() != _skeleton(shape):
        return None
    del skeleton, depth, firsts, opens
    if 0 in shape:
        return b"[]", shape
    # Without its brackets the array is its values and the commas between them, in order.
    flat = chars[~(kinds == _OPEN) & ~closes]
    return b"[" + flat.tobytes() + b"]", shape


def _tokens_follow(tokens: npt.NDArray[np.int8]) -> bool:
    """Whether each token may follow the one before it (a piece at a time: NumPy indexes with
    8-byte integers)."""
    step = 1 << 20
    for start in range(0, tokens.size - 1, step):
        before = tokens[start : start + step]
        after = tokens[start + 1 : start + step + 1]
        before = before[: after.size]
        if not bool(_FOLLOWS[before, after].all()):
            return False
    return True


def _first_shape(
    kinds: npt.NDArray[np.int8], depth: npt.NDArray[np.int32], rank: int
) -> tuple[int, ...]:
    """The shape read down the first elements: at each level, the children of its first list
    (commas at its depth within it, plus one, unless it is empty)."""
    shape: list[int] = []
    for level in range(1, rank + 1):
        start = level - 1  # the first list of each level opens right after the one above it
        if start >= kinds.size or kinds[start] != _OPEN:
            # The first list of the level above was empty: it has no lists below it.
            shape.append(0)
            continue
        shallower = depth[start:] < level
        end = start + int(shallower.argmax()) if shallower.any() else kinds.size
        del shallower
        inside = slice(start + 1, end)
        if end == start + 1:
            shape.append(0)
            continue
        commas = int(np.count_nonzero((kinds[inside] == _COMMA) & (depth[inside] == level)))
        shape.append(commas + 1)
    return tuple(shape)


def _skeleton_length(shape: tuple[int, ...]) -> int:
    """The length of ``_skeleton(shape)``, computed without building it."""
    length = 0  # a value: "v" is one character, counted below
    for index, size in enumerate(reversed(shape)):
        item = 1 if index == 0 else length
        length = 2 + size * item + max(0, size - 1)
    return length


def _skeleton(shape: tuple[int, ...]) -> bytes:
    """The text of a rectangular array of ``shape`` whose every value is written "v"."""
    text = b"v"
    for size in reversed(shape):
        text = b"[" + b",".join([text] * size) + b"]"
    return text
