"""Every op of the registry, every example of its spec, on every way in: the JSON route, ``.npz``
bodies, ``/v2`` (JSON and binary tensors), and through the client on each of its transports
(gRPC included) against a real server. A new op is tested here by its declaration alone."""

import io
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.ops.declaration import JSON_INFERRED, Op
from app.registry import REGISTRY, every_version, versions
from app.settings import Settings
from tensor_ops_client import TRANSPORTS, TensorOpsClient, Transport
from tensor_ops_wire.dtypes import dtype_from_name, element_type_of
from tensor_ops_wire.npy import decode_npy_base64
from tensor_ops_wire.ops import parameter_value, query_text
from tests.support import free_port, launch_server, npz_bytes, stop_server

pytestmark = pytest.mark.anyio

#: (op, version, example name) of every example of every version of every op.
EXAMPLES = [(op.name, op.version, name) for op in every_version() for name in op.examples]
IDS = [f"{name}-v{version}-{example}" for name, version, example in EXAMPLES]


def _split(op: Op, value: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """An example's request as its inputs, its attributes and its dtype."""
    attributes = {key: item for key, item in value.items() if op.attribute(key) is not None}
    inputs = {
        key: item
        for key, item in value.items()
        if key != "dtype" and key not in attributes and op.input_for(key) is not None
    }
    return inputs, attributes, value.get("dtype")


def example_arrays(op: Op, value: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An example's inputs as the arrays the service makes of their JSON form, and its
    attributes."""
    inputs, attributes, dtype_name = _split(op, value)
    dtype = dtype_from_name(dtype_name) if dtype_name is not None else None
    primary = _array(inputs[op.output_type_from], dtype)
    arrays: dict[str, Any] = {}
    for name, given in inputs.items():
        item = op.input_for(name)
        assert item is not None
        if name == op.output_type_from:
            arrays[name] = primary
        elif isinstance(given, str):
            arrays[name] = decode_npy_base64(given)
        elif item.like_data:
            arrays[name] = np.array(given, dtype=primary.dtype)
        elif item.json_typing == JSON_INFERRED:
            array = np.array(given)
            arrays[name] = array.astype(np.int64) if array.size == 0 else array
        else:
            arrays[name] = np.array(given, dtype=np.int64)
    return arrays, attributes


def _array(given: Any, dtype: np.dtype[Any] | None) -> npt.NDArray[Any]:
    """A tensor of an example: base64 .npy as its file says, JSON form of ``dtype``."""
    if isinstance(given, str):
        return decode_npy_base64(given)
    return np.array(given, dtype=dtype)


def _data(value: Any) -> Any:
    """An answer's ``data``: JSON form as it is, npy form decoded."""
    return plain(decode_npy_base64(value)) if isinstance(value, str) else value


def plain(array: npt.NDArray[Any]) -> Any:
    """An output as the nested lists of its JSON form (floats as Python floats)."""
    array = np.asarray(array)
    if array.dtype.kind == "f" or element_type_of(array.dtype).numpy == "bfloat16":
        return array.astype(np.float64).tolist()
    return array.tolist()


def expected_outputs(op: Op, example_name: str) -> list[Any]:
    """The example's expected outputs, a list of one for an op of one output."""
    expected = op.examples[example_name]["x-expected-output"]
    return list(expected) if op.several_outputs else [expected]


@pytest.fixture(scope="module")
def app() -> FastAPI:
    """One app for the module's every case: making one takes about a second (every version's
    routes and models), and the cases change nothing in it."""
    return create_app(Settings())


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        yield client


@pytest.mark.parametrize(("op_name", "version", "example_name"), EXAMPLES, ids=IDS)
async def test_the_json_route(
    client: httpx.AsyncClient, op_name: str, version: int, example_name: str
) -> None:
    op = versions(op_name)[version]
    # The newest version at /<op> and at /<op>/v<N>, an older one at /<op>/v<N> only.
    paths = [f"/{op_name}/v{version}"] + ([f"/{op_name}"] if REGISTRY[op_name] is op else [])
    for path in paths:
        response = await client.post(path, json=op.examples[example_name]["value"])
        assert response.status_code == 200, response.text
    response = await client.post(paths[-1], json=op.examples[example_name]["value"])
    assert response.status_code == 200, response.text
    body = response.json()
    if op.several_outputs:
        assert [item["name"] for item in body["outputs"]] == [
            f"output_{index}" for index in range(len(body["outputs"]))
        ]
        got = [_data(item["data"]) for item in body["outputs"]]
    else:
        got = [_data(body["data"])]
    assert got == expected_outputs(op, example_name)


async def _npz_answers(
    client: httpx.AsyncClient, op_name: str, version: int, example_name: str, byte_order: str
) -> list[Any]:
    """An example sent as an ``.npz`` body, its inputs of more than one byte in ``byte_order``
    (``"="`` as the service makes them of their JSON form), the attributes in the query: the
    outputs answered, as the nested lists of their JSON form."""
    op = versions(op_name)[version]
    arrays, attributes = example_arrays(op, dict(op.examples[example_name]["value"]))
    dtype = op.examples[example_name]["value"].get("dtype")
    query = {key: query_text(value) for key, value in attributes.items()}
    if dtype is not None and element_type_of(dtype_from_name(dtype)).numpy == "bfloat16":
        query["dtype"] = "bfloat16"
    ordered = {
        name: array.astype(array.dtype.newbyteorder(byte_order))
        if array.dtype.itemsize > 1 and array.dtype.kind in "iuf"
        else array
        for name, array in arrays.items()
    }
    response = await client.post(
        f"/{op_name}/v{version}",
        params=query,
        content=npz_bytes(**ordered),
        headers={"content-type": "application/x-npz"},
    )
    assert response.status_code == 200, response.text
    if op.several_outputs:
        archive = np.load(io.BytesIO(response.content))
        return [plain(archive[name]) for name in archive.files]
    return [plain(np.load(io.BytesIO(response.content)))]


@pytest.mark.parametrize(("op_name", "version", "example_name"), EXAMPLES, ids=IDS)
async def test_the_npz_route(
    client: httpx.AsyncClient, op_name: str, version: int, example_name: str
) -> None:
    got = await _npz_answers(client, op_name, version, example_name, "=")
    assert got == expected_outputs(versions(op_name)[version], example_name)


@pytest.mark.parametrize(("op_name", "version", "example_name"), EXAMPLES, ids=IDS)
async def test_the_npz_route_with_big_endian_inputs(
    client: httpx.AsyncClient, op_name: str, version: int, example_name: str
) -> None:
    """An ``.npy`` header names its byte order: every input of more than one byte sent
    big-endian gives the example's answer (values read as the header says, not as raw bytes)."""
    got = await _npz_answers(client, op_name, version, example_name, ">")
    assert got == expected_outputs(versions(op_name)[version], example_name)


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize(("op_name", "version", "example_name"), EXAMPLES, ids=IDS)
async def test_v2(
    client: httpx.AsyncClient, op_name: str, version: int, example_name: str, binary: bool
) -> None:
    op = versions(op_name)[version]
    arrays, attributes = example_arrays(op, dict(op.examples[example_name]["value"]))
    inputs = v2_inputs(arrays)
    parameters: dict[str, Any] = {
        **{key: parameter_value(value) for key, value in attributes.items()},
        "binary_data_output": binary,
    }
    response = await client.post(
        f"/v2/models/{op_name}/versions/{version}/infer",
        json={"inputs": inputs, "parameters": parameters},
    )
    assert response.status_code == 200, response.text
    assert response.headers.get("inference-header-content-length") or (
        response.json()["model_version"] == str(version)
    )
    if binary:
        length = int(response.headers["inference-header-content-length"])
        head = httpx.Response(200, content=response.content[:length]).json()
        offset, got = length, []
        for output in head["outputs"]:
            size = output["parameters"]["binary_data_size"]
            dtype = dtype_from_name(output["datatype"])
            raw = np.frombuffer(response.content[offset : offset + size], dtype.newbyteorder("<"))
            got.append(plain(raw.reshape(output["shape"])))
            offset += size
    else:
        outputs = response.json()["outputs"]
        got = [
            plain(np.array(output["data"]).reshape(output["shape"])) if output["data"] else []
            for output in outputs
        ]
        got = [
            value if np.array(value).size else plain(np.zeros(output["shape"]))
            for value, output in zip(got, outputs, strict=True)
        ]
    names = [output["name"] for output in (head if binary else response.json())["outputs"]]
    assert names == _names(op, len(got))
    assert got == expected_outputs(op, example_name)


def v2_inputs(arrays: dict[str, Any]) -> list[dict[str, Any]]:
    """``arrays`` as V2 JSON input tensors (bfloat16 values written as float32 numbers)."""
    inputs = []
    for name, array in arrays.items():
        element = element_type_of(array.dtype)
        data = array.astype(np.float32) if element.numpy == "bfloat16" else array
        inputs.append(
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": element.kserve,
                "data": data.reshape(-1).tolist(),
            }
        )
    return inputs


def _names(op: Op, count: int) -> list[str]:
    return [f"output_{index}" for index in range(count)] if op.several_outputs else ["output"]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, str]]:
    port = free_port()
    url, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)})
    yield url, f"127.0.0.1:{port}"
    stop_server(process)


@pytest.mark.e2e
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_client_on_every_transport(server: tuple[str, str], transport: Transport) -> None:
    url, target = server
    with TensorOpsClient(url, transport=transport, grpc_target=target, retry=False) as tops:
        for op_name, version, example_name in EXAMPLES:
            op = versions(op_name)[version]
            arrays, attributes = example_arrays(op, dict(op.examples[example_name]["value"]))
            # The newest version asked for by number or not at all; an older one by number.
            asked = None if REGISTRY[op_name] is op and version % 2 else version
            result = tops.call(op_name, arrays, attributes, version=asked)
            got = [plain(item) for item in result] if op.several_outputs else [plain(result)]
            assert got == expected_outputs(op, example_name), (op_name, example_name)


def _slip(name: str) -> str:
    """A slip of attribute ``name`` a person makes: its underscores left out, or (none) its
    letters in capitals."""
    return name.replace("_", "") if "_" in name else name.upper()


#: (op, version, attribute) of every attribute of every version of every op.
ATTRIBUTES = [(op.name, op.version, item.name) for op in every_version() for item in op.attributes]


@pytest.mark.parametrize(
    ("op_name", "version", "attribute"),
    ATTRIBUTES,
    ids=[f"{name}-v{version}-{attribute}" for name, version, attribute in ATTRIBUTES],
)
async def test_a_misspelt_attribute_is_refused_on_every_way_in(
    client: httpx.AsyncClient, op_name: str, version: int, attribute: str
) -> None:
    """An attribute's name slipped (``batchdims``, ``AXIS``) is refused naming the slip, never
    run with the attribute's default: a JSON field, an ``.npz`` query parameter and a ``/v2``
    parameter alike (gRPC reads its parameters as ``/v2`` does: the fault table's row)."""
    op = versions(op_name)[version]
    value = dict(op.examples[next(iter(op.examples))]["value"])
    arrays, attributes = example_arrays(op, value)
    declared = op.attribute(attribute)
    assert declared is not None
    given = attributes.get(attribute, declared.default)
    slip = _slip(attribute)
    path = f"/{op_name}/v{version}"
    body = await client.post(path, json={**value, slip: parameter_value(given)})
    assert body.status_code == 422, body.text
    assert ["body", slip] in [problem["loc"] for problem in body.json()["detail"]]
    query = {key: query_text(item) for key, item in attributes.items()}
    npz = await client.post(
        path,
        params={**query, slip: query_text(given)},
        content=npz_bytes(**arrays),
        headers={"content-type": "application/x-npz"},
    )
    assert npz.status_code == 422, npz.text
    (problem,) = npz.json()["detail"]
    assert problem["loc"] == ["query", slip]
    assert problem["msg"].endswith(f'did you mean "{attribute}"?'), problem["msg"]
    parameters = {key: parameter_value(item) for key, item in attributes.items()}
    v2 = await client.post(
        f"/v2/models/{op_name}/versions/{version}/infer",
        json={
            "inputs": v2_inputs(arrays),
            "parameters": {**parameters, slip: parameter_value(given)},
        },
    )
    assert v2.status_code == 422, v2.text
    assert v2.json()["error"].startswith(f"parameters.{slip}: ")
    assert v2.json()["error"].endswith(f"did you mean {attribute!r}?")
