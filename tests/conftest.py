"""Fixtures shared by the test modules: the app, an ASGI client, helpers to compare bits."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings


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


def bits(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` as unsigned integers of its width, native order: equal bits compare equal."""
    native = array.astype(array.dtype.newbyteorder("="))
    return native.view(f"u{array.dtype.itemsize}")


def assert_same_bits(actual: npt.NDArray[Any], expected: npt.NDArray[Any]) -> None:
    """Same shape, same element type, same bits (NaN payloads and -0.0 included)."""
    assert actual.shape == expected.shape
    assert actual.dtype.newbyteorder("=") == expected.dtype.newbyteorder("=")
    np.testing.assert_array_equal(bits(actual), bits(expected))


ROOT = Path(__file__).resolve().parent.parent
_LOGS: dict[int, str] = {}  # server pid -> the file its output goes to


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def launch_server(
    env: dict[str, str] | None = None, command: list[str] | None = None
) -> tuple[str, subprocess.Popen[bytes]]:
    """Start the service on a free port of 127.0.0.1 and wait until it is healthy.

    By default ``python -m uvicorn app.main:app``; ``command=["-m", "app"]`` runs the launcher,
    which reads host and port from the environment.
    """
    port = free_port()
    arguments = command or [
        "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    settings = {"TENSOR_OPS_HOST": "127.0.0.1", "TENSOR_OPS_PORT": str(port)}
    log = tempfile.NamedTemporaryFile(prefix="tensor-ops-server-", suffix=".log", delete=False)  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, *arguments],
        cwd=ROOT,
        env={**os.environ, **settings, **(env or {})},
        # A file, not a pipe: a pipe nobody reads fills up and stalls the server's logging.
        stdout=log,
        stderr=subprocess.STDOUT,
        # Its own process group: stopping it stops the workers a supervisor started too.
        start_new_session=True,
    )
    _LOGS[process.pid] = log.name
    log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return url, process
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"uvicorn did not start: {server_output(process)}")


def server_output(process: subprocess.Popen[bytes]) -> str:
    """Everything the server has written to stdout and stderr so far."""
    return Path(_LOGS[process.pid]).read_text(errors="replace")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """Stop the server and every process of its group (workers included), then drop its log."""
    for signal_number, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal_number)
        try:
            process.wait(grace)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # workers a supervisor left behind
    Path(_LOGS.pop(process.pid, "/nonexistent")).unlink(missing_ok=True)


@pytest.fixture(scope="session")
def live_url() -> Iterator[str]:
    """The URL of a real uvicorn serving the app, shared by the tests that need TCP."""
    url, process = launch_server()
    yield url
    stop_server(process)
