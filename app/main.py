"""The application: ``create_app(settings)`` builds it; ``app`` is what uvicorn serves."""

import asyncio
import gc
import logging
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Match
from starlette.types import Scope

from app import tracing
from app.access import AccessControl, access_control
from app.docs import add_offline_docs
from app.metrics import render as render_metrics
from app.observability import configure_logging, launched_as_service
from app.pipeline.admission import MemoryBudget, container_limit, derive_budget, resident_bytes
from app.pipeline.run import Pipeline
from app.registry import REGISTRY
from app.settings import Settings
from app.transports.errors import install_error_handlers
from app.transports.grpc_server import GrpcServer
from app.transports.http import add_op_routes, op_endpoints
from app.transports.http_observer import HttpObserver, ObservedApp
from app.transports.openapi import description as openapi_description
from app.transports.openapi import teach
from app.transports.routes import OpRoute
from app.transports.schemas import SHARED_SCHEMAS, link_shared_schemas, request_model
from app.transports.shared_memory import Regions
from app.transports.v2_http import add_infer_routes, build_v2_router
from app.transports.v2_messages import InferenceRequest
from app.transports.v2_rules import SERVER_NAME
from app.version import VERSION

LOG = logging.getLogger("tensor_ops.service")


def on_exit_signals(
    loop: asyncio.AbstractEventLoop, begin: Callable[[], None]
) -> Callable[[], None]:
    """Call ``begin`` on ``loop`` as soon as SIGTERM or SIGINT arrives, then let the handler
    that was in place (uvicorn's) take the signal as before; returns what puts it back.

    Signals are handled in the main thread only: elsewhere (an app run by a test client in a
    thread) nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[int, Any] = {}

    def handle(number: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(begin)
        handler = previous[number]
        if callable(handler):
            handler(number, frame)
        elif handler == signal.SIG_DFL:
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)

    for number in (signal.SIGTERM, signal.SIGINT):
        previous[number] = signal.getsignal(number)
        signal.signal(number, handle)

    def undo() -> None:
        for number, handler in previous.items():
            if signal.getsignal(number) is handle:
                signal.signal(number, handler)

    return undo


def on_reload_signal(
    loop: asyncio.AbstractEventLoop, access: AccessControl | None
) -> Callable[[], None]:
    """Re-read the API keys on SIGHUP (in the main thread only, with keys on); returns what
    takes the handler away. Without it, SIGHUP would end the process: uvicorn leaves it to
    its default. (Under several workers uvicorn's supervisor takes SIGHUP itself and replaces
    the workers one by one; each new one reads the file. Each worker also re-reads the file
    within a second of a change, signal or not.)"""
    if access is None or threading.current_thread() is not threading.main_thread():
        return lambda: None
    try:
        loop.add_signal_handler(signal.SIGHUP, access.keys.reload)
    except (NotImplementedError, RuntimeError):  # an event loop without signal handling
        return lambda: None

    def undo() -> None:
        loop.remove_signal_handler(signal.SIGHUP)

    return undo


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """gRPC started beside HTTP, and both drained on the way out."""
    settings: Settings = app.state.settings
    pipeline: Pipeline = app.state.pipeline
    grpc_server = None
    access: AccessControl | None = app.state.access
    # Whether this process is one of several workers (shared memory is refused then): before
    # gRPC binds its own socket, so that only a socket a supervisor handed over is claimed.
    app.state.regions.siblings.claim()
    if settings.grpc_port:
        grpc_server = GrpcServer(
            settings, pipeline, lambda: bool(app.state.ready), access, app.state.regions
        )
        try:
            await grpc_server.start()
        except Exception as error:
            LOG.error("gRPC cannot start: %s", error)
            raise
    app.state.ready = True
    # Everything made at start-up (some 150,000 objects: modules, schemas, the compiled
    # kernels' wrappers) lives as long as the process: moved out of the collector's reach, a
    # full collection no longer walks it (55 ms on this machine, a pause for every request in
    # flight), and the young collections of request garbage stay short.
    # Once per process: what a later app of the same process (a test's) leaves stays collectable.
    if not gc.get_freeze_count():
        gc.collect()
        gc.freeze()
    stopping: asyncio.Future[None] | None = None

    def begin_stopping() -> None:
        # Readiness turns away new work; gRPC refuses new calls and lets those in flight
        # finish, within the same graceful timeout as HTTP's drain, beside it.
        nonlocal stopping
        app.state.ready = False
        if grpc_server is not None and stopping is None:
            stopping = asyncio.ensure_future(grpc_server.stop())

    # uvicorn ends the lifespan only once its HTTP drain is over: the stop begins with the
    # signal instead, so that the two drains take one graceful timeout, not two.
    undo = on_exit_signals(asyncio.get_running_loop(), begin_stopping)
    undo_reload = on_reload_signal(asyncio.get_running_loop(), access)
    try:
        yield
    finally:
        undo_reload()
        undo()
        begin_stopping()
        if stopping is not None:
            await stopping
        await tracing.flush()  # the worker's last spans, before it exits


class Service(FastAPI):
    """FastAPI, with the HTTP observer every request passes (``front``)."""

    front: HttpObserver


def add_work_routes(app: FastAPI, pipeline: Pipeline, regions: Regions) -> list[APIRoute]:
    """The routes that run the ops (``POST /<op>``, the ``/v2`` infer routes) on the app's own
    router, ahead of every other route, the framework's own /openapi.json included, which every
    request would be matched against first (a regular expression each time); the document's
    paths keep their order. Returns the infer routes."""
    add_op_routes(app.router, op_endpoints(pipeline))
    infer_routes = add_infer_routes(app.router, pipeline, regions)
    app.router.routes.sort(key=lambda route: not isinstance(route, OpRoute))
    return infer_routes


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service from ``settings`` (read from the environment when not given)."""
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format, capture_stderr=launched_as_service())
    # In each worker process, from the standard OTEL_* variables (off when they are unset).
    tracing.configure()

    app = Service(
        title="tensor-ops",
        version=VERSION,
        description=openapi_description(settings),
        lifespan=lifespan,
        # The service traces every request itself (app.tracing): FastAPI's own telemetry
        # would add a second server span to the routes it serves, and only to those.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.ready = True
    install_error_handlers(app)
    capacity, source = derive_budget(
        settings.memory_budget_bytes, container_limit(), settings.workers, resident_bytes()
    )
    LOG.info("memory budget", extra={"budget_bytes": capacity, "from": source})
    budget = MemoryBudget(capacity, settings.admission_timeout)
    app.state.budget = budget
    pipeline = Pipeline(settings, budget)
    app.state.pipeline = pipeline
    # The worker's shared memory regions (Triton's extension): one set for /v2 and gRPC.
    app.state.regions = regions = Regions(settings)
    # The one router: the routes that run the ops first, each declared once from the registry.
    infer_routes = add_work_routes(app, pipeline, regions)
    access = access_control(settings.api_keys_file, settings.auth_probes)
    app.state.access = access
    app.front = HttpObserver(access, op_route_of(app))
    # Every request passes the observer (tagged, key-checked, logged and measured) before the
    # router; CORS, when TENSOR_OPS_CORS_ORIGINS allows origins, around it.
    app.add_middleware(ObservedApp, front=app.front)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, **cors_options(settings.cors_origins))

    @app.get(
        "/",
        summary="The service: a browser is sent to /docs, a client gets what is offered",
        tags=["service"],
        response_model=None,
    )
    async def landing(request: Request) -> Response:
        if _prefers_html(request.headers.get("accept", "")):
            root = request.scope.get("root_path", "")
            return RedirectResponse(f"{root}/docs", status_code=307)
        return JSONResponse(landing_page(settings))

    @app.get("/health", summary="Liveness: the process answers", tags=["service"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/health/ready", summary="Readiness: the service takes work", tags=["service"])
    async def ready() -> Response:
        if app.state.ready:
            return Response(b'{"status":"ready"}', 200, media_type="application/json")
        return Response(b'{"status":"shutting down"}', 503, media_type="application/json")

    @app.get(
        "/info",
        summary="The service: name, version, ops, limits and ports",
        tags=["service"],
    )
    async def info() -> dict[str, Any]:
        # What a client needs to size its requests; behind the API key when keys are on.
        return service_info(settings, capacity)

    @app.get(
        "/metrics",
        summary="Prometheus metrics",
        tags=["service"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def metrics() -> Response:
        pipeline.statistics.flush()  # what the requests added, in the metrics before they are read
        body, media = render_metrics()
        return Response(body, media_type=media)

    # After the routes above: every path outside /v2 is matched before the /v2 router's many.
    app.include_router(build_v2_router(regions, pipeline.statistics, infer_routes))
    add_offline_docs(app)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(SHARED_SCHEMAS)
            models: list[type[BaseModel]] = [request_model(op) for op in REGISTRY.values()]
            models.append(InferenceRequest)
            for model in models:
                model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(model_schema.pop("$defs", {}))
                components[model.__name__] = model_schema
            teach(schema, settings, pipeline.limits, capacity)
            if access is not None:
                require_keys(schema, access)
            app.openapi_schema = link_shared_schemas(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def op_route_of(app: FastAPI) -> Callable[[Scope], str | None]:
    """The template of the op route a request is for, or None: the label of a request refused
    before the router took it (its key)."""

    def op_route(scope: Scope) -> str | None:
        for route in app.router.routes:
            if isinstance(route, OpRoute) and route.matches(scope)[0] is Match.FULL:
                return route.path
        return None

    return op_route


def cors_options(origins: tuple[str, ...]) -> dict[str, Any]:
    """Starlette's CORS middleware's options: preflights answered, the allowed origins told they
    may read the answers (errors included) and the headers a client needs."""
    return {
        "allow_origins": list(origins),
        "allow_methods": ["GET", "POST"],
        # Beyond the safelisted ones: the key, the request id, a gzip body, trace context.
        "allow_headers": [
            "authorization",
            "content-type",
            "content-encoding",
            "x-request-id",
            "traceparent",
            "tracestate",
        ],
        "expose_headers": ["x-request-id", "retry-after", "www-authenticate", "tensor-ops-fault"],
        "max_age": 600,
    }


#: The OpenAPI security scheme of API keys: /docs shows an Authorize button for it.
BEARER_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "An API key from the service's key file (TENSOR_OPS_API_KEYS_FILE), sent as "
    "'Authorization: Bearer <key>'.",
}


def require_keys(schema: dict[str, Any], access: AccessControl) -> None:
    """Declare the bearer scheme, and on each operation that needs a key, that it does, and
    its 401."""
    schema.setdefault("components", {})["securitySchemes"] = {"apiKey": BEARER_SCHEME}
    for path, operations in schema.get("paths", {}).items():
        probe_path = path.replace("{name}", "roll").replace("{version}", "1")
        if not access.needs_key(probe_path):
            continue
        for operation in operations.values():
            operation["security"] = [{"apiKey": []}]
            operation.setdefault("responses", {})["401"] = {
                "description": "No key, or one that is not valid (with WWW-Authenticate: Bearer)"
            }


def __getattr__(name: str) -> Any:
    """``app.main:app``, what ``python -m uvicorn app.main:app`` serves: built from the
    environment's settings when it is first asked for, so that importing the module builds
    nothing (no app, no budget, no tracing set up) and tests and tools build their own."""
    if name == "app":
        built = create_app()
        globals()["app"] = built  # the next lookups find it without coming here
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def landing_page(settings: Settings) -> dict[str, Any]:
    """``GET /`` for a client: the name, version and ops, each way in, and where the docs are."""
    return {
        "name": SERVER_NAME,
        "version": VERSION,
        "ops": list(REGISTRY),
        "ways_in": {
            "json": "POST /roll, POST /gather (Content-Type: application/json)",
            "npz": "POST /roll, POST /gather (Content-Type: application/x-npz)",
            "v2": "POST /v2/models/{roll,gather}/infer (KServe V2 / Open Inference Protocol)",
            "grpc": (
                f"port {settings.grpc_port}, inference.GRPCInferenceService"
                if settings.grpc_port
                else "off (TENSOR_OPS_GRPC_PORT is 0)"
            ),
            "client": "pip install ./client: TensorOpsClient, and the tensor-ops command",
        },
        "ports": {"http": settings.port, "grpc": settings.grpc_port},
        "docs": "/docs",
        "openapi": "/openapi.json",
        "info": "/info",
    }


def _prefers_html(accept: str) -> bool:
    """A browser's Accept names text/html; an API client's (curl's */*, httpx's) does not."""
    return "text/html" in accept.lower()


def service_info(settings: Settings, budget_bytes: int) -> dict[str, Any]:
    """``GET /info``: the service's name and version, its ops (with their spec, inputs and
    attributes), its limits and the ports of its transports."""
    return {
        "name": SERVER_NAME,
        "version": VERSION,
        "ops": [
            {
                "name": op.name,
                "spec": op.spec,
                "inputs": list(op.input_names),
                "attributes": {item.name: item.default for item in op.attributes},
            }
            for op in REGISTRY.values()
        ],
        "limits": {
            "max_body_bytes": settings.max_body_bytes,
            "max_output_bytes": settings.max_output_bytes,
            "max_rank": settings.max_rank,
            "max_dimension": settings.max_dimension,
            "memory_budget_bytes": budget_bytes,
            "admission_timeout": settings.admission_timeout,
            "body_timeout": settings.body_timeout,
            "min_transfer_rate": settings.min_transfer_rate,
        },
        "transports": {
            "http": ["json", "npz", "v2"],
            "grpc_port": settings.grpc_port,
        },
        "access": {"api_keys": settings.api_keys_file is not None, "tls": settings.tls},
    }
