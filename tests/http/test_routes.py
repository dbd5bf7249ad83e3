"""The op routes' own matching (app/http/routes.py) answers as the framework's would, on
every path: the same match and the same path parameters, or none."""

from typing import Any

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Match

from app.http.routes import OpRoute
from app.main import create_app
from app.registry import REGISTRY
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
