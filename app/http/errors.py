"""Rendering a ``ServiceError`` over HTTP: FastAPI's ``detail`` list, or the V2 ``{"error"}``."""

from collections.abc import Mapping

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from app.errors import Fault, ServiceError, fault_headers, internal_error, logged_fault
from app.http.route_hints import method_hint, not_found_hint

_FRAMEWORK_FAULTS = {404: Fault.NOT_FOUND, 405: Fault.METHOD_NOT_ALLOWED}


class ErrorItem(BaseModel):
    """One broken rule: where (``loc``), what (``msg``) and its kind (``type``)."""

    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """The body of every client error on the plain routes."""

    detail: list[ErrorItem]


#: Where a refusal leaves its fault's kind and field in the request's scope state, for the
#: access line (app/transports/http_observer.py).
REFUSAL_STATE = "tensor_ops_refusal"


class Refusal(Response):
    """A refused request's answer, which leaves its fault's kind and field in the request's scope
    state as it is sent: the observer's access line says why, and nothing of what was sent."""

    def __init__(self, error: ServiceError, body: bytes, headers: Mapping[str, str]) -> None:
        super().__init__(body, error.status, headers=headers, media_type="application/json")
        self.fault = logged_fault(error.problems[0])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope.setdefault("state", {})[REFUSAL_STATE] = self.fault
        await super().__call__(scope, receive, send)


def render_detail(error: ServiceError) -> Response:
    """The plain routes' shape: ``{"detail": [{"loc", "msg", "type"}, ...]}``."""
    items = [problem.as_item() for problem in error.problems]
    return Refusal(error, orjson.dumps({"detail": items}), error.headers)


def render_v2(error: ServiceError) -> Response:
    """The KServe V2 shape, ``{"error": "..."}``, each problem's location in words."""
    # The protocol's body has room for a message only: the fault's kind goes in a header, as
    # gRPC's trailing metadata carries it (the plain routes' body has it as ``type``).
    body = orjson.dumps({"error": error.message})
    return Refusal(error, body, {**error.headers, **fault_headers(error)})


def framework_error(status: int, detail: str, headers: Mapping[str, str] | None) -> ServiceError:
    """An error the framework raised before any route ran (no such route, wrong method)."""
    fault = _FRAMEWORK_FAULTS.get(status, Fault.NOT_FOUND)
    return ServiceError(fault, (), detail, headers=dict(headers or {}))


def route_hint(request: Request, status: int, allow: str | None) -> str | None:
    """What a 404 or a 405 teaches (the routes, what they take, /docs); None for another status."""
    docs = f"{request.scope.get('root_path', '')}/docs"
    routes = request.app.routes
    if status == 404:
        return not_found_hint(routes, request.method, request.url.path, docs)
    if status == 405 and allow:
        allowed = [method.strip() for method in allow.split(",")]
        return method_hint(routes, request.method, request.url.path, allowed, docs)
    return None


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    allow = (exc.headers or {}).get("Allow")
    message = route_hint(request, exc.status_code, allow) or str(exc.detail)
    return render_detail(framework_error(exc.status_code, message, exc.headers))


async def on_unexpected(request: Request, exc: Exception) -> Response:
    return render_detail(internal_error(exc))


def install_error_handlers(app: FastAPI) -> None:
    """Errors outside the transports' routes (no route matched, a bug) in the plain shape."""
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, on_unexpected)
