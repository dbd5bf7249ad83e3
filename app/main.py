"""The application: ``create_app(settings)`` builds it; ``app`` is what uvicorn serves."""

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi_offline import FastAPIOffline

from app.api.errors import install_error_handlers
from app.api.models import SHARED_SCHEMAS, GatherRequest, RollRequest, link_shared_schemas
from app.api.routes import build_router
from app.api.v2 import build_v2_router
from app.api.v2_models import InferenceRequest
from app.settings import Settings

DESCRIPTION = """
Executes OpenVINO's **Roll-7** and **Gather-8** exactly as their specifications say, on tensors
sent as JSON arrays or as base64 `.npy` files, in every element type (bool, int8-64, uint8-64,
float16, bfloat16, float32, float64).

Pick one of the specs' examples in a route's request body, then *Try it out* and *Execute*.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service from ``settings`` (read from the environment when not given)."""
    settings = settings or Settings()
    # FastAPIOffline is FastAPI with the docs UI's scripts and styles served from the package.
    app = FastAPIOffline(title="tensor-ops", version="0.1.0", description=DESCRIPTION)
    app.state.settings = settings
    install_error_handlers(app)
    app.include_router(build_router(settings))
    app.include_router(build_v2_router(settings))

    @app.get("/health", summary="Liveness and readiness", tags=["service"])
    async def health() -> dict[str, str]:
        return {"status": "ok"}

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
            for model in (RollRequest, GatherRequest, InferenceRequest):
                components[model.__name__] = model.model_json_schema(
                    ref_template="#/components/schemas/{model}"
                )
            app.openapi_schema = link_shared_schemas(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


app = create_app()
