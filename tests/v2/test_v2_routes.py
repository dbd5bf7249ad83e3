"""The KServe V2 routes: health, metadata, infer with JSON and binary tensors, {"error"} errors."""

import gzip
import zlib
from typing import Any

import httpx
import ml_dtypes
import numpy as np
import orjson
import pytest

from app.codecs.v2_tensors import V2_DTYPES
from app.main import create_app
from app.ops import gather, roll
from app.registry import REGISTRY
from app.settings import Settings
from tests.support import assert_same_bits, gzip_bomb

pytestmark = pytest.mark.anyio


def json_input(name: str, array: Any, datatype: str) -> dict[str, Any]:
    array = np.asarray(array)
    values = array.astype(np.float32) if array.dtype == ml_dtypes.bfloat16 else array
    return {
        "name": name,
        "shape": list(array.shape),
        "datatype": datatype,
        "data": values.reshape(-1).tolist(),
    }


def binary_request(
    inputs: list[tuple[str, Any, str]],
    parameters: dict[str, Any] | None = None,
    binary_output: bool = True,
) -> tuple[bytes, dict[str, str]]:
    head: dict[str, Any] = {
        "inputs": [],
        "outputs": [{"name": "output", "parameters": {"binary_data": binary_output}}],
    }
    if parameters:
        head["parameters"] = parameters
    chunks = []
    for name, value, datatype in inputs:
        array = np.asarray(value)
        raw = (
            array.tobytes()
            if array.dtype == ml_dtypes.bfloat16
            else array.astype(array.dtype.newbyteorder("<")).tobytes()
        )
        chunks.append(raw)
        head["inputs"].append(
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype,
                "parameters": {"binary_data_size": len(raw)},
            }
        )
    header = orjson.dumps(head)
    headers = {
        "inference-header-content-length": str(len(header)),
        "content-type": "application/octet-stream",
    }
    return header + b"".join(chunks), headers


def read_binary(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    length = int(response.headers["inference-header-content-length"])
    head = orjson.loads(response.content[:length])
    output = head["outputs"][0]
    dtype = V2_DTYPES[output["datatype"]]
    raw = response.content[length:]
    assert len(raw) == output["parameters"]["binary_data_size"]
    wire = dtype if dtype.itemsize == 1 or dtype == ml_dtypes.bfloat16 else dtype.newbyteorder("<")
    return np.frombuffer(raw, dtype=wire).reshape(output["shape"]), head


def assert_v2_error(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert words in body["error"], body["error"]


async def test_health_and_server_metadata(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v2/health/live")).json() == {"live": True}
    assert (await client.get("/v2/health/ready")).json() == {"ready": True}
    metadata = (await client.get("/v2")).json()
    assert metadata["name"] == "tensor-ops"
    assert "binary_tensor_data" in metadata["extensions"]


@pytest.mark.parametrize(
    ("name", "inputs"),
    [("roll", ["data", "shift", "axes"]), ("gather", ["data", "indices", "axis"])],
)
async def test_model_metadata_and_ready(
    client: httpx.AsyncClient, name: str, inputs: list[str]
) -> None:
    for path in (f"/v2/models/{name}", f"/v2/models/{name}/versions/{REGISTRY[name].version}"):
        metadata = (await client.get(path)).json()
        assert metadata["name"] == name
        assert [tensor["name"] for tensor in metadata["inputs"]] == inputs
        assert [tensor["name"] for tensor in metadata["outputs"]] == ["output"]
        for tensor in metadata["inputs"] + metadata["outputs"]:
            assert tensor["datatype"] in V2_DTYPES
            assert -1 in tensor["shape"]
            assert set(tensor["parameters"]["datatypes"]) <= set(V2_DTYPES)
    assert (await client.get(f"/v2/models/{name}/ready")).json() == {"name": name, "ready": True}


async def test_roll_index_types_in_metadata(client: httpx.AsyncClient) -> None:
    metadata = (await client.get("/v2/models/roll")).json()
    shift = next(t for t in metadata["inputs"] if t["name"] == "shift")
    assert shift["parameters"]["datatypes"] == ["INT32", "INT64"]


@pytest.mark.parametrize(
    "path", ["/v2/models/nope", "/v2/models/nope/ready", "/v2/models/roll/versions/2"]
)
async def test_unknown_model_or_version_404(client: httpx.AsyncClient, path: str) -> None:
    assert_v2_error(await client.get(path), 404, "")


async def test_infer_json_spec_example(client: httpx.AsyncClient) -> None:
    request = {
        "id": "req-7",
        "parameters": {"batch_dims": 1},
        "inputs": [
            {
                "name": "data",
                "shape": [2, 5],
                "datatype": "INT32",
                "data": [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]],
            },
            {"name": "indices", "shape": [2, 3], "datatype": "INT64", "data": [0, 0, 4, 4, 0, 0]},
            {"name": "axis", "shape": [], "datatype": "INT64", "data": [1]},
        ],
    }
    body = (await client.post("/v2/models/gather/infer", json=request)).json()
    assert body["id"] == "req-7"
    assert body["model_name"] == "gather"
    assert body["outputs"] == [
        {"name": "output", "datatype": "INT32", "shape": [2, 3], "data": [1, 1, 5, 10, 6, 6]}
    ]


@pytest.mark.parametrize("datatype", list(V2_DTYPES))
@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
async def test_every_datatype(client: httpx.AsyncClient, datatype: str, binary: bool) -> None:
    dtype = V2_DTYPES[datatype]
    rng = np.random.default_rng(5)
    raw = rng.integers(0, 256, size=(3, 4 * dtype.itemsize), dtype=np.uint8)
    data = raw.astype(bool) if datatype == "BOOL" else raw.view(dtype)
    if (dtype.kind == "f" or dtype == ml_dtypes.bfloat16) and not binary:
        # JSON cannot carry NaN or infinities.
        data = np.where(np.isfinite(data.astype(np.float64)), data, 0).astype(dtype)
    shift, axes = np.array([1, -2], np.int32), np.array([0, 1], np.int64)
    expected = roll(data, shift, axes)
    if binary:
        body, headers = binary_request(
            [("data", data, datatype), ("shift", shift, "INT32"), ("axes", axes, "INT64")]
        )
        output, head = read_binary(
            await client.post("/v2/models/roll/infer", content=body, headers=headers)
        )
        assert head["outputs"][0]["datatype"] == datatype
    else:
        request = {
            "inputs": [
                json_input("data", data, datatype),
                json_input("shift", shift, "INT32"),
                json_input("axes", axes, "INT64"),
            ]
        }
        reply = (await client.post("/v2/models/roll/infer", json=request)).json()
        assert reply["outputs"][0]["datatype"] == datatype
        assert reply["outputs"][0]["shape"] == [3, 4]
        values = reply["outputs"][0]["data"]
        exact = (
            np.array(values, dtype=dtype) if dtype.kind in "biu" else np.array(values).astype(dtype)
        )
        output = exact.reshape(3, 4)
    assert_same_bits(output, expected)


async def test_binary_inputs_json_output(client: httpx.AsyncClient) -> None:
    data = np.arange(10, dtype=np.float16)
    indices = np.array([2**64 - 1, 3, 9], dtype=np.uint64)
    body, headers = binary_request(
        [("data", data, "FP16"), ("indices", indices, "UINT64"), ("axis", np.int8(0), "INT8")],
        binary_output=False,
    )
    reply = (await client.post("/v2/models/gather/infer", content=body, headers=headers)).json()
    assert reply["outputs"][0]["data"] == [0.0, 3.0, 9.0]


async def test_binary_data_output_request_parameter(client: httpx.AsyncClient) -> None:
    request = {
        "parameters": {"binary_data_output": True},
        "inputs": [
            json_input("data", [1.0, 2.0], "FP64"),
            json_input("shift", 1, "INT64"),
            json_input("axes", 0, "INT64"),
        ],
    }
    output, _ = read_binary(await client.post("/v2/models/roll/infer", json=request))
    assert output.tolist() == [2.0, 1.0]


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_compressed_bodies(client: httpx.AsyncClient, encoding: str) -> None:
    data = np.arange(1000, dtype=np.int32)
    body, headers = binary_request(
        [("data", data, "INT32"), ("shift", np.int64(3), "INT64"), ("axes", np.int64(0), "INT64")]
    )
    packed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    headers["content-encoding"] = encoding
    output, _ = read_binary(
        await client.post("/v2/models/roll/infer", content=packed, headers=headers)
    )
    assert output.tolist() == np.roll(data, 3).tolist()


async def test_gzip_bomb_is_refused() -> None:
    # 8 MiB of spaces, 8 KiB gzipped, against a limit of 1 MiB: the same rule as 300 MiB against
    # the default 256 MiB, at a size that costs nothing to build.
    app = create_app(Settings(max_body_bytes=1 << 20))
    packed = gzip_bomb(8 << 20)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        response = await client.post(
            "/v2/models/roll/infer", content=packed, headers={"content-encoding": "gzip"}
        )
    assert_v2_error(response, 413, "TENSOR_OPS_MAX_BODY_BYTES")


def roll_inputs(**changes: Any) -> dict[str, Any]:
    inputs = {
        "data": {"name": "data", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]},
        "shift": {"name": "shift", "shape": [], "datatype": "INT64", "data": [1]},
        "axes": {"name": "axes", "shape": [], "datatype": "INT64", "data": [0]},
    }
    for name, change in changes.items():
        if change is None:
            inputs.pop(name)
        else:
            inputs[name] = {**inputs.get(name, {"name": name}), **change}
    return {"inputs": list(inputs.values())}


@pytest.mark.parametrize(
    ("request_body", "status", "words"),
    [
        (roll_inputs(data={"shape": [3, 2]}), 400, "holds 6 elements but data has 4"),
        (roll_inputs(data={"datatype": "BYTES"}), 422, "BYTES"),
        (roll_inputs(data={"datatype": "FP8"}), 422, "not supported"),
        (roll_inputs(axes={"data": [5]}), 422, "axes = 5 is out of range"),
        (roll_inputs(shift={"datatype": "INT16"}), 422, "int32 or int64"),
        (roll_inputs(shift={"data": [1.5]}), 422, "integers"),
        (roll_inputs(axes=None), 422, "missing input 'axes'"),
        (
            roll_inputs(bogus={"shape": [1], "datatype": "INT64", "data": [1]}),
            422,
            "unknown input 'bogus'",
        ),
        (roll_inputs(data={"data": None}), 400, "neither data nor"),
        (roll_inputs(data={"shape": [-1, 4]}), 422, "shape"),
        (roll_inputs(data={"data": [1, 2, 3, [4]]}), 400, "ragged"),
        ({**roll_inputs(), "parameters": {"batch_dims": 1}}, 422, "no batch_dims"),
        ({**roll_inputs(), "outputs": [{"name": "other"}]}, 422, "unknown output"),
        ({"inputs": "x"}, 422, "inputs"),
        ({}, 422, "inputs"),
    ],
)
async def test_refusals(
    client: httpx.AsyncClient, request_body: dict[str, Any], status: int, words: str
) -> None:
    assert_v2_error(await client.post("/v2/models/roll/infer", json=request_body), status, words)


async def test_duplicate_input(client: httpx.AsyncClient) -> None:
    request = roll_inputs()
    request["inputs"].append(request["inputs"][0])
    assert_v2_error(await client.post("/v2/models/roll/infer", json=request), 400, "given twice")


async def test_gather_batch_dims_must_be_an_integer(client: httpx.AsyncClient) -> None:
    request = {
        "parameters": {"batch_dims": "1"},
        "inputs": [
            json_input("data", [1, 2], "INT64"),
            json_input("indices", [0], "INT64"),
            json_input("axis", 0, "INT64"),
        ],
    }
    assert_v2_error(await client.post("/v2/models/gather/infer", json=request), 422, "batch_dims")


@pytest.mark.parametrize(
    ("header_length", "extra", "words"),
    [("9999", b"", "does not fit"), ("abc", b"", "does not fit"), (None, b"\0\0\0\0", "")],
)
async def test_binary_framing_errors(
    client: httpx.AsyncClient, header_length: str | None, extra: bytes, words: str
) -> None:
    body, headers = binary_request(
        [
            ("data", np.zeros(2, np.float32), "FP32"),
            ("shift", np.int64(1), "INT64"),
            ("axes", np.int64(0), "INT64"),
        ]
    )
    if header_length is None:
        body += extra
        words = "no input claims"
    else:
        headers["inference-header-content-length"] = header_length
    assert_v2_error(
        await client.post("/v2/models/roll/infer", content=body, headers=headers), 400, words
    )


async def test_binary_size_mismatch(client: httpx.AsyncClient) -> None:
    body, headers = binary_request(
        [
            ("data", np.zeros(4, np.float32), "FP32"),
            ("shift", np.int64(1), "INT64"),
            ("axes", np.int64(0), "INT64"),
        ]
    )
    length = int(headers["inference-header-content-length"])
    head = orjson.loads(body[:length])
    head["inputs"][0]["shape"] = [5]
    header = orjson.dumps(head)
    headers["inference-header-content-length"] = str(len(header))
    response = await client.post(
        "/v2/models/roll/infer", content=header + body[length:], headers=headers
    )
    assert_v2_error(response, 400, "takes 20 bytes but binary_data_size is 16")


async def test_bad_json_and_encoding(client: httpx.AsyncClient) -> None:
    assert_v2_error(
        await client.post("/v2/models/roll/infer", content=b"{nope"), 400, "not valid JSON"
    )
    response = await client.post(
        "/v2/models/roll/infer", content=b"xx", headers={"content-encoding": "br"}
    )
    assert_v2_error(response, 415, "gzip, deflate")
    response = await client.post(
        "/v2/models/roll/infer", content=b"not gzip", headers={"content-encoding": "gzip"}
    )
    assert_v2_error(response, 400, "gzip")


async def test_gather_bf16_binary(client: httpx.AsyncClient) -> None:
    data = np.array([[1.5, -2.0, np.nan], [0.0, -0.0, 7.0]], dtype=ml_dtypes.bfloat16)
    indices = np.array([[2, -4], [1, 0]], np.int32)
    body, headers = binary_request(
        [
            ("data", data, "BF16"),
            ("indices", indices, "INT32"),
            ("axis", np.array([1], np.int64), "INT64"),
        ],
        {"batch_dims": 1},
    )
    output, head = read_binary(
        await client.post("/v2/models/gather/infer", content=body, headers=headers)
    )
    assert head["outputs"][0]["datatype"] == "BF16"
    assert_same_bits(output, gather(data, indices, np.array([1]), 1))


async def test_openapi_documents_v2(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    infer = schema["paths"]["/v2/models/{name}/infer"]["post"]
    assert set(infer["requestBody"]["content"]) == {"application/json", "application/octet-stream"}
    assert "InferenceRequest" in schema["components"]["schemas"]
    for path in [
        "/v2",
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/{name}",
        "/v2/models/{name}/ready",
    ]:
        assert path in schema["paths"]
    roll_body = schema["paths"]["/roll"]["post"]["requestBody"]["content"]
    assert set(roll_body) == {"application/json", "application/x-npz"}


async def test_json_output_cannot_carry_nan_or_infinity(client: httpx.AsyncClient) -> None:
    data = np.array([np.inf, np.nan, 1.5], dtype=np.float32)
    body, headers = binary_request(
        [("data", data, "FP32"), ("shift", np.int64(1), "INT64"), ("axes", np.int64(0), "INT64")],
        binary_output=False,
    )
    response = await client.post("/v2/models/roll/infer", content=body, headers=headers)
    assert_v2_error(response, 422, "binary_data")
    await assert_binary_roll_by_one(client, data)


async def assert_binary_roll_by_one(client: httpx.AsyncClient, data: Any) -> None:
    """A roll of ``data`` by one along axis 0 as binary tensors is answered, bit-exact."""
    body, headers = binary_request(
        [("data", data, "FP32"), ("shift", np.int64(1), "INT64"), ("axes", np.int64(0), "INT64")]
    )
    output, _ = read_binary(
        await client.post("/v2/models/roll/infer", content=body, headers=headers)
    )
    assert_same_bits(output, np.roll(data, 1))


async def test_an_input_with_both_json_data_and_binary_data_is_refused(
    client: httpx.AsyncClient,
) -> None:
    """Which values would count is not for the server to guess: gRPC refuses contents beside a
    raw entry, shared memory a region beside data; an HTTP input with JSON data beside its
    binary_data_size is refused the same way, not answered from the binary data alone."""
    data = np.arange(4, dtype=np.float32)
    body, headers = binary_request(
        [("data", data, "FP32"), ("shift", np.int64(1), "INT64"), ("axes", np.int64(0), "INT64")]
    )
    length = int(headers["inference-header-content-length"])
    head = orjson.loads(body[:length])
    head["inputs"][0]["data"] = [9.0, 9.0, 9.0, 9.0]
    header = orjson.dumps(head)
    headers["inference-header-content-length"] = str(len(header))
    response = await client.post(
        "/v2/models/roll/infer", content=header + body[length:], headers=headers
    )
    assert_v2_error(response, 400, "data: has both data and parameters.binary_data_size")
    # The same request without the JSON data is answered, bit-exact.
    await assert_binary_roll_by_one(client, data)


@pytest.mark.parametrize("twice", ["inference-header-content-length", "content-type"])
async def test_a_framing_header_given_twice_is_refused(
    client: httpx.AsyncClient, twice: str
) -> None:
    """Two Inference-Header-Content-Length (or Content-Type) lines that may disagree: which one
    frames the body is not guessed (the first counted, silently), as two Content-Length lines
    are refused."""
    data = np.arange(3, dtype=np.int64)
    body, headers = binary_request(
        [("data", data, "INT64"), ("shift", np.int64(1), "INT64"), ("axes", np.int64(0), "INT64")]
    )
    lines = [(name.encode(), value.encode()) for name, value in headers.items()]
    lines.append((twice.encode(), headers[twice].encode()))
    response = await client.post("/v2/models/roll/infer", content=body, headers=lines)
    assert_v2_error(response, 400, f"{twice}: the header {twice} is given 2 times; give it once")
    output, _ = read_binary(
        await client.post("/v2/models/roll/infer", content=body, headers=headers)
    )
    assert_same_bits(output, np.roll(data, 1))


@pytest.mark.parametrize("version", ["abc", "\u0084", "12345", "-1", "8.0"])
@pytest.mark.parametrize("route", ["ready", "config", "stats", ""])
async def test_a_version_that_is_no_number_is_a_404_in_the_protocols_shape(
    client: httpx.AsyncClient, version: str, route: str
) -> None:
    """Any version path segment reaches the model lookup: a 404 naming the versions served, in
    the ``{"error"}`` shape (a pattern on the path gave FastAPI's 422 ``detail`` shape)."""
    path = f"/v2/models/gather/versions/{version}" + (f"/{route}" if route else "")
    response = await client.get(path)
    assert response.status_code == 404, response.text
    assert set(response.json()) == {"error"}
    assert "versions: 1, 7, 8" in response.json()["error"]
