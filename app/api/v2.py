"""The KServe V2 / Open Inference Protocol under ``/v2``, with Triton's binary data extension."""

import math
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from pydantic import ValidationError

from app.api.admission import MemoryBudget
from app.api.body import read_body
from app.api.errors import ApiError, tensor_error, validation_error
from app.pipeline.json_body import split_json_body
from app.api.ops import OPS, Job, Limits, Op, check_shape
from app.api.responses import BuffersResponse
from app.api.tensors import check_json_text_size, require_json_can_carry
from app.api.threads import run_sized
from app.api.v2_models import (
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    RequestInput,
    ServerMetadata,
    V2Error,
)
from app.settings import Settings
from tensor_ops_wire.dtypes import ELEMENT_TYPES
from tensor_ops_wire.errors import TensorError
from app.tensors.kserve import (
    decode_v2_binary,
    decode_v2_json,
    v2_datatype,
    v2_json_data,
    v2_output_buffer,
)

SERVER_NAME = "tensor-ops"
SERVER_VERSION = "0.1.0"
MODEL_VERSION = "1"
HEADER_LENGTH = "inference-header-content-length"
EXTENSIONS = ["binary_tensor_data"]
_DATA_TYPES = [e.kserve for e in ELEMENT_TYPES]


# Documented as enums; checked by _model, so that an unknown name is the protocol's 404.
ModelName = Annotated[
    str, Path(description="The model: roll or gather", json_schema_extra={"enum": list(OPS)})
]
ModelVersion = Annotated[
    str,
    Path(description="The model's version: 1", json_schema_extra={"enum": [MODEL_VERSION]}),
]


def _v2_error(status: int, message: str) -> ApiError:
    return ApiError(status, [], message, "v2")


def _model(name: str, version: str | None = None) -> Op:
    op = OPS.get(name)
    if op is None:
        raise _v2_error(404, f"model {name[:64]!r} is not served here; models: {', '.join(OPS)}")
    if version is not None and version != MODEL_VERSION:
        raise _v2_error(404, f"model {name!r} has no version {version[:16]!r}; versions: 1")
    return op


def model_metadata(op: Op) -> dict[str, Any]:
    """Inputs and output of ``op``: -1 marks a dimension of any size; ``parameters`` lists every
    datatype a tensor may have, its ``datatype`` being the one JSON clients get by default."""

    def tensor(name: str) -> dict[str, Any]:
        types = op.index_types.get(name)
        datatypes = [e.kserve for e in ELEMENT_TYPES if e.numpy in types] if types else _DATA_TYPES
        return {
            "name": name,
            "datatype": "INT64" if types else "FP32",
            "shape": [-1],
            "parameters": {"datatypes": datatypes, "rank": "any" if name != "axis" else "0 or 1"},
        }

    metadata: dict[str, Any] = {
        "name": op.name,
        "versions": [MODEL_VERSION],
        "platform": "openvino_opset",
        "inputs": [tensor(name) for name in op.inputs],
        "outputs": [
            {
                "name": "output",
                "datatype": "FP32",
                "shape": [-1],
                "parameters": {"datatypes": _DATA_TYPES, "rank": "any"},
            }
        ],
    }
    if op.takes_batch_dims:
        metadata["parameters"] = {"batch_dims": "int64 request parameter, default 0"}
    return metadata


def _split(body: bytearray, header_length: str | None) -> tuple[bytes | bytearray, memoryview]:
    if header_length is None:
        return body, memoryview(b"")
    if not header_length.isdigit() or int(header_length) > len(body):
        raise _v2_error(
            400, f"Inference-Header-Content-Length {header_length[:20]!r} does not fit the body"
        )
    split = int(header_length)
    view = memoryview(body)
    return view[:split].tobytes(), view[split:]


def _batch_dims(op: Op, parameters: dict[str, Any] | None) -> int:
    value = (parameters or {}).get("batch_dims")
    if value is None:
        return 0
    if not op.takes_batch_dims:
        raise _v2_error(400, f"model {op.name!r} takes no batch_dims parameter")
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise ApiError(422, ["parameters", "batch_dims"], "must be an int64 integer", "v2")
    return value


def _decode_input(item: RequestInput, chunk: memoryview | None, limits: Limits) -> Any:
    check_shape(item.shape, item.name, limits)
    try:
        if chunk is not None:
            return decode_v2_binary(chunk, item.shape, item.datatype)
        if item.data is None:
            raise TensorError("has neither data nor parameters.binary_data_size")
        return decode_v2_json(item.data, item.shape, item.datatype)
    except TensorError as error:
        raise tensor_error(error, item.name) from None


def _wants_binary(request: InferenceRequest) -> bool:
    for output in request.outputs or []:
        if output.name != "output":
            raise _v2_error(400, f"unknown output {output.name[:64]!r}; the output is 'output'")
        if output.parameters and "binary_data" in output.parameters:
            return bool(output.parameters["binary_data"])
    return bool((request.parameters or {}).get("binary_data_output", False))


def prepare_infer(
    op: Op, body: bytearray, header_length: str | None, limits: Limits
) -> tuple[Job, InferenceRequest, bool]:
    """Decode an infer request (JSON, or JSON then binary tensors) and check it against the spec."""
    head, binary = _split(body, header_length)
    try:
        payload = orjson.loads(head)
    except orjson.JSONDecodeError as error:
        raise _v2_error(400, f"request is not valid JSON: {error}") from None
    try:
        request = InferenceRequest.model_validate(payload)
    except ValidationError as error:
        raise validation_error(error) from None
    arrays = {}
    offset = 0
    for item in request.inputs:
        if item.name not in op.inputs:
            raise _v2_error(
                400, f"unknown input {item.name[:64]!r}; {op.name} takes {', '.join(op.inputs)}"
            )
        if item.name in arrays:
            raise _v2_error(400, f"input {item.name!r} is given twice")
        size = (item.parameters or {}).get("binary_data_size")
        chunk = None
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise _v2_error(
                    400, f"input {item.name!r}: binary_data_size must be a non-negative integer"
                )
            chunk = binary[offset : offset + size]
            if len(chunk) != size:
                raise _v2_error(
                    400, f"input {item.name!r}: binary_data_size {size} passes the end of the body"
                )
            offset += size
        arrays[item.name] = _decode_input(item, chunk, limits)
    if offset != len(binary):
        raise _v2_error(
            400, f"the body has {len(binary) - offset} bytes of binary data no input claims"
        )
    missing = [name for name in op.inputs if name not in arrays]
    if missing:
        raise _v2_error(
            400, f"missing input {missing[0]!r}; {op.name} takes {', '.join(op.inputs)}"
        )
    binary_output = _wants_binary(request)
    job = op.make_job(arrays, _batch_dims(op, request.parameters), limits)
    if not binary_output:
        check_json_text_size(math.prod(job.output_shape), limits)
    return job, request, binary_output


def encode_infer(
    job: Job, op: Op, request: InferenceRequest, binary: bool
) -> tuple[list[Any], dict[str, str]]:
    """The response body (buffers to send in turn) and its headers."""
    output = job.output(v2_output_buffer(job.output_shape, job.output_dtype) if binary else None)
    tensor: dict[str, Any] = {
        "name": "output",
        "datatype": v2_datatype(output.dtype),
        "shape": list(output.shape),
    }
    response: dict[str, Any] = {"model_name": op.name, "model_version": MODEL_VERSION}
    if request.id is not None:
        response["id"] = request.id
    response["outputs"] = [tensor]
    if not binary:
        require_json_can_carry(
            output,
            ["outputs", "output"],
            'ask for it as binary data ("outputs": [{"name": "output", "parameters": '
            '{"binary_data": true}}])',
        )
        tensor["data"] = v2_json_data(output)
        body = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
        return [body], {"content-type": "application/json"}
    tensor["parameters"] = {"binary_data_size": output.nbytes}
    head = orjson.dumps(response)
    headers = {"content-type": "application/octet-stream", HEADER_LENGTH: str(len(head))}
    return [head, output], headers


def build_v2_router(settings: Settings, budget: MemoryBudget) -> APIRouter:
    """The ``/v2`` routes."""
    limits = Limits.of(settings)
    router = APIRouter(prefix="/v2", tags=["KServe V2"])
    errors: dict[int | str, dict[str, Any]] = {
        status: {"model": V2Error, "description": words}
        for status, words in [
            (400, "The request cannot be decoded or is inconsistent"),
            (404, "No such model or version"),
            (413, "The body or the output is over a size limit"),
            (415, "An unsupported content type or encoding"),
            (422, "The request breaks the op's spec or types"),
        ]
    }

    @router.get("/health/live", summary="Server liveness")
    async def live() -> dict[str, bool]:
        return {"live": True}

    @router.get("/health/ready", summary="Server readiness")
    async def ready(request: Request) -> Response:
        if getattr(request.app.state, "ready", True):
            return Response(b'{"ready":true}', 200, media_type="application/json")
        return Response(b'{"ready":false}', 503, media_type="application/json")

    @router.get("", summary="Server metadata", response_model=ServerMetadata)
    async def server_metadata() -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS}

    async def metadata(name: ModelName) -> dict[str, Any]:
        return model_metadata(_model(name))

    async def version_metadata(name: ModelName, version: ModelVersion) -> dict[str, Any]:
        return model_metadata(_model(name, version))

    async def model_ready(name: ModelName) -> dict[str, Any]:
        return {"name": _model(name).name, "ready": True}

    async def version_ready(name: ModelName, version: ModelVersion) -> dict[str, Any]:
        return {"name": _model(name, version).name, "ready": True}

    for path, handler, summary in (
        ("/models/{name}", metadata, "Model metadata"),
        ("/models/{name}/versions/{version}", version_metadata, "Model metadata (one version)"),
    ):
        router.add_api_route(
            path, handler, summary=summary, response_model=ModelMetadata, responses=errors
        )
    for path, handler, summary in (
        ("/models/{name}/ready", model_ready, "Model readiness"),
        ("/models/{name}/versions/{version}/ready", version_ready, "Model readiness (one version)"),
    ):
        router.add_api_route(path, handler, summary=summary, responses=errors)

    infer_body = {
        "requestBody": {
            "required": True,
            "description": "JSON, or with `Inference-Header-Content-Length: N` a JSON header of N "
            "bytes followed by the binary tensors (`parameters.binary_data_size` each); may be "
            "sent with `Content-Encoding: gzip` or `deflate`.",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/InferenceRequest"}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
            },
        }
    }
    infer_responses = {
        200: {
            "model": InferenceResponse,
            "description": "JSON, or with binary output the JSON header then the output's bytes",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        },
        **errors,
    }

    async def infer(request: Request, name: ModelName) -> Response:
        return await serve_infer(request, _model(name))

    async def version_infer(request: Request, name: ModelName, version: ModelVersion) -> Response:
        return await serve_infer(request, _model(name, version))

    async def serve_infer(request: Request, op: Op) -> Response:
        reservation = budget.reserve()
        try:
            body = await read_body(request, settings, reservation)
            large = len(body) > settings.offload_bytes
            header_length = request.headers.get(HEADER_LENGTH)
            json_part = (
                body[: int(header_length)] if header_length and header_length.isdigit() else body
            )
            await reservation.grow_to(len(body) + split_json_body(json_part).parsing_bytes())
            job, parsed, binary = await run_sized(
                large, prepare_infer, op, body, header_length, limits
            )
            count = math.prod(job.output_shape)
            encoded = 2 * job.output_bytes if binary else 32 * count
            await reservation.grow_to(reservation.held + job.output_bytes + encoded)
            offload = large or job.output_bytes > settings.offload_bytes
            content, headers = await run_sized(offload, encode_infer, job, op, parsed, binary)
        except BaseException:
            await reservation.release()
            raise
        media = headers.pop("content-type")
        return BuffersResponse(content, reservation, media, headers)

    for path, endpoint, summary in (
        ("/models/{name}/infer", infer, "Inference: run the op"),
        ("/models/{name}/versions/{version}/infer", version_infer, "Inference (one version)"),
    ):
        router.add_api_route(
            path,
            endpoint,
            methods=["POST"],
            summary=summary,
            responses=infer_responses,
            openapi_extra=infer_body,
        )
    return router
