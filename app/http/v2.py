"""The KServe V2 / Open Inference Protocol under ``/v2``, with Triton's binary data extension.

An adapter of the request pipeline: where V2 puts inputs and parameters, how it frames binary
tensors, how it writes its answer and its ``{"error"}``.

Long (some 700 lines) because it holds every ``/v2`` route Triton's HTTP clients call (infer,
metadata, config, statistics, repository, the refusals) beside the infer adapter they share.
"""

from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from app.codecs.json_body import JsonBody, split_json_body
from app.codecs.json_tensors import (
    check_json_text_size,
    json_encoding_bytes,
    require_json_can_carry,
)
from app.codecs.v2_tensors import (
    decode_v2_binary,
    decode_v2_json,
    v2_datatype,
    v2_json_data,
    v2_output_buffer,
    wire_dtype,
)
from app.errors import Fault, ServiceError, from_validation, from_wire, quote
from app.http.body import read_small_body
from app.http.errors import framework_error, render_v2, route_hint
from app.http.op_routes import JSON_TYPE, media_type, single_header
from app.http.responses import serve_http
from app.http.routes import OpRoute
from app.http.shared_memory import add_shared_memory_routes, http_answer, request_owner
from app.pipeline.jobs import Job, Limits, make_job
from app.pipeline.run import Answer, Body, Pipeline
from app.pipeline.statistics import Statistics
from app.registry import REGISTRY, Op, versions
from app.v2.messages import (
    InferenceRequest,
    InferenceResponse,
    ModelConfig,
    ModelMetadata,
    ModelStatisticsResponse,
    RepositoryIndexRequest,
    RepositoryModel,
    RequestInput,
    ServerMetadata,
    V2Error,
)
from app.v2.rules import (
    EXTENSIONS as SERVED_EXTENSIONS,
)
from app.v2.rules import (
    INPUT_EXTENSIONS,
    OUTPUT_EXTENSIONS,
    PARAMETER_FAULT,
    SERVER_NAME,
    json_kind,
    model,
    model_config,
    model_metadata,
    model_version,
    op_attributes,
    read_inputs,
    refuse_extensions,
    refuse_model_control,
    repository_index,
    requested_outputs,
    statistics_models,
    wants_binary,
)
from app.v2.shared_memory import (
    INPUT_EXTENSIONS_ON,
    OUTPUT_EXTENSIONS_ON,
    Regions,
    SharedTensors,
    decoded_checked,
    new_request,
    server_extensions,
)
from app.version import VERSION
from tensor_ops_wire.errors import TensorError

HEADER_LENGTH = "inference-header-content-length"
#: The largest repository index body read (a repository name and a flag).
INDEX_BODY_LIMIT = 4096
_LENGTH_DIGITS = 19
BINARY_TYPE = "application/octet-stream"
#: What the V2 routes read: JSON, or JSON then binary tensors (tritonclient sends no type).
_READABLE = (JSON_TYPE, BINARY_TYPE, "")


# Documented as enums; checked by model(), so that an unknown name is the protocol's 404.
ModelName = Annotated[
    str,
    Path(
        description="The model: " + ", ".join(REGISTRY), json_schema_extra={"enum": list(REGISTRY)}
    ),
]
ModelVersion = Annotated[
    str,
    Path(
        description="The model's version: the op's opset version (gather: "
        + ", ".join(str(number) for number in versions("gather"))
        + "); every model's are in its metadata",
        pattern="^[0-9]{1,4}$",
    ),
]


class V2Exchange:
    """One infer request: a JSON body, or a JSON header then the binary tensors it sizes."""

    def __init__(
        self, op: Op, header_length: str | None, shared: SharedTensors | None = None
    ) -> None:
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
        self.json: JsonBody | None = None
        #: Tensors in shared memory (None: the extension is off).
        self.shared = shared
        self.shared_output = False
        #: The outputs the request names, of an op of several (None: all of them).
        self.requested: frozenset[str] | None = None

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
        # Long nested data arrays are read by NumPy; strings stay strings (names are checked
        # as text).
        self.json = split_json_body(self.head, long_strings=False)
        return self.json.parsing_bytes()

    def decode(self, limits: Limits) -> Job:
        return decoded_checked(self.shared, lambda: self._decode(limits))

    def _decode(self, limits: Limits) -> Job:
        assert self.json is not None
        try:
            payload = self.json.loads()
        except orjson.JSONDecodeError as error:
            raise ServiceError(
                Fault.JSON_INVALID, ("body",), f"request is not valid JSON: {error}"
            ) from None
        try:
            # The model's core validator, not model_validate (whose wrapper costs more).
            request = InferenceRequest.__pydantic_validator__.validate_python(payload)
        except ValidationError as error:
            raise from_validation(error) from None
        self.request = request
        arrays = self._inputs(request, limits)
        outputs = [(output.name, output.parameters or {}) for output in request.outputs or []]
        self.binary_output = wants_binary(
            request.parameters or {},
            outputs,
            default=False,
            extensions=OUTPUT_EXTENSIONS if self.shared is None else OUTPUT_EXTENSIONS_ON,
            op=self.op,
        )
        job = make_job(self.op, arrays, op_attributes(self.op, request.parameters or {}), limits)
        self.requested = requested_outputs(job, (name for name, _ in outputs))
        if self.shared is not None and self.shared.place_output(outputs, job):
            # Written into the client's region: nothing of it in the answer.
            self.shared_output = True
        elif not self.binary_output:
            # V2 JSON data is flat: the text of a 1-D array of the output's elements.
            self.text_bytes = check_json_text_size(
                (job.output_count,), job.sizing_dtype, limits.max_output_bytes
            )
        return job

    def _inputs(self, request: InferenceRequest, limits: Limits) -> dict[str, Any]:
        binary = self.binary
        offset = 0
        shared = self.shared
        extensions = INPUT_EXTENSIONS if shared is None else INPUT_EXTENSIONS_ON

        #: The size ``check`` found for the input ``decode`` reads next (read_inputs checks
        #: each input, then decodes it): its parameters checked once.
        checked: list[int | None] = [None]

        def check(item: RequestInput) -> int | None:
            checked[0] = size = _binary_data_size(item, extensions)
            return size

        def decode(index: int, item: RequestInput) -> Any:
            nonlocal offset
            size = checked[0]
            if shared is not None and item.parameters:  # a tensor in shared memory names it
                carried = "binary_data_size" if size is not None else None
                if item.data is not None:
                    carried = "data"
                array = shared.input(item.name, item.parameters, item.shape, item.datatype, carried)
                if array is not None:
                    return array
            chunk = None
            if size is not None:
                chunk = binary[offset : offset + size]
                if len(chunk) != size:
                    raise ServiceError(
                        Fault.TENSOR_DECODE,
                        ("body", item.name),
                        f"binary_data_size {size} passes the end of the body",
                    )
                offset += size
            return _decode_input(item, chunk)

        def unclaimed() -> None:
            if offset != len(binary):
                raise ServiceError(
                    Fault.TENSOR_DECODE,
                    ("body",),
                    f"the body has {len(binary) - offset} bytes of binary data no input claims",
                )

        return read_inputs(
            self.op,
            request.inputs,
            limits,
            check=check,
            decode=decode,
            finish=unclaimed,
        )

    def encoding_bytes(self, job: Job) -> int:
        # The inputs and output in shared memory are the client's: only copies count.
        copied = 0 if self.shared is None else self.shared.copied_bytes
        if self.shared_output:
            return copied
        if self.binary_output:
            return 2 * job.output_bytes + copied
        shape = (job.output_count,) if job.split is not None else job.output_shape
        return json_encoding_bytes(shape, job.sizing_dtype, self.text_bytes) + copied

    def encode(self, job: Job) -> Answer:
        answer = self._encode(job)
        if self.shared is not None:
            self.shared.verify()  # no object of the request cut short while it ran
        return answer

    def _encode(self, job: Job) -> Answer:
        assert self.request is not None
        if self.shared_output:
            assert self.shared is not None
            return http_answer(job, self.request.id, self.shared)
        buffers, headers = encode_infer(job, self.request, self.binary_output, self.requested)
        media = headers.pop("content-type")
        return Answer(buffers, media, headers)


def v2_exchange(op: Op, request: Request, regions: Regions) -> V2Exchange:
    """The adapter of one infer request, its tensors perhaps in ``regions``; 415 for a body V2
    cannot read as JSON or binary tensors."""
    kind = media_type(request)
    if kind not in _READABLE:
        raise ServiceError(
            Fault.UNSUPPORTED_MEDIA_TYPE,
            ("header", "content-type"),
            f"content type {quote(kind)} is not accepted here; send {JSON_TYPE}, or "
            f"{BINARY_TYPE} with an Inference-Header-Content-Length header",
        )
    return V2Exchange(
        op, single_header(request, HEADER_LENGTH), new_request(regions, request_owner(request))
    )


def _decode_input(item: RequestInput, chunk: memoryview | None) -> Any:
    try:
        if chunk is not None:
            if item.data is not None:
                # gRPC refuses contents beside a raw entry; which one counts is not guessed.
                raise TensorError(
                    "has both data and parameters.binary_data_size; give the tensor one way"
                )
            return decode_v2_binary(chunk, item.shape, item.datatype)
        if item.data is None:
            raise TensorError("has neither data nor parameters.binary_data_size")
        return decode_v2_json(item.data, item.shape, item.datatype)
    except TensorError as error:
        raise from_wire(error, item.name) from None


def _binary_data_size(
    item: RequestInput, extensions: Mapping[str, str] = INPUT_EXTENSIONS
) -> int | None:
    """The input's ``binary_data_size`` (None when its data is JSON), its parameters checked
    (those of ``extensions``, not served, refused)."""
    parameters = item.parameters or {}
    loc = ("body", item.name, "parameters")
    refuse_extensions(
        parameters,
        extensions,
        loc,
        "send the tensor in the request, as JSON data or as binary data (binary_data_size)",
    )
    if "binary_data_size" not in parameters:
        return None
    size = parameters["binary_data_size"]
    if isinstance(size, bool) or not isinstance(size, int):
        got = json_kind(size)
    elif size < 0:
        got = "a negative one"
    else:
        return size
    raise ServiceError(
        PARAMETER_FAULT,
        (*loc, "binary_data_size"),
        f"binary_data_size must be a non-negative integer, got {got}",
    )


def encode_infer(
    job: Job,
    request: InferenceRequest,
    binary: bool,
    requested: frozenset[str] | None = None,
) -> tuple[list[Any], dict[str, str]]:
    """The response body (buffers to send in turn) and its headers: of an op of several
    outputs, those ``requested`` (all when None)."""
    if job.split is not None:
        return _encode_several(job, request, binary, requested)
    output = job.output(v2_output_buffer(job.output_shape, job.output_dtype) if binary else None)
    tensor: dict[str, Any] = {
        "name": "output",
        "datatype": v2_datatype(output.dtype),
        "shape": list(output.shape),
    }
    response: dict[str, Any] = {"model_name": job.op.name, "model_version": model_version(job.op)}
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


def _encode_several(
    job: Job, request: InferenceRequest, binary: bool, requested: frozenset[str] | None
) -> tuple[list[Any], dict[str, str]]:
    """The answer of an op of several outputs (Split-1): every output in the outputs list, in
    order, as JSON data or binary data alike."""
    response: dict[str, Any] = {"model_name": job.op.name, "model_version": model_version(job.op)}
    if request.id is not None:
        response["id"] = request.id
    tensors: list[dict[str, Any]] = []
    pieces: list[Any] = []
    for name, output in zip(job.output_names, job.outputs(), strict=True):
        if requested is not None and name not in requested:
            continue
        tensor: dict[str, Any] = {
            "name": name,
            "datatype": v2_datatype(output.dtype),
            "shape": list(output.shape),
        }
        if binary:
            wire = output.astype(wire_dtype(output.dtype), copy=False)
            tensor["parameters"] = {"binary_data_size": wire.nbytes}
            pieces.append(wire)
        else:
            require_json_can_carry(
                output,
                ("outputs", name),
                'ask for the outputs as binary data ("parameters": {"binary_data_output": true})',
            )
            tensor["data"] = v2_json_data(output)
        tensors.append(tensor)
    response["outputs"] = tensors
    if not binary:
        body = orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)
        return [body], {"content-type": JSON_TYPE}
    head = orjson.dumps(response)
    headers = {"content-type": BINARY_TYPE, HEADER_LENGTH: str(len(head))}
    return [head, *pieces], headers


#: The infer routes' templates: their labels in metrics and logs.
INFER_PATH = "/v2/models/{name}/infer"
VERSION_INFER_PATH = "/v2/models/{name}/versions/{version}/infer"


def infer_endpoint(
    pipeline: Pipeline, regions: Regions
) -> Callable[[Request, Op], Awaitable[Response]]:
    """What serves an infer request for an op, its tensors perhaps in ``regions``."""

    async def serve_infer(request: Request, op: Op) -> Response:
        return await serve_http(
            pipeline, request, lambda: v2_exchange(op, request, regions), render_v2
        )

    return serve_infer


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


def add_triton_routes(
    router: APIRouter, errors: dict[int | str, dict[str, Any]], statistics: Statistics
) -> None:
    """Triton's extensions (docs/triton.md): model configuration, statistics, and the model
    repository's index (load and unload refused: the ops are built in)."""

    async def config(name: ModelName) -> dict[str, Any]:
        return model_config(model(name))

    async def version_config(name: ModelName, version: ModelVersion) -> dict[str, Any]:
        return model_config(model(name, version))

    for path, config_handler, summary in (
        ("/models/{name}/config", config, "Model configuration (Triton)"),
        ("/models/{name}/versions/{version}/config", version_config, "Model configuration"),
    ):
        router.add_api_route(
            path, config_handler, summary=summary, response_model=ModelConfig, responses=errors
        )

    async def all_stats() -> dict[str, Any]:
        return {"model_stats": statistics.read(statistics_models(None, None))}

    async def stats(name: ModelName) -> dict[str, Any]:
        return {"model_stats": statistics.read(statistics_models(name, None))}

    async def version_stats(name: ModelName, version: ModelVersion) -> dict[str, Any]:
        return {"model_stats": statistics.read(statistics_models(name, version))}

    for path, stats_handler, summary in (
        ("/models/stats", all_stats, "Statistics of every model (Triton)"),
        ("/models/{name}/stats", stats, "Model statistics (Triton)"),
        ("/models/{name}/versions/{version}/stats", version_stats, "Model statistics"),
    ):
        router.add_api_route(
            path,
            stats_handler,
            summary=summary,
            response_model=ModelStatisticsResponse,
            responses=errors,
        )

    async def index(request: Request) -> list[dict[str, str]]:
        body = await read_small_body(
            request,
            request.app.state.settings,
            INDEX_BODY_LIMIT,
            "a repository index request holds a repository name and a flag: at most "
            f"{INDEX_BODY_LIMIT} bytes",
        )
        try:
            asked = RepositoryIndexRequest.model_validate_json(body or b"{}")
        except ValidationError as error:
            raise from_validation(error) from None
        return repository_index(bool(asked.ready))

    router.add_api_route(
        "/repository/index",
        index,
        methods=["POST"],
        summary="Model repository index (Triton)",
        response_model=list[RepositoryModel],
        responses=errors,
        openapi_extra={
            "requestBody": {
                "required": False,
                "content": {
                    JSON_TYPE: {"schema": {"$ref": "#/components/schemas/RepositoryIndexRequest"}}
                },
            }
        },
    )

    async def load(name: ModelName) -> dict[str, Any]:
        raise refuse_model_control(name, "load")

    async def unload(name: ModelName) -> dict[str, Any]:
        raise refuse_model_control(name, "unload")

    for path, control, summary in (
        ("/repository/models/{name}/load", load, "Load a model: refused, always loaded"),
        ("/repository/models/{name}/unload", unload, "Unload a model: refused"),
    ):
        router.add_api_route(path, control, methods=["POST"], summary=summary, responses=errors)


class V2OpRoute(OpRoute, V2Route):
    """An infer route: served as every op route is, its refusals in V2's shape."""

    def refuse(self, error: ServiceError) -> Response:
        return render_v2(error)


#: The refusals every /v2 route may answer, for the OpenAPI document.
V2_ERRORS: dict[int | str, dict[str, Any]] = {
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


def add_infer_routes(router: APIRouter, pipeline: Pipeline, regions: Regions) -> list[APIRoute]:
    """The infer routes, on the app's own router (an included router's routes are matched
    twice), their tensors perhaps in the worker's shared memory ``regions``; returns them for
    the ``/v2`` router's answer to other methods (405)."""
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
        **V2_ERRORS,
    }

    serve_infer = infer_endpoint(pipeline, regions)

    async def infer(request: Request, name: ModelName) -> Response:
        return await serve_infer(request, model(name))

    async def version_infer(request: Request, name: ModelName, version: ModelVersion) -> Response:
        return await serve_infer(request, model(name, version))

    for path, endpoint, summary in (
        (INFER_PATH, infer, "Inference: run the op"),
        (VERSION_INFER_PATH, version_infer, "Inference (one version)"),
    ):
        router.add_api_route(
            path,
            endpoint,
            methods=["POST"],
            tags=["KServe V2"],
            summary=summary,
            responses=infer_responses,
            openapi_extra=infer_body,
            route_class_override=V2OpRoute,
        )
    return [route for route in router.routes if isinstance(route, V2OpRoute)]


def build_v2_router(
    regions: Regions, statistics: Statistics, infer_routes: Sequence[APIRoute] = ()
) -> APIRouter:
    """The ``/v2`` routes but the infer routes (``add_infer_routes``); the shared memory ones
    over the worker's ``regions``, the statistics read from the worker's ``statistics``."""
    router = APIRouter(prefix="/v2", tags=["KServe V2"], route_class=V2Route)
    errors = V2_ERRORS

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
        extensions = SERVED_EXTENSIONS + server_extensions(regions)
        return {"name": SERVER_NAME, "version": VERSION, "extensions": extensions}

    # Before /models/{name}: "stats" is not a model's name.
    add_triton_routes(router, errors, statistics)

    async def metadata(name: ModelName) -> dict[str, Any]:
        return model_metadata(model(name))

    async def version_metadata(name: ModelName, version: ModelVersion) -> dict[str, Any]:
        return model_metadata(model(name, version))

    async def model_ready(name: ModelName) -> dict[str, Any]:
        return {"name": model(name).name, "ready": True}

    async def version_ready(name: ModelName, version: ModelVersion) -> dict[str, Any]:
        return {"name": model(name, version).name, "ready": True}

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

    add_shared_memory_routes(router, regions)  # Triton's shared memory extension

    async def no_route(request: Request, rest: str) -> Response:
        # Every path under /v2 answers in the protocol's shape: 405 where another route has the
        # path but not the method, 404 where none has it.
        path = request.url.path
        allowed = sorted(
            method
            for route in [*router.routes, *infer_routes]
            if isinstance(route, APIRoute)
            and route.endpoint is not no_route
            and route.path_regex.match(path)
            for method in route.methods or ()
        )
        # The message teaches as the plain routes' does (route_hint): what the path takes, or
        # the routes near it, and where /docs is.
        if allowed:
            allow = ", ".join(allowed)
            hint = route_hint(request, 405, allow) or "Method Not Allowed"
            raise framework_error(405, hint, {"Allow": allow})
        raise framework_error(404, route_hint(request, 404, None) or "Not Found", None)

    router.add_api_route(
        "/{rest:path}",
        no_route,
        methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"],
        include_in_schema=False,
    )
    return router
