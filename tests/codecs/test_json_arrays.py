"""Nested arrays read by NumPy (app/codecs/json_arrays.py) against a full JSON parser.

Whatever the text, ``read_nested`` either gives exactly what ``orjson.loads`` gives (the same
shape, the same values of the same types, -0.0 and 1e300 included) or None, and it gives None
only where orjson's answer is not a rectangular array of scalars (or is an error). Bodies with
such arrays go through the JSON fast path (``split_json_body``) and come out as orjson reads
them. Hypothesis writes the arrays with random whitespace, then breaks some of them.
"""

import json
import os
import random
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.codecs.json_arrays import FlatArray, flatten, read_nested
from app.codecs.json_body import LONG_STRING, split_json_body

_FUZZ = os.environ.get("TENSOR_OPS_FUZZ_EXAMPLES")
_SETTINGS = settings(
    max_examples=int(_FUZZ) if _FUZZ else 300,
    derandomize=not _FUZZ,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_SCALARS = {
    "int": st.integers(-(2**64), 2**64),
    "float": st.floats(allow_nan=False, allow_infinity=False),
    "bool": st.booleans(),
    "null": st.none(),
}
_SPACE = st.sampled_from(["", "", "", " ", "\n", "\t", "\r\n  "])


def nested(values: list[Any], shape: tuple[int, ...]) -> Any:
    """``values`` (C order) as nested lists of ``shape``."""
    if not shape:
        return values[0]
    if len(shape) == 1:
        return list(values)
    step = len(values) // shape[0] if shape[0] else 0
    return [nested(values[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def typed(value: Any) -> Any:
    """A value with its type: 1, 1.0 and True differ, so do 0.0 and -0.0."""
    if isinstance(value, list):
        return [typed(item) for item in value]
    return (type(value).__name__, repr(value))


def rectangular(value: Any) -> tuple[int, ...] | None:
    """The shape of a rectangular nested list of scalars (rank 1 at least), else None."""
    if not isinstance(value, list):
        return None
    shape: list[int] = []
    level = [value]
    while True:
        kinds = {isinstance(item, list) for item in level}
        if kinds == {True}:
            sizes = {len(item) for item in level}
            if len(sizes) != 1:
                return None
            shape.append(sizes.pop())
            level = [child for item in level for child in item]
            if not level:
                # Empty lists at this level: deeper lists cannot be there.
                return tuple(shape)
        elif kinds == {False}:
            return tuple(shape)
        else:
            return None


def written(value: Any, draw: st.DrawFn) -> str:
    """``value`` as JSON text, random whitespace around every token."""
    if isinstance(value, list):
        items = [written(item, draw) for item in value]
        inner = ",".join(f"{draw(_SPACE)}{item}{draw(_SPACE)}" for item in items)
        return f"[{inner or draw(_SPACE)}]"
    return json.dumps(value)  # big integers too, which orjson does not write


@st.composite
def arrays(draw: st.DrawFn) -> tuple[str, Any]:
    rank = draw(st.integers(1, 5))
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=rank, max_size=rank)))
    count = int(np.prod(shape))
    kind = draw(st.sampled_from(sorted(_SCALARS)))
    values = draw(st.lists(_SCALARS[kind], min_size=count, max_size=count))
    value = nested(values, shape)
    return written(value, draw), value


@st.composite
def texts(draw: st.DrawFn) -> str:
    """Arrays, and arrays broken: a character dropped, added or swapped, a piece repeated."""
    text, _ = draw(arrays())
    mutation = draw(st.sampled_from(["none", "drop", "insert", "repeat", "swap"]))
    if not text or mutation == "none":
        return text
    where = draw(st.integers(0, len(text) - 1))
    if mutation == "drop":
        return text[:where] + text[where + 1 :]
    if mutation == "insert":
        return text[:where] + draw(st.sampled_from('[],0 e-.5tn"{}:x')) + text[where:]
    if mutation == "repeat":
        end = draw(st.integers(where, len(text)))
        return text[:end] + text[where:end] + text[end:]
    other = draw(st.integers(0, len(text) - 1))
    chars = list(text)
    chars[where], chars[other] = chars[other], chars[where]
    return "".join(chars)


@_SETTINGS
@given(texts())
def test_read_nested_agrees_with_a_full_parser(text: str) -> None:
    data = text.encode()
    try:
        expected: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        expected = None
        assert read_nested(data, 64) is None
        return
    got = read_nested(data, 64)
    shape = rectangular(expected)
    if shape is None:
        assert got is None, (text, got)
        return
    assert got is not None, text
    assert got.shape == shape
    assert typed(nested(got.values, got.shape) if got.shape else got.values) == typed(expected)


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        ("[[1,2],[3,4]]", (2, 2)),
        ("[[],[]]", (2, 0)),
        ("[ [ ] ]", (1, 0)),
        ("[[[[5]]]]", (1, 1, 1, 1)),
        ("[[true, false]]", (1, 2)),
        ("[[1e5,-0.0,2E-3]]", (1, 3)),
        ("[[1 ,2] , [3,\n4]]", (2, 2)),
    ],
)
def test_rectangular_arrays_are_read(text: str, shape: tuple[int, ...]) -> None:
    got = read_nested(text.encode(), 64)
    assert got is not None
    assert got.shape == shape
    assert typed(nested(got.values, shape)) == typed(orjson.loads(text))


@pytest.mark.parametrize(
    "text",
    [
        "[[1,2],[3]]",  # ragged
        "[[], [[]]]",  # ragged, deeper
        "[[1,[2]]]",  # a value beside a list
        "[[[1]],[2]]",
        "[[1 2],[3,4]]",  # whitespace between two values: two values, not one
        "[[1,2],]",
        "[[1,,2]]",
        "[,[1]]",
        "[[1],[2]]]",
        "[[1],[2]",
        '[["a"]]',  # strings are for the plain parse
        "[[{}]]",  # objects too
        "[[nul]]",
    ],
)
def test_anything_else_is_left_to_the_plain_parse(text: str) -> None:
    assert read_nested(text.encode(), 64) is None


def test_nesting_past_the_limit_is_left_to_the_plain_parse() -> None:
    text = b"[" * 10 + b"1" + b"]" * 10
    assert read_nested(text, 9) is None
    got = read_nested(text, 10)
    assert got is not None and got.shape == (1,) * 10


def test_flat_text_is_the_values_and_commas_in_order() -> None:
    flat = flatten(b"[[1, 2],\n [3, 4]]", 64)
    assert flat == (b"[1,2,3,4]", (2, 2))


# -- Through the JSON fast path ----------------------------------------------------------------


def body_with(data: str, indices: str = "1") -> bytes:
    return f'{{"data": {data}, "shift": {indices}, "axes": 0, "dtype": "int64"}}'.encode()


def deep_text(count: int, depth: int, seed: int, spaced: bool) -> str:
    generator = random.Random(seed)
    space = " " if spaced else ""
    leaves = [str(generator.randint(-(2**40), 2**40)) for _ in range(count)]
    return "[" + f",{space}".join("[" * depth + leaf + "]" * depth for leaf in leaves) + "]"


def normal(value: Any) -> Any:
    """A parsed body with each FlatArray made the nested lists orjson would have made."""
    if isinstance(value, FlatArray):
        return nested(value.values, value.shape)
    if isinstance(value, dict):
        return {key: normal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normal(item) for item in value]
    return value


@pytest.mark.parametrize("spaced", [False, True])
@pytest.mark.parametrize("depth", [1, 5, 30])
def test_long_nested_arrays_are_cut_out_and_read_as_orjson_reads_them(
    depth: int, spaced: bool
) -> None:
    count = 2 * LONG_STRING // (2 * depth + 10) + 10
    body = body_with(deep_text(count, depth, depth, spaced))
    parsed = split_json_body(body)
    assert len(parsed.arrays) == 1
    payload = parsed.parse()
    assert isinstance(payload["data"], FlatArray)
    assert payload["data"].shape == (count,) + (1,) * depth
    assert normal(payload) == orjson.loads(body)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ("[[1]," + "[2],[3]," * 20_000 + "[4, 5]]", "ragged"),
        ("[[1]," + "[2]," * 20_000 + '["x"]]', "a string"),
        ("[[1]," + "[2]," * 20_000 + "[2 3]]", "two values"),
    ],
)
def test_arrays_that_are_not_rectangular_arrays_of_numbers_parse_plainly(
    data: str, reason: str
) -> None:
    body = body_with(data)
    parsed = split_json_body(body)
    try:
        expected: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        with pytest.raises(Exception, match="not valid JSON"):
            parsed.parse()
        return
    assert normal(parsed.parse()) == expected, reason


def test_flat_and_short_arrays_are_left_in_the_envelope() -> None:
    flat = body_with("[" + ",".join(["7"] * 40_000) + "]")
    assert split_json_body(flat).arrays == ()
    short = body_with("[[1],[2]]" + " " * LONG_STRING)
    assert split_json_body(short).arrays == ()
    # Few lists for many values (a 2-D matrix): orjson reads it faster than NumPy would.
    matrix = body_with("[" + ",".join(["[" + ",".join(["3"] * 100) + "]"] * 200) + "]")
    assert split_json_body(matrix).arrays == ()


def test_duplicate_keys_keep_the_last_as_orjson_does() -> None:
    first = deep_text(3000, 20, 1, False)
    second = deep_text(3000, 20, 2, False)
    body = f'{{"data": {first}, "shift": 1, "data": {second}, "axes": 0}}'.encode()
    assert normal(split_json_body(body).parse()) == orjson.loads(body)
