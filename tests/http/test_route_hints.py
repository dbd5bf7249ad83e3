"""A request no route takes is taught as every other refusal is: a 405 says which method and
content types its path takes (with a short example), a 404 names the nearest route and the
routes there are, both say where /docs is; in FastAPI's ``detail`` shape, and in the protocol's
``{"error"}`` shape under /v2."""

from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.registry import REGISTRY
from app.settings import Settings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def service() -> FastAPI:
    return create_app(Settings(grpc_port=0))


@pytest.fixture
async def client(service: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=service)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def first_example(op: str) -> str:
    example = next(iter(REGISTRY[op].examples.values()))
    return orjson.dumps(example["value"]).decode()


def example_hint(op: str) -> str:
    """What the message says of the op's first example: shown when short (120 characters)."""
    text = first_example(op)
    return f" (for example {text})" if len(text) <= 120 else ""


def only_item(response: httpx.Response, kind: str) -> str:
    assert response.headers["content-type"] == "application/json"
    (item,) = response.json()["detail"]
    assert item["type"] == kind
    assert item["loc"] == []
    message: str = item["msg"]
    return message


@pytest.mark.parametrize("op", list(REGISTRY))
async def test_a_get_on_an_op_route_says_what_to_post(client: httpx.AsyncClient, op: str) -> None:
    response = await client.get(f"/{op}")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    message = only_item(response, "method_not_allowed")
    assert message == (
        f"Method Not Allowed: '/{op}' takes POST, not GET. Send POST /{op} with Content-Type "
        f"application/json or application/x-npz{example_hint(op)}. "
        "Each route is documented, with request examples, at /docs"
    )


async def test_a_typo_gets_the_nearest_route_and_the_list(client: httpx.AsyncClient) -> None:
    response = await client.post("/rol", json={"data": [1], "shift": 1, "axes": 0})
    assert response.status_code == 404
    message = only_item(response, "not_found")
    assert message.startswith(
        "Not Found: no route POST '/rol'. Did you mean POST /roll with Content-Type "
        f"application/json or application/x-npz (for example {first_example('roll')})? "
        "The routes: "
    )
    routes = message.split("The routes: ", 1)[1]
    for op in REGISTRY:
        assert f"POST /{op}, " in routes
    assert "GET /health, " in routes
    assert "KServe V2 under /v2/ (GET /v2 for the server's metadata)." in routes
    assert message.endswith("Each is documented, with request examples, at /docs")


async def test_a_path_near_nothing_gets_the_list_without_a_guess(
    client: httpx.AsyncClient,
) -> None:
    message = only_item(await client.get("/zzzzzzzzzzzz"), "not_found")
    assert "Did you mean" not in message
    assert "The routes: POST /roll" in message


async def test_another_routes_method_is_named(client: httpx.AsyncClient) -> None:
    response = await client.post("/health")
    assert response.status_code == 405
    assert only_item(response, "method_not_allowed") == (
        "Method Not Allowed: '/health' takes GET, not POST. Send GET /health. "
        "Each route is documented, with request examples, at /docs"
    )


async def test_the_docs_are_found_under_a_mount_point(service: FastAPI) -> None:
    transport = httpx.ASGITransport(app=service, root_path="/tensor-ops")
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        message = only_item(await client.get("/tensor-ops/roll"), "method_not_allowed")
    assert message.endswith("at /tensor-ops/docs")


async def test_under_v2_the_same_teaching_in_the_protocols_shape(
    client: httpx.AsyncClient,
) -> None:
    wrong_method = await client.get("/v2/models/roll/infer")
    assert wrong_method.status_code == 405
    assert wrong_method.headers["tensor-ops-fault"] == "method_not_allowed"
    error = wrong_method.json()["error"]
    assert error.startswith(
        "Method Not Allowed: '/v2/models/roll/infer' takes POST, not GET. "
        "Send POST /v2/models/{name}/infer with Content-Type application/json"
    )
    assert error.endswith("at /docs")
    typo = await client.post("/v2/model/roll/infer", json={})
    assert typo.status_code == 404
    assert typo.headers["tensor-ops-fault"] == "not_found"
    assert typo.json()["error"].startswith(
        "Not Found: no route POST '/v2/model/roll/infer'. Did you mean POST /v2/models/{name}/infer"
    )


async def test_a_long_path_is_quoted_short(client: httpx.AsyncClient) -> None:
    path = "/" + "x" * 500 + "SECRET"
    message = only_item(await client.get(path), "not_found")
    assert "SECRET" not in message
    assert "(507 characters)" in message
