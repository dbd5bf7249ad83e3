"""The event loop ``python -m app`` serves on takes its TLS handshake limit from the settings the
app is served with (its lifespan gives them), not from a fresh read of the environment."""

import asyncio
import ssl
from typing import Any

import pytest
import uvloop
from fastapi import FastAPI

from app.http import loop as service_loop
from app.http.protocol import head_timeout
from app.main import create_app
from app.settings import Settings


def run_on_service_loop(work: Any) -> Any:
    made = service_loop.new_loop()
    try:
        return made.run_until_complete(work())
    finally:
        made.close()


def test_the_lifespan_gives_the_loop_its_apps_head_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENSOR_OPS_RATE_WINDOW", "30")
    app: FastAPI = create_app(Settings(rate_window=1.5, grpc_port=0))

    async def start() -> float | None:
        async with app.router.lifespan_context(app):
            running = asyncio.get_running_loop()
            assert isinstance(running, service_loop.HandshakeLimitedLoop)
            return running.handshake_timeout

    assert run_on_service_loop(start) == 1.5


def test_a_tls_server_is_bound_with_the_apps_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``create_server`` passes on: the served app's limit, else the environment's."""
    monkeypatch.setenv("TENSOR_OPS_RATE_WINDOW", "30")
    head_timeout.cache_clear()
    seen: list[float | None] = []

    async def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("ssl_handshake_timeout"))
        return None

    monkeypatch.setattr(uvloop.Loop, "create_server", recorded)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)

    async def bind(limit: float | None) -> None:
        if limit is not None:
            service_loop.serve_with(Settings(rate_window=limit, grpc_port=0))
        await asyncio.get_running_loop().create_server(
            asyncio.Protocol, host=None, port=0, ssl=context
        )

    run_on_service_loop(lambda: bind(2.5))
    run_on_service_loop(lambda: bind(None))
    head_timeout.cache_clear()
    assert seen == [2.5, 30.0]
