"""The JSON routes ``/roll`` and ``/gather``: decode, run the kernel, encode. Nothing more."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio.to_thread
import numpy.typing as npt
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from app.api.body import JSON_TYPE, media_type, parse_json_object, read_body, wants_npy
from app.api.errors import ApiError, ErrorBody, spec_error, validation_error
from app.api.examples import GATHER_EXAMPLES, ROLL_EXAMPLES, openapi_examples
from app.api.models import GatherRequest, RollRequest, TensorResponse
from app.api.tensors import (
    Form,
    Limits,
    check_output_size,
    decode_data,
    decode_index,
    encode_output,
)
from app.ops import SpecError, gather, gather_plan, roll, roll_shifts
from app.settings import Settings

Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True)
class Job:
    """A request decoded and checked against the spec, its output not yet computed."""

    compute: Callable[[], npt.NDArray[Any]]
    form: Form
    output_bytes: int

    def run(self, raw_npy: bool) -> tuple[bytes | bytearray, str]:
        return encode_output(self.compute(), self.form, raw_npy)


def _validate(model: type[Model], payload: dict[str, Any]) -> Model:
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        raise validation_error(error) from None


def prepare_roll(body: bytes | bytearray, limits: Limits) -> Job:
    """Decode a ``/roll`` body and check it against Roll-7."""
    request = _validate(RollRequest, parse_json_object(body))
    data, form = decode_data(request.data, request.dtype, limits)
    shift = decode_index(request.shift, "shift", limits)
    axes = decode_index(request.axes, "axes", limits)
    try:
        roll_shifts(data.shape, shift, axes)
    except SpecError as error:
        raise spec_error(error) from None
    return Job(lambda: roll(data, shift, axes), form, data.nbytes)


def prepare_gather(body: bytes | bytearray, limits: Limits) -> Job:
    """Decode a ``/gather`` body, check it against Gather-8 and size its output."""
    request = _validate(GatherRequest, parse_json_object(body))
    data, form = decode_data(request.data, request.dtype, limits)
    indices = decode_index(request.indices, "indices", limits)
    axis = decode_index(request.axis, "axis", limits)
    try:
        plan = gather_plan(data.shape, indices.shape, indices.dtype, axis, request.batch_dims)
    except SpecError as error:
        raise spec_error(error) from None
    output_bytes = check_output_size(plan.output_shape, data.dtype, form, limits)
    return Job(lambda: gather(data, indices, axis, request.batch_dims), form, output_bytes)


def _responses() -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "model": TensorResponse,
            "description": "The output tensor (or its raw .npy with `Accept: application/x-npy`)",
            "content": {"application/x-npy": {"schema": {"type": "string", "format": "binary"}}},
        },
        400: {"model": ErrorBody, "description": "The body cannot be decoded"},
        413: {"model": ErrorBody, "description": "The body or the output is over a size limit"},
        415: {"model": ErrorBody, "description": "A content type the route does not take"},
        422: {"model": ErrorBody, "description": "The request breaks the spec or the types"},
    }


def _request_body(model: type[BaseModel], examples: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {
                JSON_TYPE: {
                    "schema": {"$ref": f"#/components/schemas/{model.__name__}"},
                    "examples": openapi_examples(examples),
                }
            },
        }
    }


def build_router(settings: Settings) -> APIRouter:
    """The op routes, bound to the settings' limits."""
    limits = Limits(settings.max_rank, settings.max_output_bytes)
    router = APIRouter()

    async def serve(
        request: Request, prepare: Callable[[bytes | bytearray, Limits], Job]
    ) -> Response:
        kind = media_type(request)
        if kind not in (JSON_TYPE, ""):
            raise ApiError(
                415,
                ["header", "content-type"],
                f"content type {kind!r} is not accepted here; send {JSON_TYPE}",
                "unsupported_media_type",
            )
        body = await read_body(request, settings.max_body_bytes)
        if len(body) > settings.offload_bytes:
            job = await anyio.to_thread.run_sync(prepare, body, limits)
        else:
            job = prepare(body, limits)
        raw_npy = wants_npy(request)
        if max(len(body), job.output_bytes) > settings.offload_bytes:
            content, media = await anyio.to_thread.run_sync(job.run, raw_npy)
        else:
            content, media = job.run(raw_npy)
        # A memoryview lets Starlette send a bytearray without copying it into bytes.
        return Response(content=memoryview(content), media_type=media)

    @router.post(
        "/roll",
        summary="Roll-7: shift elements along axes, wrapping around",
        responses=_responses(),
        openapi_extra=_request_body(RollRequest, ROLL_EXAMPLES),
    )
    async def roll_route(request: Request) -> Response:
        """Roll-7 over `data`: the output has the shape and type of `data`, its elements shifted
        by `shift` along `axes` (repeated axes add their shifts; negative axes count from the
        end)."""
        return await serve(request, prepare_roll)

    @router.post(
        "/gather",
        summary="Gather-8: take slices along an axis at given indices",
        responses=_responses(),
        openapi_extra=_request_body(GatherRequest, GATHER_EXAMPLES),
    )
    async def gather_route(request: Request) -> Response:
        """Gather-8 over `data`: output shape is
        `data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis + 1:]`; indices
        outside `[-data.shape[axis], data.shape[axis] - 1]` give zeros."""
        return await serve(request, prepare_gather)

    return router
