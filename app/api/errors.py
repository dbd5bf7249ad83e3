"""Client errors as HTTP responses: FastAPI's ``{"detail": [...]}`` shape, with the right status."""

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.ops.errors import SpecError
from tensor_ops_wire.errors import TensorError


class ErrorItem(BaseModel):
    """One broken rule: where (``loc``), what (``msg``) and its kind (``type``)."""

    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """The body of every client error on the plain routes."""

    detail: list[ErrorItem]


class ApiError(Exception):
    """A client error with its status and the field it concerns."""

    def __init__(self, status: int, loc: Sequence[str | int], msg: str, kind: str) -> None:
        super().__init__(msg)
        self.status = status
        self.items = [{"loc": list(loc), "msg": msg, "type": kind}]
        self.headers: dict[str, str] = {}

    @classmethod
    def from_items(cls, status: int, items: list[dict[str, Any]]) -> "ApiError":
        error = cls(status, [], "", "")
        error.items = items
        return error


def spec_error(error: SpecError) -> ApiError:
    """422 for an input that breaks the op's spec, located at that input."""
    return ApiError(422, ["body", error.field], error.message, "spec_violation")


def tensor_error(error: TensorError, field: str) -> ApiError:
    """The status of a codec fault, located at its input (or at the field that held it)."""
    return ApiError(error.status, ["body", error.field or field], error.message, error.kind)


def validation_error(error: ValidationError) -> ApiError:
    """422 for an envelope pydantic refused; the offending input is never echoed back."""
    items = [
        {"loc": ["body", *item["loc"]], "msg": item["msg"], "type": item["type"]}
        for item in error.errors(include_url=False, include_input=False, include_context=False)
    ]
    return ApiError.from_items(422, items)


def error_response(
    status: int, items: list[dict[str, Any]], headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps({"detail": items}), status, headers=headers, media_type="application/json"
    )


def _is_v2(request: Request) -> bool:
    return request.url.path == "/v2" or request.url.path.startswith("/v2/")


def v2_error_response(
    status: int, items: list[dict[str, Any]], headers: Mapping[str, str] | None = None
) -> Response:
    """The KServe V2 error shape, ``{"error": "..."}``, with the location in words."""
    messages = []
    for item in items:
        where = ".".join(str(part) for part in item["loc"] if part != "body")
        messages.append(f"{where}: {item['msg']}" if where else item["msg"])
    return Response(
        orjson.dumps({"error": "; ".join(messages)}),
        status,
        headers=headers,
        media_type="application/json",
    )


def _respond(
    request: Request, status: int, items: list[dict[str, Any]], headers: Mapping[str, str] | None
) -> Response:
    if _is_v2(request):
        return v2_error_response(status, items, headers)
    return error_response(status, items, headers)


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _respond(request, exc.status, exc.items, exc.headers)


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    items = [{"loc": [], "msg": str(exc.detail), "type": "http"}]
    return _respond(request, exc.status_code, items, exc.headers)


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    # A bug: answer in the same shape, without leaking a traceback to the client.
    items = [{"loc": [], "msg": "internal server error", "type": "internal"}]
    return _respond(request, 500, items, None)


def install_error_handlers(app: FastAPI) -> None:
    """Route every error to one JSON shape."""
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)
