"""Errors tell, never echo: whatever a client sends, a refusal quotes at most a short prefix of it.

Every transport (JSON, npy in JSON, .npz, /v2 JSON, /v2 binary) is sent long names and values
where a message could quote them: an unknown key, a dtype or datatype, an .npy descr, a huge
shape in an .npy header, input, output and model names, header values. Each answer must be a
4xx of under 2 KB holding no run of 100 characters of what was sent.
"""

import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from app.errors import quote
from tensor_ops_wire.dtypes import QUOTE_LIMIT, shown
from tests.support import b64, header_npy, npy_bytes, v2_binary_body, zip_bytes

pytestmark = pytest.mark.anyio

RUN = 100
MAX_BODY = 2048


def secret(length: int, seed: int = 0) -> str:
    """Letters and digits with no repeating pattern: any 100 of them in a row are this text's."""
    generator = random.Random(f"{seed}-{length}")
    return "".join(generator.choices(string.ascii_letters + string.digits, k=length))


KEY = secret(60_000, 1)
TYPE = secret(9_000, 2)
NAME = secret(5_000, 3)
HUGE_SHAPE = "(" + "1, " * 3_000 + ")"  # rank 3000
BIG_SHAPE = f"({10**4000}, {10**4000 + 1})"  # 8 KB of digits, within the header limit
TEXT_SHAPE = f"({NAME!r},)"


def npy_with(descr: str, shape: str, fortran: str = "False", payload: bytes = b"") -> bytes:
    """An .npy file whose header holds these literal values (any text, well-formed or not)."""
    text = f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}\n"
    return header_npy(text, payload, version=1 if len(text) < 1 << 16 else 2)


ROLL_NPZ = {
    "data.npy": npy_bytes([1, 2, 3]),
    "shift.npy": npy_bytes([1]),
    "axes.npy": npy_bytes([0]),
}


@dataclass
class Case:
    """One request, and the texts of it that the answer must not hold 100 characters of."""

    url: str
    secrets: tuple[str, ...]
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


def json_case(body: dict[str, Any], *secrets: str, url: str = "/roll") -> Case:
    return Case(url, secrets, json=body)


def roll_json(**fields: Any) -> dict[str, Any]:
    return {"data": [1, 2, 3], "shift": [1], "axes": [0], **fields}


def npz_case(members: dict[str, bytes], *secrets: str, query: str = "") -> Case:
    return Case(
        "/roll" + query,
        secrets,
        content=zip_bytes(members),
        headers={"content-type": "application/x-npz"},
    )


def v2_input(name: str, datatype: str = "INT64", shape: Any = (3,), **extra: Any) -> dict[str, Any]:
    return {"name": name, "shape": list(shape), "datatype": datatype, **extra}


def v2_json_case(inputs: list[dict[str, Any]], *secrets: str, **fields: Any) -> Case:
    url = fields.pop("url", "/v2/models/roll/infer")
    return Case(url, secrets, json={"inputs": inputs, **fields})


def v2_binary_case(
    inputs: list[tuple[dict[str, Any], bytes]], *secrets: str, **fields: Any
) -> Case:
    url = fields.pop("url", "/v2/models/roll/infer")
    head = {"inputs": [item for item, _ in inputs], **fields}
    content, headers = v2_binary_body(head, [raw for _, raw in inputs])
    return Case(url, secrets, content=content, headers=headers)


I64 = np.arange(3, dtype=np.int64).tobytes()
ONE = np.array([1], dtype=np.int64).tobytes()
ZERO = np.array([0], dtype=np.int64).tobytes()
GOOD_V2 = [
    v2_input("data", data=[1, 2, 3]),
    v2_input("shift", shape=(1,), data=[1]),
    v2_input("axes", shape=(1,), data=[0]),
]
GOOD_BINARY = [
    (v2_input("data"), I64),
    (v2_input("shift", shape=(1,)), ONE),
    (v2_input("axes", shape=(1,)), ZERO),
]

CASES: dict[str, Callable[[], Case]] = {
    # JSON, tensors as nested arrays
    "json-unknown-key": lambda: json_case(roll_json(**{KEY: 1}), KEY),
    "json-dtype": lambda: json_case(roll_json(dtype=TYPE), TYPE),
    "json-unknown-route": lambda: Case("/" + NAME, (NAME,), json=roll_json()),
    "json-content-type": lambda: Case(
        "/roll", (NAME,), content=b"{}", headers={"content-type": "application/" + NAME}
    ),
    "json-content-encoding": lambda: Case(
        "/roll", (NAME,), content=b"{}", headers={"content-encoding": NAME}
    ),
    # JSON, tensors as base64 .npy
    "npy-descr": lambda: json_case(roll_json(data=b64(npy_with(repr(TYPE), "(3,)"))), TYPE),
    "npy-structured-descr": lambda: json_case(
        roll_json(data=b64(npy_with(f"[({TYPE!r}, '<i8')]", "(3,)"))), TYPE
    ),
    "npy-dtype-beside": lambda: json_case(roll_json(data=b64(npy_bytes([1, 2])), dtype=TYPE), TYPE),
    "npy-huge-shape": lambda: json_case(
        roll_json(data=b64(npy_with("'<i8'", HUGE_SHAPE))), HUGE_SHAPE
    ),
    "npy-big-shape": lambda: json_case(
        roll_json(data=b64(npy_with("'<i8'", BIG_SHAPE))), BIG_SHAPE
    ),
    "npy-text-shape": lambda: json_case(roll_json(data=b64(npy_with("'<i8'", TEXT_SHAPE))), NAME),
    "npy-fortran-order": lambda: json_case(
        roll_json(data=b64(npy_with("'<i8'", "(3,)", fortran=repr(NAME)))), NAME
    ),
    "npy-index-descr": lambda: json_case(roll_json(shift=b64(npy_with(repr(TYPE), "(1,)"))), TYPE),
    # .npz bodies
    "npz-unknown-member": lambda: npz_case({**ROLL_NPZ, KEY + ".npy": npy_bytes([1])}, KEY),
    "npz-twice-member": lambda: npz_case(
        {**ROLL_NPZ, NAME + ".npy": npy_bytes([1]), NAME: npy_bytes([1])}, NAME
    ),
    "npz-descr": lambda: npz_case({**ROLL_NPZ, "data.npy": npy_with(repr(TYPE), "(3,)")}, TYPE),
    "npz-huge-shape": lambda: npz_case(
        {**ROLL_NPZ, "data.npy": npy_with("'<i8'", HUGE_SHAPE)}, HUGE_SHAPE
    ),
    "npz-big-shape": lambda: npz_case(
        {**ROLL_NPZ, "data.npy": npy_with("'<i8'", BIG_SHAPE)}, BIG_SHAPE
    ),
    "npz-query-dtype": lambda: npz_case(ROLL_NPZ, TYPE, query="?dtype=" + TYPE),
    "npz-unknown-query-key": lambda: npz_case(
        {"data.npy": ROLL_NPZ["data.npy"]}, KEY, query=f"?{KEY}=1"
    ),
    # /v2, JSON tensor data
    "v2-json-unknown-key": lambda: v2_json_case([{**GOOD_V2[0], KEY: 1}], KEY, **{KEY: 1}),
    "v2-json-datatype": lambda: v2_json_case([v2_input("data", TYPE, data=[1, 2, 3])], TYPE),
    "v2-json-input-name": lambda: v2_json_case([v2_input(KEY, data=[1, 2, 3])], KEY),
    "v2-json-output-name": lambda: v2_json_case(GOOD_V2, KEY, outputs=[{"name": KEY}]),
    "v2-json-huge-shape": lambda: v2_json_case(
        [v2_input("data", shape=[1] * 3000, data=[1, 2])],
        str([1] * 3000),
        orjson.dumps([1] * 3000).decode(),
    ),
    "v2-json-long-shape": lambda: v2_json_case(
        [v2_input("data", shape=[1] * 30 + [5], data=[1, 2])], str([1] * 30 + [5])
    ),
    "v2-json-model": lambda: v2_json_case(GOOD_V2, NAME, url=f"/v2/models/{NAME}/infer"),
    "v2-json-version": lambda: v2_json_case(
        GOOD_V2, NAME, url=f"/v2/models/roll/versions/{NAME}/infer"
    ),
    "v2-json-model-metadata": lambda: Case(f"/v2/models/{NAME}", (NAME,)),
    "v2-json-parameter-key": lambda: v2_json_case(
        GOOD_V2, KEY, NAME, parameters={KEY: 1, "binary_data_output": NAME}
    ),
    "v2-json-input-parameter": lambda: v2_json_case(
        [{**GOOD_V2[0], "parameters": {KEY: 1, "shared_memory_region": NAME}}, *GOOD_V2[1:]],
        KEY,
        NAME,
    ),
    "v2-json-output-parameter": lambda: v2_json_case(
        GOOD_V2,
        KEY,
        NAME,
        outputs=[{"name": "output", "parameters": {KEY: 1, "binary_data": NAME}}],
    ),
    "v2-json-id": lambda: v2_json_case(GOOD_V2, NAME, id=NAME, outputs=[{"name": NAME}]),
    # /v2, binary tensor data
    "v2-binary-datatype": lambda: v2_binary_case([(v2_input("data", TYPE), I64)], TYPE),
    "v2-binary-input-name": lambda: v2_binary_case([(v2_input(KEY), I64)], KEY),
    "v2-binary-output-name": lambda: v2_binary_case(GOOD_BINARY, KEY, outputs=[{"name": KEY}]),
    "v2-binary-huge-shape": lambda: v2_binary_case(
        [(v2_input("data", shape=[1] * 3000), I64)],
        str([1] * 3000),
        orjson.dumps([1] * 3000).decode(),
    ),
    "v2-binary-long-shape": lambda: v2_binary_case(
        [(v2_input("data", shape=[1] * 30 + [5]), I64)], str([1] * 30 + [5])
    ),
    "v2-binary-model": lambda: v2_binary_case(GOOD_BINARY, NAME, url=f"/v2/models/{NAME}/infer"),
    "v2-binary-header-length": lambda: Case(
        "/v2/models/roll/infer",
        (NAME,),
        content=b"{}",
        headers={"inference-header-content-length": NAME},
    ),
}


def assert_tells_without_echo(response: httpx.Response, secrets: tuple[str, ...]) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    assert len(response.content) < MAX_BODY, response.text[:500]
    text = response.text
    for secret_text in secrets:
        for start in range(max(0, len(text) - RUN + 1)):
            window = text[start : start + RUN]
            assert window not in secret_text, f"the answer echoes the input: {window!r}"


@pytest.mark.parametrize("name", list(CASES))
async def test_errors_quote_a_short_prefix_at_most(client: httpx.AsyncClient, name: str) -> None:
    case = CASES[name]()
    if case.json is None and case.content is None:
        response = await client.get(case.url, headers=case.headers)
    else:
        response = await client.post(
            case.url,
            json=case.json,
            content=case.content,
            headers=case.headers,
        )
    assert_tells_without_echo(response, case.secrets)


async def test_the_errors_still_say_what_was_wrong(client: httpx.AsyncClient) -> None:
    # Cut, not dropped: a prefix of what was sent, and its length, are there.
    response = await client.post("/roll", json=roll_json(dtype=TYPE))
    message = response.json()["detail"][0]["msg"]
    assert TYPE[:32] in message and "(9000 characters)" in message
    response = await client.post(
        "/v2/models/roll/infer", json={"inputs": [v2_input(KEY, data=[1, 2, 3])]}
    )
    assert KEY[:QUOTE_LIMIT] in response.json()["error"]
    assert "(60000 characters)" in response.json()["error"]
    response = await client.post("/roll", json=roll_json(data=b64(npy_with(repr(TYPE), "(3,)"))))
    assert TYPE[:32] in response.json()["detail"][0]["msg"]
    response = await client.post(
        "/v2/models/roll/infer", json={"inputs": [v2_input("data", TYPE, data=[1, 2, 3])]}
    )
    assert TYPE[:32] in response.json()["error"]
    assert "(9000 characters)" in response.json()["error"]


@pytest.mark.parametrize(
    "value",
    ["short", "x" * QUOTE_LIMIT, "y" * (QUOTE_LIMIT + 1), NAME, "quote ' and \" and \\"],
)
def test_the_wire_cut_is_the_server_cut(value: str) -> None:
    # tensor_ops_wire does not import the server; its cut of a string is the server's all the same.
    assert shown(value) == quote(value)
    assert len(shown(value)) <= QUOTE_LIMIT + 40


@pytest.mark.parametrize(
    ("value", "words"),
    [
        pytest.param(tuple(range(10_000)), "(10000 items)", id="long-tuple"),
        pytest.param([[1, 2]] * 100, "(100 items)", id="long-list"),
        pytest.param(10**5000, "too long to show", id="huge-integer"),
        pytest.param({"k" * 500: 1}, "characters)", id="long-repr"),
        pytest.param((1, 2), "(1, 2)", id="short"),
    ],
)
def test_shown_cuts_values_of_any_kind(value: object, words: str) -> None:
    text = shown(value)
    assert words in text
    assert len(text) < 2 * QUOTE_LIMIT
