"""A new op is one registry entry: every transport, the docs and /v2 metadata pick it up."""

import io
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import orjson
import pytest

from app.main import create_app
from app.ops.errors import SpecError
from app.registry import ALL_TYPES, INTEGER_TYPES, REGISTRY, Arrays, Attributes, Input, Op
from app.settings import Settings
from tests.support import npz_bytes

pytestmark = pytest.mark.anyio


def _axes(arrays: Arrays) -> tuple[int, ...]:
    rank = arrays["data"].ndim
    axes = [int(axis) for axis in np.asarray(arrays["axes"]).reshape(-1)]
    for axis in axes:
        if not -rank <= axis < rank:
            raise SpecError("axes", f"axis {axis} is out of range for data of rank {rank}")
    return tuple(axis % rank for axis in axes)


def _plan(arrays: Arrays, attributes: Attributes) -> tuple[int, ...]:
    _axes(arrays)
    shape: tuple[int, ...] = arrays["data"].shape
    return shape


def _flip(arrays: Arrays, attributes: Attributes, out: npt.NDArray[Any] | None) -> Any:
    flipped = np.flip(arrays["data"], _axes(arrays))
    if out is None:
        return flipped.copy()
    np.copyto(out, flipped, casting="equiv")
    return out


#: A toy third op, declared exactly as the real ones are (Reverse-1 in "index" mode).
FLIP = Op(
    name="flip",
    spec="Reverse-1",
    summary="Reverse the order of elements along axes",
    description="The elements of `data` in reverse order along `axes`.",
    request_doc="Reverse-1: `data` reversed along `axes`.",
    inputs=(
        Input("data", "The tensor to reverse.", "T: any supported type.", ALL_TYPES),
        Input("axes", "Axes to reverse along.", "T_AXIS: any integer type.", INTEGER_TYPES),
    ),
    plan=_plan,
    kernel=_flip,
    examples={
        "example_1": {
            "summary": "Reverse rows",
            "value": {"data": [[1, 2], [3, 4]], "axes": [0]},
            "x-expected-output": [[3, 4], [1, 2]],
        }
    },
)


@pytest.fixture
def registered() -> Iterator[Op]:
    REGISTRY[FLIP.name] = FLIP
    try:
        yield FLIP
    finally:
        del REGISTRY[FLIP.name]


@pytest.fixture
async def client(registered: Op) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(Settings())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        yield client


DATA = np.arange(12, dtype=np.float32).reshape(3, 4)
EXPECTED = DATA[::-1, ::-1]


async def test_json_route(client: httpx.AsyncClient) -> None:
    response = await client.post("/flip", json={"data": DATA.tolist(), "axes": [0, -1]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["shape"] == [3, 4]
    np.testing.assert_array_equal(np.array(body["data"]), EXPECTED)


async def test_npz_route(client: httpx.AsyncClient) -> None:
    body = npz_bytes(data=DATA, axes=np.array([0, 1], dtype=np.uint8))
    response = await client.post(
        "/flip", content=body, headers={"content-type": "application/x-npz"}
    )
    assert response.status_code == 200, response.text
    np.testing.assert_array_equal(np.load(io.BytesIO(response.content)), EXPECTED)


async def test_v2_metadata_and_infer(client: httpx.AsyncClient) -> None:
    metadata = (await client.get("/v2/models/flip")).json()
    assert [tensor["name"] for tensor in metadata["inputs"]] == ["data", "axes"]
    request = {
        "inputs": [
            {"name": "data", "shape": [3, 4], "datatype": "FP32", "data": DATA.ravel().tolist()},
            {"name": "axes", "shape": [2], "datatype": "INT8", "data": [0, 1]},
        ]
    }
    response = await client.post("/v2/models/flip/infer", json=request)
    assert response.status_code == 200, response.text
    output = response.json()["outputs"][0]
    np.testing.assert_array_equal(np.array(output["data"]).reshape(output["shape"]), EXPECTED)


async def test_docs_list_the_route_its_model_and_its_examples(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()
    content = schema["paths"]["/flip"]["post"]["requestBody"]["content"]["application/json"]
    assert set(content["examples"]) == {"example_1"}
    assert content["schema"] == {"$ref": "#/components/schemas/FlipRequest"}
    fields = schema["components"]["schemas"]["FlipRequest"]["properties"]
    assert set(fields) == {"data", "axes", "dtype"}
    assert fields["axes"]["x-element-types"] == list(INTEGER_TYPES)


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/flip", orjson.dumps({"data": [1.0]}), {}),
        (
            "/v2/models/flip/infer",
            orjson.dumps(
                {"inputs": [{"name": "data", "shape": [1], "datatype": "FP32", "data": [1]}]}
            ),
            {},
        ),
    ],
)
async def test_its_faults_get_the_shared_statuses(
    client: httpx.AsyncClient, path: str, body: bytes, headers: dict[str, str]
) -> None:
    response = await client.post(path, content=body, headers=headers)
    assert response.status_code == 422, response.text
    assert "axes" in response.text


async def test_spec_violation_is_located_at_its_input(client: httpx.AsyncClient) -> None:
    response = await client.post("/flip", json={"data": [[1, 2]], "axes": [5]})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "axes"]
    assert "out of range" in response.json()["detail"][0]["msg"]
