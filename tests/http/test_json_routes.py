"""The JSON routes over HTTP: the specs' examples in both tensor forms, types, and every error."""

import base64
import io
import re
from typing import Any

import httpx
import ml_dtypes
import numpy as np
import pytest

from app.main import create_app
from app.registry import REGISTRY
from app.settings import Settings
from tests.support import assert_same_bits, npy_b64

pytestmark = pytest.mark.anyio

#: The examples of the ops whose requests are ``data`` then index inputs and whose answer is one
#: ``data``, as this file builds them (every op's examples in both forms, on every way in:
#: tests/transports/test_every_op.py).
EXAMPLES = [
    (f"/{op.name}", name, ex)
    for op in REGISTRY.values()
    if op.data_then_indices
    and not op.several_outputs
    and not {item.name for item in op.attributes} & {"shift", "axes", "indices", "axis"}
    for name, ex in op.examples.items()
]


def from_npy_b64(text: str) -> Any:
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def assert_error(response: httpx.Response, status: int, loc: list[Any], words: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    detail = response.json()["detail"]
    assert isinstance(detail, list)
    assert detail
    assert detail[0]["loc"] == loc
    assert words in detail[0]["msg"], detail[0]["msg"]
    assert isinstance(detail[0]["type"], str)


@pytest.mark.parametrize(("route", "name", "example"), EXAMPLES, ids=lambda x: str(x)[:20])
async def test_spec_examples_in_json_form(
    client: httpx.AsyncClient, route: str, name: str, example: dict[str, Any]
) -> None:
    response = await client.post(route, json=example["value"])
    assert response.status_code == 200, response.text
    body = response.json()
    expected = np.array(example["x-expected-output"])
    if isinstance(body["data"], str):
        assert from_npy_b64(body["data"]).tolist() == expected.tolist()
    else:
        assert body["data"] == expected.tolist()
    assert body["shape"] == list(expected.shape)
    assert body["dtype"] == example["value"].get("dtype", "int64")


@pytest.mark.parametrize(("route", "name", "example"), EXAMPLES, ids=lambda x: str(x)[:20])
async def test_spec_examples_in_npy_form(
    client: httpx.AsyncClient, route: str, name: str, example: dict[str, Any]
) -> None:
    request = dict(example["value"])
    data = request["data"]
    dtype = request.pop("dtype", None)
    array = from_npy_b64(data) if isinstance(data, str) else np.array(data, dtype=dtype)
    request["data"] = npy_b64(array)
    for field in ("shift", "axes", "indices", "axis"):
        if field in request:
            request[field] = npy_b64(np.array(request[field], dtype=np.int32))
    response = await client.post(route, json=request)
    assert response.status_code == 200, response.text
    body = response.json()
    output = from_npy_b64(body["data"])
    expected = np.array(example["x-expected-output"], dtype=array.dtype)
    assert_same_bits(output, expected)
    assert body["shape"] == list(expected.shape)


async def test_accept_npy_returns_the_raw_npy(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/roll",
        json=REGISTRY["roll"].examples["example_2"]["value"],
        headers={"accept": "application/x-npy"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-npy"
    output = np.load(io.BytesIO(response.content), allow_pickle=False)
    assert output.tolist() == REGISTRY["roll"].examples["example_2"]["x-expected-output"]


@pytest.mark.parametrize("name", ["float32", "f32", "FP32"])
async def test_dtype_by_any_of_its_names(client: httpx.AsyncClient, name: str) -> None:
    request = {"data": [0.1, 0.2, 0.3], "shift": 1, "axes": 0, "dtype": name}
    body = (await client.post("/roll", json=request)).json()
    assert body["dtype"] == "float32"
    got = np.array(body["data"], dtype=np.float32)
    assert_same_bits(got, np.array([0.3, 0.1, 0.2], dtype=np.float32))


@pytest.mark.parametrize("name", ["bfloat16", "bf16", "BF16"])
@pytest.mark.parametrize("descr", ["<u2", "<i2", "|V2", ">u2"])
async def test_bfloat16_as_two_byte_npy(client: httpx.AsyncClient, name: str, descr: str) -> None:
    values = np.array([1.5, -0.0, np.nan, 3.0e38], dtype=ml_dtypes.bfloat16)
    payload = values.view("<u2").astype(descr) if descr != "|V2" else values.view("V2")
    request = {"data": npy_b64(payload), "indices": [3, 0, 9], "axis": 0, "dtype": name}
    body = (await client.post("/gather", json=request)).json()
    assert body["dtype"] == "bfloat16"
    output = from_npy_b64(body["data"])
    assert output.dtype == np.dtype("<u2")
    assert output.tolist() == [values.view(np.uint16)[3], values.view(np.uint16)[0], 0]


async def test_bfloat16_in_json_form(client: httpx.AsyncClient) -> None:
    request = {"data": [[0.1, 2.5], [-1.0, 7.0]], "shift": 1, "axes": 1, "dtype": "bfloat16"}
    body = (await client.post("/roll", json=request)).json()
    assert body["dtype"] == "bfloat16"
    expected = np.array([[2.5, 0.1], [7.0, -1.0]], dtype=ml_dtypes.bfloat16)
    assert_same_bits(np.array(body["data"]).astype(ml_dtypes.bfloat16), expected)


async def test_float_bits_survive_npy_form(client: httpx.AsyncClient) -> None:
    raw = np.array([0x7FC00001, 0xFFC12345, 0x80000000, 0x00000001, 0x7F800000], dtype=np.uint32)
    request = {"data": npy_b64(raw.view(np.float32)), "shift": -2, "axes": 0}
    body = (await client.post("/roll", json=request)).json()
    assert from_npy_b64(body["data"]).view(np.uint32).tolist() == np.roll(raw, -2).tolist()


async def test_big_endian_and_fortran_npy_input(client: httpx.AsyncClient) -> None:
    data = np.asfortranarray(np.arange(12, dtype=">i4").reshape(3, 4))
    request = {"data": npy_b64(data), "indices": npy_b64(np.array([2, 0], dtype=">u2")), "axis": 1}
    body = (await client.post("/gather", json=request)).json()
    assert body["dtype"] == "int32"
    assert from_npy_b64(body["data"]).tolist() == data[:, [2, 0]].tolist()


async def test_uint64_json_data_exact(client: httpx.AsyncClient) -> None:
    request = {"data": [2**64 - 1, 1, 2**63], "shift": 1, "axes": 0, "dtype": "uint64"}
    body = (await client.post("/roll", json=request)).json()
    assert body["data"] == [2**63, 2**64 - 1, 1]


async def test_scalar_data_and_indices(client: httpx.AsyncClient) -> None:
    body = (
        await client.post("/gather", json={"data": [5, 6, 7], "indices": -1, "axis": [0]})
    ).json()
    assert body == {"data": 7, "dtype": "int64", "shape": []}
    body = (await client.post("/roll", json={"data": 2.5, "shift": 1, "axes": []})).json()
    assert body == {"data": 2.5, "dtype": "float64", "shape": []}


async def test_npy_indices_of_every_integer_type(client: httpx.AsyncClient) -> None:
    for dtype in ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"]:
        request = {
            "data": [10, 20, 30],
            "indices": npy_b64(np.array([2, 0], dtype=dtype)),
            "axis": 0,
        }
        body = (await client.post("/gather", json=request)).json()
        assert body["data"] == [30, 10], dtype


@pytest.mark.parametrize(
    ("request_body", "loc", "words"),
    [
        (
            {"data": [1, 2], "shift": 1, "axes": 1},
            ["body", "axes"],
            "axes = 1 is out of range for data of rank 1",
        ),
        (
            {"data": [[1]], "shift": [1, 1], "axes": [0, 3]},
            ["body", "axes"],
            "axes[1] = 3 is out of range",
        ),
        ({"data": [1], "shift": [1, 2], "axes": [0]}, ["body", "shift"], "same size"),
        ({"data": [1], "shift": 1.5, "axes": 0}, ["body", "shift"], "integers"),
        ({"data": [1], "shift": True, "axes": 0}, ["body", "shift"], "booleans"),
        ({"data": [1], "shift": 2**70, "axes": 0}, ["body", "shift"], "integers"),
        ({"data": [1], "shift": 2**63, "axes": 0}, ["body", "shift"], "int64"),
        (
            {"data": [1], "shift": npy_b64(np.array(1, np.int16)), "axes": 0},
            ["body", "shift"],
            "int32 or int64",
        ),
        ({"data": [1], "shift": 1}, ["body", "axes"], "Field required"),
        ({"data": [1], "shift": 1, "axes": 0, "axis": 0}, ["body", "axis"], 'did you mean "axes"'),
        (
            {"data": [1], "shift": 1, "axes": 0, "dtype": "complex64"},
            ["body", "dtype"],
            "unknown element type",
        ),
        (
            {"data": [300], "shift": 1, "axes": 0, "dtype": "int8"},
            ["body", "data"],
            "out of range for int8",
        ),
        (
            {"data": npy_b64(np.zeros(2, np.float32)), "shift": 1, "axes": 0, "dtype": "f64"},
            ["body", "data"],
            "does not match",
        ),
        (
            {"data": npy_b64(np.zeros(2, np.complex64)), "shift": 1, "axes": 0},
            ["body", "data"],
            "not supported",
        ),
        ({"data": npy_b64(np.zeros(2, "V2")), "shift": 1, "axes": 0}, ["body", "data"], "bfloat16"),
    ],
)
async def test_roll_refusals_422(
    client: httpx.AsyncClient, request_body: dict[str, Any], loc: list[Any], words: str
) -> None:
    assert_error(await client.post("/roll", json=request_body), 422, loc, words)


@pytest.mark.parametrize(
    ("request_body", "loc", "words"),
    [
        ({"data": [1, 2], "indices": [0], "axis": 1}, ["body", "axis"], "axis = 1 is out of range"),
        ({"data": [1, 2], "indices": [0], "axis": [0, 0]}, ["body", "axis"], "one element"),
        (
            {"data": [[1, 2]], "indices": [[0]], "axis": 1, "batch_dims": 3},
            ["body", "batch_dims"],
            "out of range [-2, 2]",
        ),
        (
            {"data": [[1, 2]], "indices": [[0]], "axis": 0, "batch_dims": 1},
            ["body", "batch_dims"],
            "greater than axis",
        ),
        (
            {"data": [[1, 2]], "indices": [[0]], "axis": 1, "batch_dims": True},
            ["body", "batch_dims"],
            "integer",
        ),
        (
            {"data": [[1, 2]], "indices": [[0]], "axis": 1, "batch_dims": 1.0},
            ["body", "batch_dims"],
            "integer",
        ),
        ({"data": [[1, 2]], "indices": [[0.5]], "axis": 1}, ["body", "indices"], "integers"),
        (
            {"data": [1], "indices": npy_b64(np.array([0.0])), "axis": 0},
            ["body", "indices"],
            "integer type",
        ),
        (
            {"data": [[1, 2]], "indices": [[0], [1]], "axis": 1, "batch_dims": 1},
            ["body", "indices"],
            "must be equal",
        ),
        ({"data": 5, "indices": 0, "axis": 0}, ["body", "axis"], "rank 0"),
    ],
)
async def test_gather_refusals_422(
    client: httpx.AsyncClient, request_body: dict[str, Any], loc: list[Any], words: str
) -> None:
    assert_error(await client.post("/gather", json=request_body), 422, loc, words)


@pytest.mark.parametrize(
    ("content", "loc", "words"),
    [
        (b'{"data": [1,', ["body"], "not valid JSON"),
        (b'{"data": "\xff\xfe", "shift": 1, "axes": 0}', ["body"], "not valid JSON"),
        (b'{"data": [1, NaN], "shift": 1, "axes": 0}', ["body"], "not valid JSON"),
        (b'{"data": [1e400], "shift": 1, "axes": 0}', ["body"], "not valid JSON"),
        (b'{"data": [[1, 2], [3]], "shift": 1, "axes": 0}', ["body", "data"], "ragged"),
        (b'{"data": "QUJD", "shift": 1, "axes": 0}', ["body", "data"], "magic"),
        (b'{"data": "not base64", "shift": 1, "axes": 0}', ["body", "data"], "base64"),
        (b'{"data": [1], "shift": "AAAA", "axes": 0}', ["body", "shift"], "magic"),
    ],
)
async def test_undecodable_bodies_400(
    client: httpx.AsyncClient, content: bytes, loc: list[Any], words: str
) -> None:
    response = await client.post(
        "/roll", content=content, headers={"content-type": "application/json"}
    )
    assert_error(response, 400, loc, words)


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
async def test_other_content_types_415(client: httpx.AsyncClient, content_type: str) -> None:
    response = await client.post("/gather", content=b"{}", headers={"content-type": content_type})
    assert_error(response, 415, ["header", "content-type"], content_type)


async def test_json_with_charset_is_accepted(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/roll",
        content=b'{"data": [1, 2, 3], "shift": 1, "axes": 0}',
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert response.json()["data"] == [3, 1, 2]


async def test_body_over_the_limit_413() -> None:
    app = create_app(Settings(max_body_bytes=100))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        response = await client.post(
            "/roll", json={"data": list(range(100)), "shift": 1, "axes": 0}
        )
        assert_error(response, 413, ["body"], "TENSOR_OPS_MAX_BODY_BYTES")
        small = await client.post("/roll", json={"data": [1, 2], "shift": 1, "axes": 0})
        assert small.json()["data"] == [2, 1]


async def test_gather_output_over_the_limit_413(client: httpx.AsyncClient) -> None:
    # A tiny body that asks for 10**6 * 10**5 int64 elements: refused before any allocation.
    request = {
        "data": npy_b64(np.zeros((1, 10**5), np.int64)),
        "indices": npy_b64(np.zeros(10**6, np.int64)),
        "axis": 0,
    }
    assert_error(
        await client.post("/gather", json=request), 413, ["body"], "TENSOR_OPS_MAX_OUTPUT_BYTES"
    )


async def test_rank_over_the_limit_413(client: httpx.AsyncClient) -> None:
    data = np.zeros((1,) * 40, np.int8)
    response = await client.post("/roll", json={"data": npy_b64(data), "shift": 1, "axes": 0})
    assert response.status_code in (413, 422)
    assert response.json()["detail"][0]["loc"] == ["body", "data"]


async def test_errors_never_echo_the_input(client: httpx.AsyncClient) -> None:
    secret = "x" * 50 + "SECRET"
    response = await client.post(
        "/roll", json={"data": [1], "shift": 1, "axes": 0, "dtype": secret}
    )
    assert response.status_code == 422
    assert "SECRET" not in response.text


async def test_unknown_route_and_method(client: httpx.AsyncClient) -> None:
    assert (await client.post("/nope", json={})).status_code == 404
    response = await client.get("/roll")
    assert response.status_code == 405
    # The message starts as the framework's and goes on to teach (tests/http/test_route_hints.py).
    assert response.json()["detail"][0]["msg"].startswith("Method Not Allowed: '/roll' takes POST")


async def test_health(client: httpx.AsyncClient) -> None:
    response = await client.get("/health")
    assert response.json() == {"status": "ok"}


async def test_openapi_documents_both_routes_examples_and_types(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    for op in REGISTRY.values():
        examples = op.examples
        content = schema["paths"][f"/{op.name}"]["post"]["requestBody"]["content"][
            "application/json"
        ]
        assert set(content["examples"]) == set(examples)
        for name, example in examples.items():
            assert content["examples"][name]["value"] == example["value"]
    components = schema["components"]["schemas"]
    roll_fields = components["RollRequest"]["properties"]
    assert roll_fields["shift"]["x-element-types"] == ["int32", "int64"]
    assert roll_fields["axes"]["x-element-types"] == ["int32", "int64"]
    gather_fields = components["GatherRequest"]["properties"]
    assert "uint64" in gather_fields["indices"]["x-element-types"]
    assert "bool" not in gather_fields["axis"]["x-element-types"]
    assert "bfloat16" in roll_fields["data"]["x-element-types"]
    assert components["JsonIntTensor"]["anyOf"][0]["format"] == "int64"
    assert set(schema["paths"]["/roll"]["post"]["responses"]) >= {"200", "400", "413", "415", "422"}


async def test_docs_page(client: httpx.AsyncClient) -> None:
    response = await client.get("/docs")
    assert response.status_code == 200
    assert "SwaggerUIBundle" in response.text
    # Every script and style the page loads is served by the service: no CDN, no internet.
    assets = re.findall(r'(?:src|href)="([^"]+)"', response.text)
    assert assets
    for asset in assets:
        assert asset.startswith("/"), asset
        assert (await client.get(asset)).status_code == 200


@pytest.mark.parametrize(
    ("element", "dtype"),
    [
        ("18446744073709551616", "uint64"),
        ("-9223372036854775809", "int64"),
        ("100000000000000000000", "int8"),
        ("18446744073709551616", "bool"),
    ],
)
async def test_an_integer_beyond_64_bits_is_named_as_such(
    client: httpx.AsyncClient, element: str, dtype: str
) -> None:
    """JSON integers past 64 bits are read as doubles: the refusal says so, not just that the
    element is a fraction (the element as sent is an integer)."""
    content = f'{{"data": [1, {element}], "shift": 1, "axes": 0, "dtype": "{dtype}"}}'
    response = await client.post(
        "/roll", content=content, headers={"content-type": "application/json"}
    )
    assert_error(
        response,
        422,
        ["body", "data"],
        "(a number written with a fraction or an exponent, or beyond 64 bits)",
    )
    good = await client.post(
        "/roll", json={"data": [1, 2**64 - 1], "shift": 1, "axes": 0, "dtype": "uint64"}
    )
    assert good.json() == {"data": [2**64 - 1, 1], "dtype": "uint64", "shape": [2]}


async def test_a_content_type_given_twice_is_refused(client: httpx.AsyncClient) -> None:
    """application/json and application/x-npz in two lines: which one the body is is not
    guessed (the first counted, silently)."""
    content = b'{"data": [1, 2, 3], "shift": 1, "axes": 0}'
    for first, second in [("application/json", "application/x-npz"), ("a/b", "application/json")]:
        response = await client.post(
            "/roll",
            content=content,
            headers=[(b"content-type", first.encode()), (b"content-type", second.encode())],
        )
        assert_error(
            response,
            400,
            ["header", "content-type"],
            "the header content-type is given 2 times; give it once",
        )
    good = await client.post("/roll", content=content, headers={"content-type": "application/json"})
    assert good.json() == {"data": [3, 1, 2], "dtype": "int64", "shape": [3]}
