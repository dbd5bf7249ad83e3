"""Fixtures shared by the test modules: the app, an ASGI client, a live server.

Helpers that tests import by name are in ``tests/support.py``.
"""

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from tests.support import launch_server, stop_server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def app() -> FastAPI:
    """The app with default settings, built once (tests needing other settings build their own)."""
    return create_app(Settings())


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.fixture(scope="session")
def live_url() -> Iterator[str]:
    """The URL of a real uvicorn serving the app, shared by the tests that need TCP."""
    url, process = launch_server()
    yield url
    stop_server(process)
