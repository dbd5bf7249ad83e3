"""The KServe V2 / Open Inference Protocol under ``/v2``, with Triton's binary data extension.

An adapter of the request pipeline: where V2 puts inputs and parameters, how it frames binary
tensors, how it writes its answer and its ``{"error"}``.
"""

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from app.errors import Fault, ServiceError, from_validation, from_wire, quote
from app.pipeline.jobs import Job, Limits, check_shape, make_job
from app.pipeline.json_body import parsing_bytes
from app.pipeline.responses import serve_http
from app.pipeline.run import Answer, Body, Pipeline
from app.registry import REGISTRY, Op, attribute_names
from app.transports.errors import framework_error, render_v2
from app.transports.http import JSON_TYPE, media_type
from app.transports.kserve import (
    decode_v2_binary,
    decode_v2_json,
    v2_datatype,
    v2_json_data,
    v2_output_buffer,
)
from app.transports.tensors import (
    check_json_text_size,
    json_encoding_bytes,
    require_json_can_carry,
)
from app.transports.v2_models import (
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    RequestInput,
    ServerMetadata,
    V2Error,
)
from app.version import VERSION
from tensor_ops_wire.dtypes import ELEMENT_TYPES
from tensor_ops_wire.errors import TensorError

SERVER_NAME = "tensor-ops"

MODEL_VERSION = "1"
HEADER_LENGTH = "inference-header-content-length"
_LENGTH_DIGITS = 19
BINARY_TYPE = "application/octet-stream"
EXTENSIONS = ["binary_tensor_data"]
_DATA_TYPES = [e.kserve for e in ELEMENT_TYPES]
#: What the V2 routes read: JSON, or JSON then binary tensors (tritonclient sends no type).
_READABLE = (JSON_TYPE, BINARY_TYPE, "")

#: The kind of a protocol parameter of a wrong type or of an extension not served (400).
PARAMETER_FAULT = Fault.BAD_PARAMETER
_SHARED_MEMORY = "Triton's shared memory extension"
#: Parameters of extensions this service does not implement, to the extension they belong to.
#: Any other parameter is the client's own and is ignored, as the protocol allows.
_INPUT_EXTENSIONS = {
    "shared_memory_region": _SHARED_MEMORY,
    "shared_memory_byte_size": _SHARED_MEMORY,
    "shared_memory_offset": _SHARED_MEMORY,
}
_OUTPUT_EXTENSIONS = {**_INPUT_EXTENSIONS, "classification": "Triton's classification extension"}


# Documented as enums; checked by _model, so that an unknown name is the protocol's 404.
ModelName = Annotated[
    str, Path(description="The model: roll or gather", json_schema_extra={"enum": list(REGISTRY)})
]
ModelVersion = Annotated[
    str,
    Path(description="The model's version: 1", json_schema_extra={"enum": [MODEL_VERSION]}),
]


def _model(name: str, version: str | None = None) -> Op:
    op = REGISTRY.get(name)
    if op is None:
        raise ServiceError(
            Fault.NOT_FOUND,
            ("model",),
            f"model {quote(name)} is not served here; models: {', '.join(REGISTRY)}",
        )
    if version is not None and version != MODEL_VERSION:
        raise ServiceError(
            Fault.NOT_FOUND,
            ("model",),
            f"model {name!r} has no version {quote(version)}; versions: {MODEL_VERSION}",
        )
    return op


def model_metadata(op: Op) -> dict[str, Any]:
    """Inputs and output of ``op``: -1 marks a dimension of any size; ``parameters`` lists every
    datatype a tensor may have, its ``datatype`` being the one JSON clients get by default."""

    def tensor(name: str, types: tuple[str, ...], rank: str) -> dict[str, Any]:
        datatypes = [e.kserve for e in ELEMENT_TYPES if e.numpy in types]
        return {
            "name": name,
            "datatype": "FP32" if "float32" in types else "INT64",
            "shape": [-1],
            "parameters": {"datatypes": datatypes, "rank": rank},
        }

    metadata: dict[str, Any] = {
        "name": op.name,
        "versions": [MODEL_VERSION],
        "platform": "openvino_opset",
        "inputs": [tensor(item.name, item.element_types, item.rank) for item in op.inputs],
        "outputs": [tensor("output", op.inputs[0].element_types, "any")],
    }
    if op.attributes:
        metadata["parameters"] = {
            item.name: f"int64 request parameter, default {item.default}" for item in op.attributes
        }
    return metadata


class V2Exchange:
    """One infer request: a JSON body, or a JSON header then the binary tensors it sizes."""

    def __init__(self, op: Op, header_length: str | None) -> None:
        # A byte count in ASCII digits; past 19 of them it passes any body (and int() refuses
        # 4300 of them), so it is refused before int() sees it.
        if header_length is not None and not (
            header_length.isascii()
            and header_length.isdigit()
            and len(header_length.lstrip("0")) <= _LENGTH_DIGITS
        ):
            raise ServiceError(
                Fault.BAD_HEADER,
                ("header", HEADER_LENGTH),
                f"Inference-Header-Content-Length {quote(header_length)} does not fit the body: "
                "it is not a byte count of at most 19 digits",
            )
        self.op = op
        self.header_length = None if header_length is None else int(header_length)
        self.head: Body = b""
        self.binary = memoryview(b"")
        self.request: InferenceRequest | None = None
        self.binary_output = False
        self.text_bytes = 0

    def prepare(self, body: Body) -> int:
        if self.header_length is None:
            self.head = body
        else:
            if self.header_length > len(body):
                raise ServiceError(
                    Fault.BAD_HEADER,
                    ("header", HEADER_LENGTH),
                    f"Inference-Header-Content-Length {self.header_length} does not fit the body "
                    f"of {len(body)} bytes",
                )
            view = memoryview(body)
            self.head = view[: self.header_length].tobytes()
            self.binary = view[self.header_length :]
        return parsing_bytes(self.head)

    def decode(self, limits: Limits) -> Job:
        try:
            payload = orjson.loads(self.head)
        except orjson.JSONDecodeError as error:
            raise ServiceError(
                Fault.JSON_INVALID, ("body",), f"request is not valid JSON: {error}"
            ) from None
        try:
            request = InferenceRequest.model_validate(payload)
        except ValidationError as error:
            raise from_validation(error) from None
        self.request = request
        arrays = self._inputs(request, limits)
        self.binary_output = _wants_binary(request)
        job = make_job(self.op, arrays, self._attributes(request), limits)
        if not self.binary_output:
            # V2 JSON data is flat: the text of a 1-D array of the output's elements.
            self.text_bytes = check_json_text_size(
                (job.output_count,), job.output_dtype, limits.max_output_bytes
            )
        return job

    def _inputs(self, request: InferenceRequest, limits: Limits) -> dict[str, Any]:
        op = self.op
        arrays = {}
        offset = 0
        for item in request.inputs:
            if item.name not in op.input_names:
                raise ServiceError(
                    Fault.UNKNOWN_INPUT,
                    ("body", item.name),
                    f"unknown input {quote(item.name)}; {op.name} takes "
                    f"{', '.join(op.input_names)}",
                )
            if item.name in arrays:
                raise ServiceError(
                    Fault.TENSOR_DECODE, ("body", item.name), f"input {item.name!r} is given twice"
                )
            size = _binary_data_size(item)
            check_shape(item.shape, item.name, limits)
            chunk = None
            if size is not None:
                chunk = self.binary[offset : offset + size]
                if len(chunk) != size:
                    raise ServiceError(
                        Fault.TENSOR_DECODE,
                        ("body", item.name),
                        f"binary_data_size {size} passes the end of the body",
                    )
                offset += size
            arrays[item.name] = _decode_input(item, chunk)
        if offset != len(self.binary):
            raise ServiceError(
                Fault.TENSOR_DECODE,
                ("body",),
                f"the body has {len(self.binary) - offset} bytes of binary data no input claims",
            )
        for name in op.input_names:
            if name not in arrays:
                raise ServiceError(
                    Fault.MISSING_INPUT,
                    ("body", name),
                    f"missing input {name!r}; {op.name} takes {', '.join(op.input_names)}",
                )
        return arrays

    def _attributes(self, request: InferenceRequest) -> dict[str, int]:
        parameters = request.parameters or {}
        attributes = self.op.attribute_defaults()
        for name in attribute_names().intersection(parameters):
            value = parameters[name]
            if name not in attributes:
                raise ServiceError(
                    Fault.UNKNOWN_INPUT,
                    ("body", name),
                    f"model {self.op.name!r} takes no {name} parameter",
                )
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not -(2**63) <= value < 2**63
            ):
                raise ServiceError(
                    Fault.INVALID_FIELD, ("body", "parameters", name), "must be an int64 integer"
                )
            attributes[name] = value
        return attributes

    def encoding_bytes(self, job: Job) -> int:
        if self.binary_output:
            return 2 * job.output_bytes
        return json_encoding_bytes(job, self.text_bytes)

    def encode(self, job: Job) -> Answer:
        assert self.request is not None
        buffers, headers = encode_infer(job, self.request, self.binary_output)
        media = headers.pop("content-type")
        return Answer(buffers, media, headers)


def v2_exchange(op: Op, request: Request) -> V2Exchange:
    """The adapter of one infer request; 415 for a body V2 cannot read as JSON or binary tensors."""
    kind = media_type(request)
    if kind not in _READABLE:
        raise ServiceError(
            Fault.UNSUPPORTED_MEDIA_TYPE,
            ("header", "content-type"),
            f"content type {quote(kind)} is not accepted here; send {JSON_TYPE}, or "
            f"{BINARY_TYPE} with an Inference-Header-Content-Length header",
        )
    return V2Exchange(op, request.headers.get(HEADER_LENGTH))


def _decode_input(item: RequestInput, chunk: memoryview | None) -> Any:
    try:
        if chunk is not None:
            return decode_v2_binary(chunk, item.shape, item.datatype)
        if item.data is None:
            raise TensorError("has neither data nor parameters.binary_data_size")
        return decode_v2_json(item.data, item.shape, item.datatype)
    except TensorError as error:
        raise from_wire(error, item.name) from None


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "null"


def _refuse_extensions(
    parameters: dict[str, Any], extensions: dict[str, str], loc: tuple[str, ...], advice: str
) -> None:
    # A parameter of an extension not served here is refused, never ignored: ignoring it would
    # answer something other than what the client asked for (the tensor from shared memory).
    refused = sorted(extensions.keys() & parameters.keys())
    if refused:
        name = refused[0]
        raise ServiceError(
            PARAMETER_FAULT,
            (*loc, name),
            f"{name} is a parameter of {extensions[name]}, which is not supported here; {advice}",
        )


def _boolean(parameters: dict[str, Any], name: str, loc: tuple[str, ...]) -> bool | None:
    """The boolean parameter ``name`` (None when absent); any other JSON value is refused (a
    string "false" is not false)."""
    if name not in parameters:
        return None
    value = parameters[name]
    if not isinstance(value, bool):
        raise ServiceError(
            PARAMETER_FAULT,
            (*loc, name),
            f"{name} must be a boolean (true or false), got {_json_kind(value)}",
        )
    return value


def _binary_data_size(item: RequestInput) -> int | None:
    """The input's ``binary_data_size`` (None when its data is JSON), its parameters checked."""
    parameters = item.parameters or {}
    loc = ("body", item.name, "parameters")
    _refuse_extensions(
        parameters,
        _INPUT_EXTENSIONS,
        loc,
        "send the tensor in the request, as JSON data or as binary data (binary_data_size)",
    )
    if "binary_data_size" not in parameters:
        return None
    size = parameters["binary_data_size"]
    if isinstance(size, bool) or not isinstance(size, int):
        got = _json_kind(size)
    elif size < 0:
        got = "a negative one"
    else:
        return size
    raise ServiceError(
        PARAMETER_FAULT,
        (*loc, "binary_data_size"),
        f"binary_data_size must be a non-negative integer, got {got}",
    )


def _wants_binary(request: InferenceRequest) -> bool:
    """Whether the output goes as binary data: its own ``binary_data`` parameter, else the
    request's ``binary_data_output``, else not (JSON)."""
    wanted = _boolean(request.parameters or {}, "binary_data_output", ("body", "parameters"))
    own: bool | None = None
    for output in request.outputs or []:
        if output.name != "output":
            raise ServiceError(
                Fault.UNKNOWN_INPUT,
                ("body",),
                f"unknown output {quote(output.name)}; the output is 'output'",
            )
        parameters = output.parameters or {}
        loc = ("body", "output", "parameters")
        _refuse_extensions(
            parameters,
            _OUTPUT_EXTENSIONS,
            loc,
            "the output comes in the response, as JSON data or as binary data (binary_data)",
        )
        given = _boolean(parameters, "binary_data", loc)
        if own is None:
            own = given
    if own is not None:
        return own
    return bool(wanted)


def encode_infer(
    job: Job, request: InferenceRequest, binary: bool
) -> tuple[list[Any], dict[str, str]]:
    """The response body (buffers to send in turn) and its headers."""
    output = job.output(v2_output_buffer(job.output_shape, job.output_dtype) if binary else None)
    tensor: dict[str, Any] = {
        "name": "output",
        "datatype": v2_datatype(output.dtype),
        "shape": list(output.shape),
    }
    response: dict[str, Any] = {"model_name": job.op.name, "model_version": MODEL_VERSION}
    if request.id is not None:
        response["id"] = request.id
    response["outputs"] = [tensor]
    if not binary:
        require_json_can_carry(
            output,
            ("outputs", "output"),
            'ask for it as binary data ("outputs": [{"name": "output", "parameters": '
            '{"binary_data": true}}])',
        )
        tensor["data"] = v2_json_data(output)
        body = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
        return [body], {"content-type": JSON_TYPE}
    tensor["parameters"] = {"binary_data_size": output.nbytes}
    head = orjson.dumps(response)
    headers = {"content-type": BINARY_TYPE, HEADER_LENGTH: str(len(head))}
    return [head, output], headers


class V2Route(APIRoute):
    """A ``/v2`` route: every refusal in the protocol's ``{"error"}`` shape, the framework's
    own (a wrong method) included."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except ServiceError as error:
                return render_v2(error)

        return guarded

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.methods and scope["method"] not in self.methods:
            error = framework_error(405, "Method Not Allowed", {"Allow": ", ".join(self.methods)})
            await render_v2(error)(scope, receive, send)
            return
        await super().handle(scope, receive, send)


def build_v2_router(pipeline: Pipeline) -> APIRouter:
    """The ``/v2`` routes."""
    router = APIRouter(prefix="/v2", tags=["KServe V2"], route_class=V2Route)
    errors: dict[int | str, dict[str, Any]] = {
        status: {"model": V2Error, "description": words}
        for status, words in [
            (400, "The request cannot be decoded or is inconsistent"),
            (404, "No such model or version"),
            (413, "The body or the output is over a size limit"),
            (415, "An unsupported content type or encoding"),
            (422, "The request breaks the op's spec or types"),
            (503, "The memory budget is busy; retry later"),
        ]
    }

    @router.get("/health/live", summary="Server liveness")
    async def live() -> dict[str, bool]:
        return {"live": True}

    @router.get("/health/ready", summary="Server readiness")
    async def ready(request: Request) -> Response:
        if getattr(request.app.state, "ready", True):
            return Response(b'{"ready":true}', 200, media_type=JSON_TYPE)
        return Response(b'{"ready":false}', 503, media_type=JSON_TYPE)

    @router.get("", summary="Server metadata", response_model=ServerMetadata)
    async def server_metadata() -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": VERSION, "extensions": EXTENSIONS}

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
                JSON_TYPE: {"schema": {"$ref": "#/components/schemas/InferenceRequest"}},
                BINARY_TYPE: {"schema": {"type": "string", "format": "binary"}},
            },
        }
    }
    infer_responses = {
        200: {
            "model": InferenceResponse,
            "description": "JSON, or with binary output the JSON header then the output's bytes",
            "content": {BINARY_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        },
        **errors,
    }

    async def serve_infer(request: Request, op: Op) -> Response:
        return await serve_http(pipeline, request, lambda: v2_exchange(op, request), render_v2)

    async def infer(request: Request, name: ModelName) -> Response:
        return await serve_infer(request, _model(name))

    async def version_infer(request: Request, name: ModelName, version: ModelVersion) -> Response:
        return await serve_infer(request, _model(name, version))

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

    async def no_route(request: Request, rest: str) -> Response:
        # Every path under /v2 answers in the protocol's shape: 405 where another route has the
        # path but not the method, 404 where none has it.
        path = request.url.path
        allowed = sorted(
            method
            for route in router.routes
            if isinstance(route, APIRoute)
            and route.endpoint is not no_route
            and route.path_regex.match(path)
            for method in route.methods or ()
        )
        if allowed:
            raise framework_error(405, "Method Not Allowed", {"Allow": ", ".join(allowed)})
        raise framework_error(404, "Not Found", None)

    router.add_api_route(
        "/{rest:path}",
        no_route,
        methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"],
        include_in_schema=False,
    )
    return router
