"""What /docs teaches is true: each example's answer is the service's answer to its request,
each refusal's example what the service answers to a request of that fault; the ops under their
tag, every way in named, the `.npz`-only query parameters labelled; and ``GET /`` sends a
browser to /docs and tells a client what is offered."""

import re
import weakref
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from jsonschema import Draft202012Validator

from app.main import create_app
from app.ops.declaration import MAX_VARIADIC
from app.pipeline.admission import UNCOUNTED_BYTES
from app.registry import REGISTRY
from app.settings import Settings
from app.version import VERSION

pytestmark = pytest.mark.anyio


#: Each client's app, and each app's /openapi.json as served: fetched and parsed once per app,
#: not once per test (half a second each, two hundred tests).
_APPS: "weakref.WeakKeyDictionary[httpx.AsyncClient, FastAPI]" = weakref.WeakKeyDictionary()
_SCHEMAS: "weakref.WeakKeyDictionary[FastAPI, dict[str, Any]]" = weakref.WeakKeyDictionary()


async def _client(app: FastAPI, root_path: str = "") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    client = httpx.AsyncClient(transport=transport, base_url="http://test")
    if not root_path:  # a root path changes the document's servers: not shared
        _APPS[client] = app
    return client


@pytest.fixture(scope="module")
def service() -> FastAPI:
    return create_app(Settings(grpc_port=8001))


@pytest.fixture
async def client(service: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with await _client(service) as client:
        yield client


async def _schema(client: httpx.AsyncClient) -> dict[str, Any]:
    app = _APPS.get(client)
    if app is not None and app in _SCHEMAS:
        return _SCHEMAS[app]
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    schema: dict[str, Any] = response.json()
    if app is not None:
        _SCHEMAS[app] = schema
    return schema


def _examples(schema: dict[str, Any], op: str, status: str) -> dict[str, Any]:
    response = schema["paths"][f"/{op}"]["post"]["responses"][status]
    examples: dict[str, Any] = response["content"]["application/json"]["examples"]
    return examples


CASES = [(op.name, name) for op in REGISTRY.values() for name in op.examples]


@pytest.mark.parametrize(("op", "example"), CASES)
async def test_each_examples_200_is_the_answer_to_its_request(
    client: httpx.AsyncClient, op: str, example: str
) -> None:
    schema = await _schema(client)
    request = schema["paths"][f"/{op}"]["post"]["requestBody"]["content"]["application/json"]
    sent = request["examples"][example]["value"]
    shown = _examples(schema, op, "200")[example]
    response = await client.post(f"/{op}", json=sent)
    assert response.status_code == 200
    assert response.json() == shown["value"]
    assert shown["summary"] == request["examples"][example]["summary"]


#: A request of each documented refusal: content type and body.
REFUSED = {
    "400": ("application/json", b'{"data": [1, 2'),
    "415": ("text/plain", b"data=1"),
}


@pytest.mark.parametrize("op", list(REGISTRY))
@pytest.mark.parametrize("status", ["400", "415", "422"])
async def test_each_refusals_example_is_the_answer_to_such_a_request(
    client: httpx.AsyncClient, op: str, status: str
) -> None:
    schema = await _schema(client)
    [shown] = _examples(schema, op, status).values()
    if status == "422":
        first = next(iter(REGISTRY[op].examples.values()))["value"]
        last = REGISTRY[op].inputs[-1].name
        response = await client.post(f"/{op}", json={**first, last: 5})
        if response.status_code == 200:  # the op takes that: the docs show a field it has not
            response = await client.post(f"/{op}", json={**first, "axes_": 0})
    else:
        media, body = REFUSED[status]
        response = await client.post(f"/{op}", content=body, headers={"content-type": media})
    assert response.status_code == int(status)
    assert response.json() == shown["value"]
    assert response.json()["detail"][0]["type"] != "internal"


async def test_the_413_example_is_the_answer_to_a_body_over_the_limit() -> None:
    app = create_app(Settings(grpc_port=0, max_body_bytes=4096))
    async with await _client(app) as client:
        schema = await _schema(client)
        body = b"[" + b"1," * 2048 + b"1]"
        response = await client.post(
            "/roll", content=body[:4097], headers={"content-type": "application/json"}
        )
    [shown] = _examples(schema, "roll", "413").values()
    assert response.status_code == 413
    assert response.json() == shown["value"]


async def test_the_503_example_says_what_a_full_budget_answers() -> None:
    app = create_app(Settings(grpc_port=0, memory_budget_bytes=16 << 20, admission_timeout=0.05))
    async with await _client(app) as client:
        schema = await _schema(client)
        holder = app.state.budget.reserve()
        await holder.grow_to(16 << 20)  # the whole budget, held
        try:
            # Past what the budget leaves uncounted: it waits, then is refused.
            data = list(range(UNCOUNTED_BYTES // 8))
            response = await client.post("/roll", json={"data": data, "shift": 1, "axes": 0})
        finally:
            await holder.release()
    [shown] = _examples(schema, "roll", "503").values()
    assert response.status_code == 503

    def numbers_out(body: dict[str, Any]) -> str:
        return re.sub(r"\d+", "N", str(body))

    assert numbers_out(response.json()) == numbers_out(shown["value"])


async def test_ops_have_their_tag_and_the_description_names_every_way_in(
    client: httpx.AsyncClient,
) -> None:
    schema = await _schema(client)
    for op in REGISTRY:
        operation = schema["paths"][f"/{op}"]["post"]
        assert operation["tags"] == ["ops"]
        queries = [item for item in operation["parameters"] if item["in"] == "query"]
        assert queries, op
        for item in queries:
            assert item["description"].startswith("**`.npz` bodies only**"), item
    assert [tag["name"] for tag in schema["tags"]] == ["ops", "KServe V2", "service"]
    text = schema["info"]["description"]
    for words in ("JSON", "base64 `.npy`", "`.npz`", "`/v2`", "gRPC", "port **8001**", "client"):
        assert words in text, words
    infer = schema["paths"]["/v2/models/{name}/infer"]["post"]
    assert infer["tags"] == ["KServe V2"]


async def test_a_browser_at_the_root_is_sent_to_the_docs(service: FastAPI) -> None:
    accept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    async with await _client(service) as client:
        response = await client.get("/", headers={"accept": accept})
        assert response.status_code == 307
        assert response.headers["location"] == "/docs"
        docs = await client.get("/docs", headers={"accept": accept})
        assert docs.status_code == 200
        assert "swagger-ui" in docs.text
    async with await _client(service, root_path="/tensor-ops") as client:
        response = await client.get("/", headers={"accept": accept})
        assert response.headers["location"] == "/tensor-ops/docs"


@pytest.mark.parametrize("accept", [None, "*/*", "application/json"])
async def test_a_client_at_the_root_gets_what_is_offered(
    client: httpx.AsyncClient, accept: str | None
) -> None:
    headers = {} if accept is None else {"accept": accept}
    response = await client.get("/", headers=headers)
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "tensor-ops"
    assert body["version"] == VERSION
    assert body["ops"] == list(REGISTRY)
    assert body["ports"] == {"http": 8000, "grpc": 8001}
    assert set(body["ways_in"]) == {"json", "npz", "v2", "grpc", "client"}
    assert "8001" in body["ways_in"]["grpc"]
    assert body["docs"] == "/docs"


@pytest.mark.parametrize("op", list(REGISTRY))
async def test_v2_infer_has_an_example_per_model_with_its_answer(
    client: httpx.AsyncClient, op: str
) -> None:
    """/docs' /v2 infer route: a named request example per model, each the answer it shows."""
    schema = await _schema(client)
    operation = schema["paths"]["/v2/models/{name}/infer"]["post"]
    request = operation["requestBody"]["content"]["application/json"]["examples"][op]["value"]
    shown = operation["responses"]["200"]["content"]["application/json"]["examples"][op]["value"]
    response = await client.post(f"/v2/models/{op}/infer", json=request)
    assert response.status_code == 200, response.text
    assert response.json() == shown
    expected = next(iter(REGISTRY[op].examples.values()))["x-expected-output"]
    outputs = [item["data"] for item in shown["outputs"]]
    flat = (
        [np.array(item).reshape(-1).tolist() for item in expected]
        if REGISTRY[op].several_outputs
        else [np.array(expected).reshape(-1).tolist()]
    )
    assert outputs == flat


VARIADIC = [op for op in REGISTRY.values() if op.variadic is not None]


@pytest.mark.parametrize("op", VARIADIC, ids=[op.name for op in VARIADIC])
async def test_a_variadic_input_takes_every_number_the_route_takes(
    client: httpx.AsyncClient, op: Any
) -> None:
    """A generated client follows the schema: ``data_2`` and beyond (below MAX_VARIADIC) must
    be in it, typed as ``data_0``, and what the route refuses (``data_01``, ``data_1024``) not."""
    schema = await _schema(client)
    body = schema["paths"][f"/{op.name}"]["post"]["requestBody"]["content"]["application/json"]
    model = body["schema"]
    # The document itself is the root its references point into.
    validator = Draft202012Validator({**schema, "$ref": model["$ref"]})
    name = op.variadic.name
    example = next(iter(op.examples.values()))["value"]
    others = {key: value for key, value in example.items() if not key.startswith(f"{name}_")}
    first = example[f"{name}_0"]
    three = {f"{name}_{index}": first for index in range(3)} | others
    assert list(validator.iter_errors(three)) == []
    assert list(validator.iter_errors({**three, f"{name}_{MAX_VARIADIC - 1}": first})) == []
    for refused in (f"{name}_{MAX_VARIADIC}", f"{name}_01", f"{name}_x", "data_2_"):
        errors = list(validator.iter_errors({**three, refused: first}))
        assert errors, refused
    # The element types of data_2 are data_0's.
    assert list(validator.iter_errors({**three, f"{name}_2": {"not": "a tensor"}}))
    # What the schema lets through, the route takes: three inputs joined.
    response = await client.post(f"/{op.name}", json=three)
    assert response.status_code == 200, response.text
