"""Fixtures shared by the test modules: the app, an ASGI client, a live server.

Helpers that tests import by name are in ``tests/support.py``.
"""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from tests.support import launch_server, stop_server

#: The system tier (``pytest -m system``, run by .ci/run after README's command): what needs root
#: or system packages (buildah and debootstrap for the image, nginx, Debian's chromium) or takes
#: minutes (the full memory matrix, the nginx failover run). The default ``pytest`` leaves it out
#: (pyproject.toml's addopts). Listed here, in one place, by module.
SYSTEM_TIER = (
    "deploy/test_image_build.py",
    "deploy/test_image_command.py",
    "deploy/test_failover.py",
    "deploy/test_nginx_keys.py",
    "deploy/test_grpc_deployment.py",
    "deploy/test_cors_browser.py",
    "deploy/test_docs_authorize.py",
    "deploy/test_docs_browser.py",
    "hostile/test_memory_matrix.py",
)
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        relative = item.path.resolve().relative_to(_TESTS).as_posix()
        if relative in SYSTEM_TIER:
            item.add_marker(pytest.mark.system)


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
