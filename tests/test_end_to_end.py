"""End to end: a real uvicorn process on 127.0.0.1, spoken to over TCP."""

import base64
import io
import signal
import subprocess
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from app.registry import REGISTRY
from tests.support import launch_server, send_and_read, server_output, stop_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    url, process = launch_server({"TENSOR_OPS_MAX_BODY_BYTES": str(64 << 20)})
    yield url, process
    stop_server(process)


def test_spec_examples_over_tcp(server: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, _ = server
    with httpx.Client(base_url=url) as client:
        for op in REGISTRY.values():
            route = f"/{op.name}"
            for example in op.examples.values():
                body = client.post(route, json=example["value"]).json()
                if op.several_outputs:  # {"outputs": [{"name", "data", ...}, ...]}
                    data = [item["data"] for item in body["outputs"]]
                    assert data == example["x-expected-output"]
                    continue
                data = body["data"]
                if isinstance(data, str):
                    data = np.load(io.BytesIO(base64.b64decode(data))).tolist()
                assert data == example["x-expected-output"]


def test_large_npy_roll_over_tcp(server: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, _ = server
    data = np.random.default_rng(1).standard_normal((1024, 2048)).astype(np.float32)  # 8 MiB
    buffer = io.BytesIO()
    np.save(buffer, data)
    request = {
        "data": base64.b64encode(buffer.getvalue()).decode(),
        "shift": [3, -5],
        "axes": [0, 1],
    }
    with httpx.Client(base_url=url, timeout=60) as client:
        response = client.post("/roll", json=request, headers={"accept": "application/x-npy"})
        assert response.status_code == 200
        output = np.load(io.BytesIO(response.content))
        np.testing.assert_array_equal(output, np.roll(data, (3, -5), (0, 1)))
        # The service keeps answering small requests after a large one.
        assert client.get("/health").json() == {"status": "ok"}


def test_declared_oversize_body_is_refused_before_reading(
    server: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, _ = server
    reply = send_and_read(
        url,
        b"POST /roll HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000000000\r\n\r\n{",
        until=b"}]}",
    )
    assert reply.startswith(b"HTTP/1.1 413")
    assert b"TENSOR_OPS_MAX_BODY_BYTES" in reply


def test_sigterm_stops_cleanly(server: tuple[str, subprocess.Popen[bytes]]) -> None:
    url, process = server
    assert httpx.get(f"{url}/health").status_code == 200
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    output = server_output(process)
    assert process.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM)
    assert "Traceback" not in output
