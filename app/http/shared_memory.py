"""Triton's system shared memory over HTTP: ``/v2/systemsharedmemory`` (register, unregister,
status) and ``/v2/cudasharedmemory`` (refused), over the worker's regions, and the ``/v2``
answer of a job whose output went to a region."""

from enum import Enum
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from app.codecs.v2_tensors import v2_datatype
from app.errors import Fault
from app.http.body import read_small_body
from app.pipeline.jobs import Job
from app.pipeline.run import Answer
from app.v2 import shm_guard
from app.v2.messages import V2Error
from app.v2.rules import OUTPUT_NAME, json_kind, model_version
from app.v2.shared_memory import (
    CUDA_REFUSAL,
    REGISTER_BODY_LIMIT,
    Owner,
    Regions,
    SharedTensors,
    refused,
)


def http_answer(job: Job, request_id: str | None, shared: SharedTensors) -> Answer:
    """The ``/v2`` answer of a job whose output goes to shared memory: JSON, no data."""
    response: dict[str, Any] = {"model_name": job.op.name, "model_version": model_version(job.op)}
    if request_id is not None:
        response["id"] = request_id
    if job.split is not None:
        response["outputs"] = [
            {"name": name, "datatype": datatype, "shape": list(shape), "parameters": parameters}
            for name, shape, datatype, parameters in shared.run_several(job)
        ]
        return Answer([orjson.dumps(response)], "application/json")
    parameters = shared.run(job)
    response["outputs"] = [
        {
            "name": OUTPUT_NAME,
            "datatype": v2_datatype(job.output_dtype),
            "shape": list(job.output_shape),
            "parameters": parameters,
        }
    ]
    return Answer([orjson.dumps(response)], "application/json")


class RegisterRequest(BaseModel):
    """A region to register: ``byte_size`` bytes of object ``key`` from ``offset``."""

    key: str = Field(description="The POSIX shared memory object, '/name' as shm_open takes it")
    offset: int = Field(0, ge=0, description="Where the region begins in the object")
    byte_size: int = Field(ge=1, description="The region's size in bytes")


class RegionStatus(BaseModel):
    """A registered region."""

    name: str
    key: str
    offset: int
    byte_size: int


_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": V2Error, "description": words}
    for status, words in [
        (400, "Refused: a bad name, key, offset or size, an unknown region, or not offered"),
        (413, "The body is too large, or the worker holds as many regions as it may"),
        (422, "A field of the body is missing"),
    ]
}
#: Register and unregister answer 200 with an empty body, as Triton does.
_DONE: dict[str, Any] = {"description": "Done (an empty body)", "content": {}}
_REGISTER_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": RegisterRequest.model_json_schema()}},
    }
}


async def _register_body(request: Request) -> dict[str, Any]:
    body = await read_small_body(
        request,
        request.app.state.settings,
        REGISTER_BODY_LIMIT,
        f"a register request holds a key, an offset and a size: at most {REGISTER_BODY_LIMIT} "
        "bytes",
    )
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise refused(
            ("body",), f"request is not valid JSON: {error}", Fault.JSON_INVALID
        ) from None
    if not isinstance(payload, dict):
        raise refused(
            ("body",),
            f'the body must be a JSON object {{"key", "offset", "byte_size"}}, got '
            f"{json_kind(payload)}",
        )
    for field in ("key", "byte_size"):
        if field not in payload:
            raise refused(("body", field), f"{field} is missing", Fault.MISSING_INPUT)
    return payload


def _json(value: Any) -> Response:
    return Response(orjson.dumps(value), 200, media_type="application/json")


def request_owner(request: Request) -> Owner:
    """The label of the API key an HTTP request was admitted with (None: keys are off), put in
    its scope's state by the observer (app/http/observer.py)."""
    owner = request.scope.get("state", {}).get("key")
    return owner if isinstance(owner, str) else None


def add_shared_memory_routes(router: APIRouter, regions: Regions) -> None:
    """Triton's shared memory routes over ``regions``, under the router's ``/v2``."""
    tags: list[str | Enum] = ["KServe V2: shared memory"]

    async def register(request: Request, name: str) -> Response:
        regions.require_enabled()
        body = await _register_body(request)
        owner = request_owner(request)
        key, offset, size = body["key"], body.get("offset", 0), body["byte_size"]
        regions.check_registration(name, key, offset, size, owner)  # refusals before the guard
        await shm_guard.ready()
        regions.register(
            name, body["key"], body.get("offset", 0), body["byte_size"], request_owner(request)
        )
        return Response(b"", 200)

    async def unregister_all(request: Request) -> Response:
        regions.unregister("", request_owner(request))
        return Response(b"", 200)

    async def unregister(request: Request, name: str) -> Response:
        regions.unregister(name, request_owner(request))
        return Response(b"", 200)

    async def status_all(request: Request) -> Response:
        return _json(regions.status("", request_owner(request)))

    async def status(request: Request, name: str) -> Response:
        return _json(regions.status(name, request_owner(request)))

    async def cuda(request: Request) -> Response:
        raise refused((), CUDA_REFUSAL, Fault.NOT_OFFERED)

    system = "/systemsharedmemory"
    router.add_api_route(
        f"{system}/region/{{name}}/register",
        register,
        methods=["POST"],
        summary="Register a region of a shared memory object",
        tags=tags,
        response_class=Response,
        responses={200: _DONE, **_RESPONSES},
        openapi_extra=_REGISTER_BODY,
    )
    for path, endpoint, summary in (
        (f"{system}/unregister", unregister_all, "Unregister every region"),
        (f"{system}/region/{{name}}/unregister", unregister, "Unregister a region"),
    ):
        router.add_api_route(
            path,
            endpoint,
            methods=["POST"],
            summary=summary,
            tags=tags,
            response_class=Response,
            responses={200: _DONE, **_RESPONSES},
        )
    for path, endpoint, summary in (
        (f"{system}/status", status_all, "Every region registered"),
        (f"{system}/region/{{name}}/status", status, "A region registered"),
    ):
        router.add_api_route(
            path,
            endpoint,
            methods=["GET"],
            summary=summary,
            tags=tags,
            responses={200: {"model": list[RegionStatus]}, **_RESPONSES},
        )
    cuda_paths = [
        ("/cudasharedmemory/region/{name}/register", "POST"),
        ("/cudasharedmemory/unregister", "POST"),
        ("/cudasharedmemory/region/{name}/unregister", "POST"),
        ("/cudasharedmemory/status", "GET"),
        ("/cudasharedmemory/region/{name}/status", "GET"),
    ]
    for path, method in cuda_paths:
        router.add_api_route(path, cuda, methods=[method], include_in_schema=False)
