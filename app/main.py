"""The application: ``create_app(settings)`` builds it; ``app`` is what uvicorn serves.

``BEARER_SCHEME`` (the OpenAPI scheme of API keys) is re-exported for the tests that check it.
"""

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.routing import Match
from starlette.types import Message, Receive, Scope, Send

from app import tracing
from app.access import access_control
from app.docs import add_offline_docs
from app.http.errors import install_error_handlers, on_unexpected
from app.http.observer import HttpObserver, ObservedApp
from app.http.op_routes import add_op_routes, op_endpoints
from app.http.openapi import BEARER_SCHEME, build_openapi
from app.http.openapi import description as openapi_description
from app.http.routes import DirectRoutes, OpRoute
from app.http.service import add_service_routes
from app.http.v2 import add_infer_routes, build_v2_router
from app.http.verify import add_verify_routes
from app.lifespan import lifespan
from app.observability import configure_logging, launched_as_service
from app.pipeline.admission import MemoryBudget, container_limit, derive_budget, resident_bytes
from app.pipeline.run import Pipeline
from app.settings import Settings
from app.v2.shared_memory import Regions
from app.version import VERSION

__all__ = ["BEARER_SCHEME", "create_app", "lifespan"]

LOG = logging.getLogger("tensor_ops.service")


class Service(FastAPI):
    """FastAPI, with the HTTP observer every request passes (``front``), and the op routes'
    requests taken to it and their route straight (``direct``, when nothing else would see
    them: ``DirectRoutes``)."""

    front: HttpObserver
    direct: DirectRoutes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        direct = self.direct
        found = None
        # Nothing but the observer between the entry and the routes (CORS, or a middleware added
        # since, would see every request): only then is an op route taken straight.
        if direct is not None and scope["type"] == "http" and len(self.user_middleware) == 1:
            found = direct.find(scope)
        if found is None:
            await super().__call__(scope, receive, send)
            return
        route, child = found
        scope["app"] = self
        if "router" not in scope:
            scope["router"] = self.router
        scope.update(child)
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.front.observe(route.handle, scope, receive, watched)
        except Exception as error:
            # As the framework's error layer: the 500 answer if none has begun, then raised on
            # for the server to log.
            response = await on_unexpected(Request(scope), error)
            if not started:
                await response(scope, receive, send)
            raise


def add_work_routes(app: FastAPI, pipeline: Pipeline, regions: Regions) -> list[APIRoute]:
    """The routes that run the ops (``POST /<op>``, the ``/v2`` infer routes) on the app's own
    router, ahead of every other route, the framework's own /openapi.json included, which every
    request would be matched against first (a regular expression each time); the document's
    paths keep their order. Returns the infer routes."""
    add_op_routes(app.router, op_endpoints(pipeline))
    infer_routes = add_infer_routes(app.router, pipeline, regions)
    add_verify_routes(app.router, pipeline)
    app.router.routes.sort(key=lambda route: not isinstance(route, OpRoute))
    return infer_routes


def create_app(settings: Settings | None = None) -> Service:
    """Build the service from ``settings`` (read from the environment when not given)."""
    settings = settings or Settings()
    configure_logging(settings.log_level, settings.log_format, capture_stderr=launched_as_service())
    # In each worker process, from the standard OTEL_* variables (off when they are unset).
    tracing.configure(settings.otel_environment)

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

    add_service_routes(app, settings, capacity, pipeline)

    # After the routes above: every path outside /v2 is matched before the /v2 router's many.
    app.include_router(build_v2_router(regions, pipeline.statistics, infer_routes))
    add_offline_docs(app)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, settings, pipeline.limits, capacity, access)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    if not app.root_path:
        app.direct = DirectRoutes(app.router.routes)
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


def __getattr__(name: str) -> Any:
    """``app.main:app``, what ``python -m uvicorn app.main:app`` serves: built from the
    environment's settings when it is first asked for, so that importing the module builds
    nothing (no app, no budget, no tracing set up) and tests and tools build their own."""
    if name == "app":
        built = create_app()
        globals()["app"] = built  # the next lookups find it without coming here
        return built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
