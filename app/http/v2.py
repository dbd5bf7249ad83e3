"""The KServe V2 / Open Inference Protocol under ``/v2``: every route Triton's HTTP clients call
(infer, metadata, config, statistics, repository, the refusals), in the protocol's ``{"error"}``.

The infer adapter they share, where V2 puts inputs and parameters and how it frames binary
tensors, is ``v2_exchange.py``.
"""

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from app.errors import ServiceError, from_validation
from app.http.body import read_small_body
from app.http.errors import framework_error, render_v2, route_hint
from app.http.op_routes import JSON_TYPE
from app.http.responses import serve_http
from app.http.routes import OpRoute
from app.http.shared_memory import add_shared_memory_routes
from app.http.v2_exchange import BINARY_TYPE, v2_exchange
from app.pipeline.run import Pipeline
from app.pipeline.statistics import Statistics
from app.registry import REGISTRY, Op, versions
from app.v2.messages import (
    InferenceResponse,
    ModelConfig,
    ModelMetadata,
    ModelStatisticsResponse,
    RepositoryIndexRequest,
    RepositoryModel,
    ServerMetadata,
    V2Error,
)
from app.v2.rules import (
    EXTENSIONS as SERVED_EXTENSIONS,
)
from app.v2.rules import (
    SERVER_NAME,
    model,
    model_config,
    model_metadata,
    refuse_model_control,
    repository_index,
    statistics_models,
)
from app.v2.shared_memory import (
    Regions,
    server_extensions,
)
from app.version import VERSION

#: The largest repository index body read (a repository name and a flag).
INDEX_BODY_LIMIT = 4096


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
        + "); every model's are in its metadata. Checked by model(), not by a pattern: any other "
        "is the protocol's 404 naming the versions served, in its error shape",
    ),
]


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
