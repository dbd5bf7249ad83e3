"""/v2 parameters are type-checked: the binary data extension's booleans and sizes are what they
say, the parameters of extensions not served here are refused, any other parameter is ignored."""

from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from app.errors import Fault
from app.main import create_app
from app.settings import Settings
from app.v2.rules import PARAMETER_FAULT

pytestmark = pytest.mark.anyio

URL = "/v2/models/roll/infer"
DATA = [1.0, 2.0, 3.0, 4.0]
ROLLED = [4.0, 1.0, 2.0, 3.0]  # DATA rolled by 1


def inputs(data_parameters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    data: dict[str, Any] = {"name": "data", "shape": [4], "datatype": "FP64", "data": DATA}
    if data_parameters is not None:
        data["parameters"] = data_parameters
    return [
        data,
        {"name": "shift", "shape": [1], "datatype": "INT64", "data": [1]},
        {"name": "axes", "shape": [1], "datatype": "INT64", "data": [0]},
    ]


def request(
    parameters: dict[str, Any] | None = None,
    output_parameters: dict[str, Any] | None = None,
    data_parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"inputs": inputs(data_parameters)}
    if parameters is not None:
        body["parameters"] = parameters
    if output_parameters is not None:
        body["outputs"] = [{"name": "output", "parameters": output_parameters}]
    return body


def binary_body(
    size: Any, output_parameters: dict[str, Any] | None = None
) -> tuple[bytes, dict[str, str]]:
    raw = np.array(DATA, dtype="<f8").tobytes()
    head = request(output_parameters=output_parameters)
    head["inputs"][0] = {
        "name": "data",
        "shape": [4],
        "datatype": "FP64",
        "parameters": {"binary_data_size": size},
    }
    header = orjson.dumps(head)
    headers = {
        "content-type": "application/octet-stream",
        "inference-header-content-length": str(len(header)),
    }
    return header + raw, headers


def output_of(response: httpx.Response) -> tuple[list[float], bool]:
    """The output's values, and whether they came as binary data."""
    assert response.status_code == 200, response.text
    length = response.headers.get("inference-header-content-length")
    if length is None:
        output = response.json()["outputs"][0]
        assert "parameters" not in output or "binary_data_size" not in output["parameters"]
        return output["data"], False
    head = orjson.loads(response.content[: int(length)])
    output = head["outputs"][0]
    raw = response.content[int(length) :]
    assert output["parameters"]["binary_data_size"] == len(raw)
    return np.frombuffer(raw, dtype="<f8").tolist(), True


def assert_refused(response: httpx.Response, where: str, words: str) -> None:
    assert response.status_code == 400, response.text
    message = response.json()["error"]
    assert message.startswith(f"{where}: "), message
    assert words in message, message


def test_the_parameter_faults_are_400() -> None:
    assert PARAMETER_FAULT.status == 400
    assert PARAMETER_FAULT in Fault


@pytest.mark.parametrize(
    ("parameters", "output_parameters", "binary"),
    [
        (None, None, False),
        ({"binary_data_output": False}, None, False),
        ({"binary_data_output": True}, None, True),
        (None, {"binary_data": True}, True),
        (None, {"binary_data": False}, False),
        # The output's own parameter decides over the request's.
        ({"binary_data_output": True}, {"binary_data": False}, False),
        ({"binary_data_output": False}, {"binary_data": True}, True),
        ({"binary_data_output": True}, {}, True),
    ],
)
async def test_binary_output_booleans_are_obeyed(
    client: httpx.AsyncClient,
    parameters: dict[str, Any] | None,
    output_parameters: dict[str, Any] | None,
    binary: bool,
) -> None:
    response = await client.post(URL, json=request(parameters, output_parameters))
    assert output_of(response) == (ROLLED, binary)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("false", "a string"),
        ("true", "a string"),
        ("", "a string"),
        (0, "a number"),
        (1, "a number"),
        (1.0, "a number"),
        (None, "null"),
        ([True], "an array"),
        ({"value": True}, "an object"),
    ],
)
async def test_binary_data_output_must_be_a_boolean(
    client: httpx.AsyncClient, value: Any, kind: str
) -> None:
    response = await client.post(URL, json=request({"binary_data_output": value}))
    assert_refused(
        response,
        "parameters.binary_data_output",
        f"binary_data_output must be a boolean (true or false), got {kind}",
    )


@pytest.mark.parametrize(
    ("value", "kind"), [("false", "a string"), (0, "a number"), (None, "null")]
)
async def test_binary_data_must_be_a_boolean(
    client: httpx.AsyncClient, value: Any, kind: str
) -> None:
    response = await client.post(URL, json=request(output_parameters={"binary_data": value}))
    assert_refused(
        response,
        "output.parameters.binary_data",
        f"binary_data must be a boolean (true or false), got {kind}",
    )
    # The same over binary input data, and whatever the request-level parameter says.
    body, headers = binary_body(32, {"binary_data": value})
    response = await client.post(URL, content=body, headers=headers)
    assert_refused(response, "output.parameters.binary_data", f"got {kind}")


async def test_the_string_false_is_not_taken_for_true(client: httpx.AsyncClient) -> None:
    # Before: bool("false") is True, and a JSON client got binary data it had declined.
    for body in (
        request({"binary_data_output": "false"}),
        request(output_parameters={"binary_data": "false"}),
    ):
        response = await client.post(URL, json=body)
        assert response.status_code == 400
        assert "inference-header-content-length" not in response.headers


@pytest.mark.parametrize(
    ("size", "words"),
    [
        ("32", "got a string"),
        (32.0, "got a number"),
        (True, "got a boolean"),
        (-1, "got a negative one"),
        ([32], "got an array"),
        (None, "got null"),
    ],
)
async def test_binary_data_size_must_be_a_non_negative_integer(
    client: httpx.AsyncClient, size: Any, words: str
) -> None:
    body, headers = binary_body(size)
    response = await client.post(URL, content=body, headers=headers)
    assert_refused(
        response,
        "data.parameters.binary_data_size",
        f"binary_data_size must be a non-negative integer, {words}",
    )


async def test_binary_data_size_as_an_integer_works(client: httpx.AsyncClient) -> None:
    body, headers = binary_body(32, {"binary_data": True})
    assert output_of(await client.post(URL, content=body, headers=headers)) == (ROLLED, True)
    body, headers = binary_body(32)
    assert output_of(await client.post(URL, content=body, headers=headers)) == (ROLLED, False)


SHARED_MEMORY = {
    "shared_memory_region": "region0",
    "shared_memory_byte_size": 32,
    "shared_memory_offset": 0,
}


@pytest.fixture
async def client_off() -> AsyncIterator[httpx.AsyncClient]:
    """A service with TENSOR_OPS_SHARED_MEMORY=off (tests/v2/test_shared_memory.py
    covers it on)."""
    transport = httpx.ASGITransport(app=create_app(Settings(shared_memory="off")))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


async def test_shared_memory_names_a_registered_region(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json=request(data_parameters=SHARED_MEMORY))
    assert_refused(
        response,
        "data.parameters.shared_memory_region",
        "no system shared memory region 'region0' is registered here",
    )


@pytest.mark.parametrize(("name", "value"), list(SHARED_MEMORY.items()))
async def test_shared_memory_inputs_are_refused(
    client_off: httpx.AsyncClient, name: str, value: Any
) -> None:
    response = await client_off.post(URL, json=request(data_parameters={name: value}))
    assert_refused(
        response,
        f"data.parameters.{name}",
        f"{name} is a parameter of Triton's shared memory extension, which is not supported here",
    )
    assert "binary_data_size" in response.json()["error"]  # what to do instead


@pytest.mark.parametrize(("name", "value"), list(SHARED_MEMORY.items()))
async def test_shared_memory_outputs_are_refused(
    client_off: httpx.AsyncClient, name: str, value: Any
) -> None:
    response = await client_off.post(URL, json=request(output_parameters={name: value}))
    assert_refused(
        response,
        f"output.parameters.{name}",
        f"{name} is a parameter of Triton's shared memory extension, which is not supported here",
    )


async def test_all_three_shared_memory_parameters_together_are_refused(
    client_off: httpx.AsyncClient,
) -> None:
    response = await client_off.post(URL, json=request(data_parameters=SHARED_MEMORY))
    assert_refused(response, "data.parameters.shared_memory_byte_size", "not supported here")


async def test_classification_is_refused(client: httpx.AsyncClient) -> None:
    response = await client.post(URL, json=request(output_parameters={"classification": 3}))
    assert_refused(
        response,
        "output.parameters.classification",
        "classification is a parameter of Triton's classification extension, which is not "
        "supported here",
    )


async def test_the_server_lists_only_the_extension_it_serves(client: httpx.AsyncClient) -> None:
    extensions = (await client.get("/v2")).json()["extensions"]
    assert extensions == [
        "binary_tensor_data",
        "model_configuration",
        "statistics",
        "model_repository",
        "system_shared_memory",
    ]


async def test_shared_memory_is_listed_only_when_it_is_on() -> None:
    app = create_app(Settings(grpc_port=0, shared_memory="off"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        extensions = (await client.get("/v2")).json()["extensions"]
    assert "system_shared_memory" not in extensions
    assert extensions[0] == "binary_tensor_data"


async def test_other_parameters_are_the_clients_own_and_ignored(
    client: httpx.AsyncClient,
) -> None:
    body = request(
        parameters={"sequence_id": 7, "priority": "high", "custom": {"a": [1]}},
        output_parameters={"note": "anything", "binary_data": False},
        data_parameters={"my_tag": "x", "binary_data": "not an input parameter"},
    )
    body["inputs"][1]["parameters"] = {"classification": 2}  # an output parameter, on an input
    assert output_of(await client.post(URL, json=body)) == (ROLLED, False)
    body["parameters"]["binary_data_output"] = True
    del body["outputs"]
    assert output_of(await client.post(URL, json=body)) == (ROLLED, True)


async def test_gather_batch_dims_is_still_an_integer_parameter(
    client: httpx.AsyncClient,
) -> None:
    body = {
        "parameters": {"batch_dims": 1, "binary_data_output": False},
        "inputs": [
            {"name": "data", "shape": [2, 3], "datatype": "INT64", "data": [1, 2, 3, 4, 5, 6]},
            {"name": "indices", "shape": [2, 1], "datatype": "INT64", "data": [2, 0]},
            {"name": "axis", "shape": [], "datatype": "INT64", "data": [1]},
        ],
    }
    response = await client.post("/v2/models/gather/infer", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [3, 4]
