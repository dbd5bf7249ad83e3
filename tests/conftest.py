"""Fixtures shared by the test modules: the app, an ASGI client, a live server.

Helpers that tests import by name are in ``tests/support.py``.
"""

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.ops import loops
from app.settings import Settings
from tests import progress
from tests.support import launch_server, stop_server

#: The system tier (``pytest -m system``, run by .ci/run after README's command): what needs root
#: or system packages (buildah and debootstrap for the image, nginx, Debian's chromium) or takes
#: minutes (the full memory matrix, the nginx failover run), and the default tier's few long runs
#: (each 10 to 60 s on 2 cores: memory under a stream of large refused or concurrent calls, the
#: kernels compiled from cold, property-based fuzzing of the whole API, shutdown under a failing
#: trace collector, replicas killed mid-call). The default ``pytest`` leaves it out
#: (pyproject.toml's addopts). Listed here, in one place: a module, or one test of a module
#: (``module::test``, all its parameters).
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
    "hostile/test_memory_ops.py",
    "hostile/test_declared_limits_memory.py",
    # Long runs (see above).
    "grpc/test_grpc_receive.py::test_refused_requests_are_freed_at_once",
    "grpc/test_grpc_receive.py::test_concurrent_keyed_uploads_stay_within_their_reservations",
    "ops/test_compiled_kernels.py::test_the_compiled_code_is_cached_and_loaded",
    "test_startup.py::test_the_first_start_says_the_kernels_compile_and_a_later_one_does_not",
    "test_schemathesis.py",
    "test_edges.py::test_shutdown_is_on_time_whatever_the_collector_does",
    "client/test_client_retry.py::test_a_replica_killed_mid_call_is_retried_on_the_other",
    "client/test_verify_command.py::test_a_few_thousand_cases",
)
_TESTS = Path(__file__).resolve().parent


def in_system_tier(relative: str, name: str) -> bool:
    """Whether test ``name`` (its parameters aside) of module ``relative`` is in the system tier."""
    return relative in SYSTEM_TIER or f"{relative}::{name.partition('[')[0]}" in SYSTEM_TIER


def pytest_configure(config: pytest.Config) -> None:
    progress.register(config)
    # The compiled loops serve every test, as they serve a started service: NumPy's stand-ins
    # (which answer while they compile) are held to the same bits in tests/ops/test_numpy_stand_ins.py.
    loops.wait_compiled()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        relative = item.path.resolve().relative_to(_TESTS).as_posix()
        if in_system_tier(relative, item.name):
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
