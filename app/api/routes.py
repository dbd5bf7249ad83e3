"""The op routes ``/roll`` and ``/gather``: JSON bodies and raw ``.npz`` bodies, thin handlers."""

import math
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError

from app.api.admission import MemoryBudget
from app.api.body import (
    JSON_TYPE,
    NPY_TYPE,
    NPZ_TYPE,
    media_type,
    read_body,
    wants_npy,
)
from app.api.errors import ApiError, ErrorBody, tensor_error, validation_error
from app.api.examples import GATHER_EXAMPLES, ROLL_EXAMPLES, openapi_examples
from app.pipeline.json_body import JsonBody, split_json_body
from app.api.models import GatherRequest, RollRequest, TensorResponse
from app.api.ops import OPS, Job, Limits, Op, check_shape
from app.api.responses import BuffersResponse
from app.api.tensors import (
    Form,
    check_json_text_size,
    decode_data,
    decode_index,
    encode_output,
    settle_npy_type,
)
from app.api.threads import run_sized
from app.settings import Settings
from tensor_ops_wire.dtypes import UnknownDTypeError, dtype_from_name
from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.npy import npy_buffer
from tensor_ops_wire.npz import decode_npz, inflated_size

Model = TypeVar("Model", bound=BaseModel)

REQUEST_MODELS: dict[str, type[RollRequest] | type[GatherRequest]] = {
    "roll": RollRequest,
    "gather": GatherRequest,
}
EXAMPLES = {"roll": ROLL_EXAMPLES, "gather": GATHER_EXAMPLES}


def _validate(model: type[Model], payload: dict[str, Any]) -> Model:
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        raise validation_error(error) from None


def prepare_json(op: Op, body: JsonBody, limits: Limits) -> tuple[Job, Form]:
    """Decode a JSON body for ``op`` and check it against the spec."""
    request = _validate(REQUEST_MODELS[op.name], body.parse())
    data, form = decode_data(request.data, request.dtype, limits)
    arrays = {"data": data}
    for name in op.inputs[1:]:
        arrays[name] = decode_index(getattr(request, name), name, limits)
    job = op.make_job(arrays, getattr(request, "batch_dims", 0), limits)
    if form is Form.JSON:
        check_json_text_size(math.prod(job.output_shape), limits)
    return job, form


def prepare_npz(
    op: Op, body: bytes | bytearray, query: dict[str, str], limits: Limits, max_bytes: int
) -> Job:
    """Decode an ``.npz`` body (and the query's ``batch_dims`` and ``dtype``) for ``op``."""
    batch_dims = _query_batch_dims(op, query)
    dtype = None
    if "dtype" in query:
        try:
            dtype = dtype_from_name(query["dtype"])
        except UnknownDTypeError as error:
            raise ApiError(422, ["query", "dtype"], str(error), "tensor_type") from None
    try:
        arrays = decode_npz(body, op.inputs, max_bytes=max_bytes)
    except TensorError as error:
        raise tensor_error(error, "body") from None
    for name, array in arrays.items():
        check_shape(array.shape, name, limits)
    try:
        arrays["data"] = settle_npy_type(arrays["data"], dtype)
    except TensorError as error:
        raise tensor_error(error, "data") from None
    return op.make_job(arrays, batch_dims, limits)


def _query_batch_dims(op: Op, query: dict[str, str]) -> int:
    text = query.get("batch_dims")
    if text is None:
        return 0
    if not op.takes_batch_dims:
        raise ApiError(422, ["query", "batch_dims"], f"{op.name} has no batch_dims", "extra")
    stripped = text.removeprefix("-")
    if not stripped.isdigit() or not stripped.isascii() or len(stripped) > 19:
        raise ApiError(
            422, ["query", "batch_dims"], "batch_dims must be an int64 integer", "int_parsing"
        )
    return int(text)


def _encoding_bytes(job: Job, form: Form, raw_npy: bool) -> int:
    """About what the output and its encodings hold at their peak."""
    if raw_npy:
        return 2 * job.output_bytes
    if form is Form.NPY:
        return 4 * job.output_bytes  # the output, its .npy, the base64, the JSON text
    return job.output_bytes + 32 * math.prod(job.output_shape)


def encode_raw(job: Job) -> list[Any]:
    """The raw ``.npy`` of the output, the kernel writing straight into it."""
    buffer, target = npy_buffer(job.output_shape, job.output_dtype)
    job.output(target)
    return [buffer]


def _responses() -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "model": TensorResponse,
            "description": "The output tensor: JSON for a JSON request (or its raw .npy with "
            "`Accept: application/x-npy`), raw .npy for an .npz request",
            "content": {NPY_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        },
        400: {"model": ErrorBody, "description": "The body cannot be decoded"},
        413: {"model": ErrorBody, "description": "The body or the output is over a size limit"},
        415: {"model": ErrorBody, "description": "A content type the route does not take"},
        422: {"model": ErrorBody, "description": "The request breaks the spec or the types"},
    }


def _openapi_extra(op: Op) -> dict[str, Any]:
    model = REQUEST_MODELS[op.name]
    members = ", ".join(f"`{name}.npy`" for name in op.inputs)
    parameters = [
        {
            "name": "dtype",
            "in": "query",
            "required": False,
            "description": "With an .npz body: `bfloat16` to read 2-byte `data` as bfloat16.",
            "schema": {"type": "string", "enum": ["bfloat16", "bf16", "BF16"]},
        }
    ]
    if op.takes_batch_dims:
        parameters.insert(
            0,
            {
                "name": "batch_dims",
                "in": "query",
                "required": False,
                "description": "With an .npz body: Gather-8's batch_dims (default 0).",
                "schema": {"type": "integer", "format": "int64", "default": 0},
            },
        )
    return {
        "parameters": parameters,
        "requestBody": {
            "required": True,
            "content": {
                JSON_TYPE: {
                    "schema": {"$ref": f"#/components/schemas/{model.__name__}"},
                    "examples": openapi_examples(EXAMPLES[op.name]),
                },
                NPZ_TYPE: {
                    "schema": {
                        "type": "string",
                        "format": "binary",
                        "description": f"An .npz archive (np.savez) with members {members}.",
                    }
                },
            },
        },
    }


def build_router(settings: Settings, budget: MemoryBudget) -> APIRouter:
    """The op routes, bound to the settings' limits and the worker's memory budget."""
    limits = Limits.of(settings)
    router = APIRouter()

    async def serve(request: Request, op: Op) -> Response:
        kind = media_type(request)
        if kind not in (JSON_TYPE, NPZ_TYPE, ""):
            raise ApiError(
                415,
                ["header", "content-type"],
                f"content type {kind!r} is not accepted here; send {JSON_TYPE} or {NPZ_TYPE}",
                "unsupported_media_type",
            )
        reservation = budget.reserve()
        try:
            body = await read_body(request, settings, reservation)
            large_body = len(body) > settings.offload_bytes
            if kind == NPZ_TYPE:
                inflated = await run_sized(large_body, inflated_size, body)
                await reservation.grow_to(len(body) + inflated)
                query = dict(request.query_params)
                job = await run_sized(
                    large_body, prepare_npz, op, body, query, limits, settings.max_body_bytes
                )
                await reservation.grow_to(reservation.held + 2 * job.output_bytes)
                offload = large_body or job.output_bytes > settings.offload_bytes
                buffers = await run_sized(offload, encode_raw, job)
                media = NPY_TYPE
            else:
                for name in ("dtype", "batch_dims"):
                    if name in request.query_params:
                        raise ApiError(
                            422,
                            ["query", name],
                            f"the query parameter {name} is for .npz bodies; in a JSON body "
                            "it is a field",
                            "extra_forbidden",
                        )
                json_body = split_json_body(body)
                await reservation.grow_to(len(body) + json_body.parsing_bytes())
                job, form = await run_sized(large_body, prepare_json, op, json_body, limits)
                raw_npy = wants_npy(request)
                await reservation.grow_to(reservation.held + _encoding_bytes(job, form, raw_npy))
                offload = large_body or job.output_bytes > settings.offload_bytes
                buffers, media = await run_sized(offload, encode_output, job, form, raw_npy)
        except BaseException:
            await reservation.release()
            raise
        return BuffersResponse(buffers, reservation, media)

    def add_route(op: Op, summary: str, description: str) -> None:
        async def route(request: Request) -> Response:
            return await serve(request, op)

        route.__doc__ = description
        router.add_api_route(
            f"/{op.name}",
            route,
            methods=["POST"],
            name=op.name,
            summary=summary,
            description=description,
            responses=_responses(),
            openapi_extra=_openapi_extra(op),
        )

    add_route(
        OPS["roll"],
        "Roll-7: shift elements along axes, wrapping around",
        "Roll-7 over `data`: the output has the shape and type of `data`, its elements shifted "
        "by `shift` along `axes` (repeated axes add their shifts; negative axes count from the "
        "end). Send JSON (tensors as nested arrays or base64 .npy) or an .npz archive.",
    )
    add_route(
        OPS["gather"],
        "Gather-8: take slices along an axis at given indices",
        "Gather-8 over `data`: the output shape is "
        "`data.shape[:axis] + indices.shape[batch_dims:] + data.shape[axis + 1:]`; indices "
        "outside `[-data.shape[axis], data.shape[axis] - 1]` give zeros. Send JSON (tensors as "
        "nested arrays or base64 .npy) or an .npz archive.",
    )
    return router
