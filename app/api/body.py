"""Reading request bodies: content type, size limit before and while reading, JSON parsing."""

from typing import Any

import orjson
from fastapi import Request

from app.api.errors import ApiError

JSON_TYPE = "application/json"
NPY_TYPE = "application/x-npy"
NPZ_TYPE = "application/x-npz"


def media_type(request: Request) -> str:
    """The request's media type, lower-cased, without parameters ('' when absent)."""
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def wants_npy(request: Request) -> bool:
    """True when the client asked for the raw ``.npy`` of the output."""
    return NPY_TYPE in request.headers.get("accept", "").lower()


def _too_large(size: str, limit: int) -> ApiError:
    return ApiError(
        413,
        ["body"],
        f"request body of {size} is larger than the limit of {limit} bytes "
        "(raise it with TENSOR_OPS_MAX_BODY_BYTES)",
        "too_large",
    )


async def read_body(request: Request, limit: int) -> bytearray:
    """The whole body, refused with 413 as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length")
    expected = 0
    if declared is not None:
        if not declared.isdigit():
            raise ApiError(
                400, ["header", "content-length"], "Content-Length is not a number", "bad_header"
            )
        expected = int(declared)
        if expected > limit:
            raise _too_large(f"{expected} bytes", limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(f"more than {limit} bytes", limit)
    return body


def parse_json_object(body: bytes | bytearray) -> dict[str, Any]:
    """The body as a JSON object; 400 when it is not JSON, 422 when it is not an object."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise ApiError(400, ["body"], f"body is not valid JSON: {error}", "json_invalid") from None
    if not isinstance(payload, dict):
        raise ApiError(
            422, ["body"], f"body must be a JSON object, got {type(payload).__name__}", "model_type"
        )
    return payload
