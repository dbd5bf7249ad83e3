"""The op routes' own matching (app/http/routes.py) answers as the framework's would, on
every path: the same match and the same path parameters, or none."""

import asyncio
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from starlette.routing import Match

from app.http.routes import OpRoute
from app.main import create_app
from app.registry import REGISTRY, every_version
from app.settings import Settings

PATHS = [
    "/roll",
    "/roll\n",
    "/roll\n\n",
    "/roll/",
    "/rolls",
    "/gather",
    "/gather\n",
    "/v2/models/roll/infer",
    "/v2/models/roll/infer\n",
    "/v2/models/roll/infer\n\n",
    "/v2/models/roll/infer/",
    "/v2/models//infer",
    "/v2/models/a/b/infer",
    "/v2/models/r x/infer",
    "/v2/models/\n/infer",
    "/v2/models/roll\n/infer",
    "/v2/models/roll/versions/7/infer",
    "/v2/models/roll/versions/7/infer\n",
    "/v2/models/roll/versions//infer",
    "/v2/models/gather/versions/abc/infer",
    "/v2/models/roll/ready",
    "/",
    "",
]


@pytest.fixture(scope="module")
def routes() -> list[OpRoute]:
    app = create_app(Settings())
    found = [route for route in app.router.routes if isinstance(route, OpRoute)]
    assert {route.path for route in found} == {
        *(f"/{name}" for name in REGISTRY),
        # Every version at /<op>/v<N>, the newest one too (api.md section 11).
        *(f"/{op.name}/v{op.version}" for op in every_version()),
        "/v2/models/{name}/infer",
        "/v2/models/{name}/versions/{version}/infer",
    }
    return found


@pytest.mark.parametrize("method", ["POST", "GET"])
@pytest.mark.parametrize("path", PATHS)
def test_each_path_matches_as_the_framework_matches_it(
    routes: list[OpRoute], path: str, method: str
) -> None:
    scope: dict[str, Any] = {
        "type": "http",
        "path": path,
        "root_path": "",
        "method": method,
        "path_params": {},
        "headers": [],
    }
    for route in routes:
        ours, child = route.matches(dict(scope))
        theirs, expected = APIRoute.matches(route, dict(scope))
        assert ours == theirs, (route.path, path)
        if ours is not Match.NONE:
            assert child["path_params"] == expected["path_params"]
            assert child["endpoint"] is expected["endpoint"]
            assert child["route"] is route


def test_the_op_routes_come_before_every_other_route(routes: list[OpRoute]) -> None:
    app = create_app(Settings())
    kinds = [isinstance(route, OpRoute) for route in app.router.routes]
    assert kinds == sorted(kinds, reverse=True)
    assert kinds[:4] == [True] * 4


# --- The op routes taken straight from the app's entry (DirectRoutes) -------------------------


@pytest.fixture(scope="module")
def service() -> Any:
    return create_app(Settings())


@pytest.mark.parametrize("method", ["POST", "GET"])
@pytest.mark.parametrize("path", PATHS)
def test_the_direct_way_takes_the_route_the_router_takes(
    service: Any, path: str, method: str
) -> None:
    """For every path and method, the op route taken straight is the one the router's own walk
    takes first, with the same path parameters; anything else goes the framework's way."""
    app = service
    assert app.direct is not None
    scope: dict[str, Any] = {
        "type": "http", "path": path, "root_path": "", "method": method, "path_params": {},
        "headers": [],
    }  # fmt: skip
    found = app.direct.find(dict(scope))
    first = next(
        (
            (route, child)
            for route in app.router.routes
            for match, child in [route.matches(dict(scope))]
            if match is Match.FULL
        ),
        None,
    )
    if found is None:
        # Left to the framework: not a POST, no op route, or a path the framework's pattern
        # reads with a final newline (answered as the framework answers it, not straight).
        taken = method == "POST" and first is not None and isinstance(first[0], OpRoute)
        assert not taken or path.endswith("\n"), path
    else:
        assert first is not None
        assert found[0] is first[0]
        assert found[1]["path_params"] == first[1]["path_params"]
    # A mount point is the framework's to read.
    assert app.direct.find({**scope, "root_path": "/api"}) is None


def _example_requests() -> list[tuple[str, dict[str, Any]]]:
    """A path and a JSON body of every op route: each version's first example at /<op>/v<N>,
    the newest at /<op>, and through /v2 (its inputs in the protocol's form are the JSON
    route's fields, which /v2 refuses: a refusal both ways must match too)."""
    requests = []
    for op in every_version():
        body = next(iter(op.examples.values()))["value"]
        requests.append((f"/{op.name}/v{op.version}", body))
        if op is REGISTRY[op.name]:
            requests.append((f"/{op.name}", body))
        requests.append((f"/v2/models/{op.name}/versions/{op.version}/infer", {"inputs": []}))
    requests.append(("/v2/models/roll/infer", {"inputs": []}))
    requests.append(("/no_such_op", {}))
    return requests


def _answer(app: Any, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(path, json=body)

    response = asyncio.run(call())
    assert len(response.headers["x-request-id"]) == 32  # the observer tagged it
    headers = {k: v for k, v in response.headers.items() if k not in ("x-request-id", "date")}
    return response.status_code, headers, response.content


def test_every_op_route_answers_the_same_either_way() -> None:
    """Every op and version, the framework's way and straight: the same status, headers (the
    request id aside) and bytes, for a spec example and for a refusal; the observer saw both
    (each answer carries its request id)."""
    direct, framework = create_app(Settings()), create_app(Settings())
    framework.direct = None
    for path, body in _example_requests():
        assert direct.direct is not None
        straight = _answer(direct, path, body)
        assert straight == _answer(framework, path, body), path
        taken = direct.direct.find({"type": "http", "method": "POST", "path": path})
        assert (taken is not None) == (path != "/no_such_op"), path
        if path.startswith("/v2/"):
            assert straight[0] in (400, 422), (path, straight)
        elif path != "/no_such_op":
            assert straight[0] == 200, (path, straight)


def test_a_bug_is_answered_500_and_raised_on_as_the_framework_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = create_app(Settings())
    route = next(r for r in app.router.routes if isinstance(r, OpRoute) and r.path == "/roll")

    async def broken(request: Any, **parameters: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(route, "endpoint", broken)

    async def call(raise_on: bool) -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_on)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/roll", json={"data": [1], "shift": 1, "axes": 0})

    for straight in (True, False):
        if not straight:
            app.direct = None
        with pytest.raises(RuntimeError, match="a bug"):
            asyncio.run(call(True))
        answer = asyncio.run(call(False))
        assert answer.status_code == 500
        assert answer.json() == {
            "detail": [{"loc": [], "msg": "internal server error", "type": "internal"}]
        }


def test_with_cors_on_every_request_goes_the_framework_way() -> None:
    """CORS (a middleware besides the observer) sees the op routes' requests too."""
    app = create_app(Settings(cors_origins=("https://example.org",)))
    status, headers, _ = _answer_with_origin(app)
    assert status == 200
    assert headers["access-control-allow-origin"] == "https://example.org"


def _answer_with_origin(app: Any) -> tuple[int, dict[str, str], bytes]:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post(
                "/roll",
                json={"data": [1, 2], "shift": 1, "axes": 0},
                headers={"origin": "https://example.org"},
            )

    response = asyncio.run(call())
    return response.status_code, dict(response.headers), response.content
