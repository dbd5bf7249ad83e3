"""The service's own routes: ``GET /`` (a browser to /docs, a client the description),
``/health``, ``/health/ready``, ``/info`` and ``/metrics``; each op list read from the registry."""

from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

from app.metrics import render as render_metrics
from app.ops.declaration import INT
from app.pipeline.run import Pipeline
from app.registry import REGISTRY, Op, versions
from app.settings import Settings
from app.v2.rules import SERVER_NAME
from app.version import VERSION


def add_service_routes(app: FastAPI, settings: Settings, capacity: int, pipeline: Pipeline) -> None:
    """The service's routes on ``app``: landing page, health, readiness, /info, /metrics."""

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
        body, media = render_metrics(settings.metrics_dir)
        return Response(body, media_type=media)


def _routes() -> str:
    """Every op's route, in words: "POST /roll, POST /gather, ..."."""
    return ", ".join(f"POST /{name}" for name in REGISTRY)


def landing_page(settings: Settings) -> dict[str, Any]:
    """``GET /`` for a client: the name, version and ops, each way in, and where the docs are."""
    return {
        "name": SERVER_NAME,
        "version": VERSION,
        "ops": list(REGISTRY),
        "ways_in": {
            "json": f"{_routes()} (Content-Type: application/json)",
            "npz": f"{_routes()} (Content-Type: application/x-npz)",
            "v2": f"POST /v2/models/{{{','.join(REGISTRY)}}}/infer (KServe V2 / Open Inference "
            "Protocol)",
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


def op_details(op: Op) -> dict[str, Any]:
    """What ``GET /info``'s ``op_details`` says of an op beyond its entry in ``ops`` (name,
    spec, inputs, attribute defaults), where it has any: its ``optional`` inputs, its
    ``variadic`` one (sent as ``<name>_0``, ``<name>_1``, ...), its ``required`` attributes
    (which have no default), an enumeration's ``choices``, the ``outputs`` of an op of several, and
    the inputs that are 1D tensors (``ranks``), and the inputs typed as the data
    (``like_data``: what a device model takes at run time, the others being index-like)."""
    described: dict[str, Any] = {}
    optional = [item.name for item in op.inputs if item.optional]
    if optional:
        described["optional"] = optional
    if op.variadic is not None:
        described["variadic"] = op.variadic.name
    if op.required_attributes:
        described["required"] = [item.name for item in op.required_attributes]
    choices = {item.name: list(item.choices) for item in op.attributes if item.choices}
    if choices:
        described["choices"] = choices
    kinds = {item.name: item.kind for item in op.attributes if item.kind != INT}
    if kinds:
        described["kinds"] = kinds
    if op.several_outputs:
        described["outputs"] = ["output_0", "output_1", "..."]
    ranks = {item.name: item.rank for item in op.inputs if item.rank == "1"}
    if ranks:
        described["ranks"] = ranks
    # tensor-ops conform makes these a model's Parameters and the index-like ones Constants.
    like_data = [item.name for item in op.inputs if item.like_data]
    if like_data:
        described["like_data"] = like_data
    return described


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
                # Every attribute, a required one's default null; a list's default a list.
                "attributes": {
                    item.name: list(item.default)
                    if isinstance(item.default, tuple)
                    else item.default
                    for item in op.attributes
                },
                "versions": [str(version) for version in versions(op.name)],
            }
            for op in REGISTRY.values()
        ],
        "op_details": {op.name: op_details(op) for op in REGISTRY.values() if op_details(op)},
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
