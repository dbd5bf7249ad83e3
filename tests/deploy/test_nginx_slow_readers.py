"""What a reader that stops costs behind the shipped nginx (deploy/nginx/nginx.conf, Debian's
nginx) in front of a real ``python -m app``: no temporary files, a few MiB of nginx, and the
service's memory back once the rate rule has cut the proxy's connection of that call."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.nginx_config import NGINX, nginx_version, render
from tests.grpc.test_grpc_send import (
    Client,
    Worker,
    _http_request,
    _npz_gather,
    gather_message,
)
from tests.support import free_port, launch_server, stop_server

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(NGINX is None, reason="nginx is not installed")]

MiB = 1 << 20
WINDOW = 1.0


def resident(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def temp_bytes(run_dir: Path) -> int:
    return sum(
        item.stat().st_size
        for kind in ("proxy", "client_body")
        if (run_dir / kind).exists()
        for item in (run_dir / kind).rglob("*")
        if item.is_file()
    )


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Worker, Any, int, int, Path]]:
    assert NGINX is not None
    grpc_port = free_port()
    url, process = launch_server(
        env={
            "TENSOR_OPS_GRPC_PORT": str(grpc_port),
            "TENSOR_OPS_MEMORY_BUDGET_BYTES": str(1 << 30),
            "TENSOR_OPS_MAX_BODY_BYTES": str(4 * MiB),
            "TENSOR_OPS_RATE_WINDOW": str(WINDOW),
        },
        command=["-m", "app"],
        settled=True,
    )
    http_port, nginx_grpc = free_port(), free_port()
    config = render(
        tmp_path,
        upstreams={8000: [url.removeprefix("http://")], 8001: [f"127.0.0.1:{grpc_port}"]},
        listens={8080: http_port, 8081: nginx_grpc},
        version=nginx_version(),
    )
    output = tmp_path / "nginx.out"
    with output.open("wb") as sink:
        nginx = subprocess.Popen(
            [NGINX, "-c", str(config), "-p", str(tmp_path)], stdout=sink, stderr=sink
        )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", nginx_grpc), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, output.read_text()
                time.sleep(0.05)
        yield Worker(url, process, grpc_port), nginx, http_port, nginx_grpc, tmp_path
    finally:
        nginx.terminate()
        nginx.wait(30)
        stop_server(process)


def test_a_grpc_reader_that_stops_behind_nginx(proxied: tuple[Worker, Any, int, int, Path]) -> None:
    """Four calls answered 64 MiB each through nginx, never read: the service reserves them,
    nginx takes a buffer of each and writes no temporary file, and the service cuts the
    proxy's connections within two windows: the budget back to 0."""
    worker, nginx, _, port, run_dir = proxied
    nginx_before = resident(nginx.pid)
    client = Client(port)
    try:
        held, nginx_peak, temp_peak = 0.0, 0, 0
        for index in range(4):
            client.start("ModelInfer", [gather_message(64, "")], request_id=f"proxied-{index}")
        started = time.monotonic()
        while time.monotonic() - started < 6 * WINDOW + 3:
            client.pump(0.1)
            held = max(held, worker.reserved())
            nginx_peak = max(nginx_peak, resident(nginx.pid))
            temp_peak = max(temp_peak, temp_bytes(run_dir))
            if held and not worker.reserved():
                break
        assert held >= 128 * MiB, held / MiB
        assert worker.reserved_after(lambda value: value == 0) == 0
    finally:
        client.close()
    assert temp_peak == 0
    assert nginx_peak - nginx_before < 32 * MiB, (nginx_peak - nginx_before) / MiB
    print(
        f"grpc: reserved {held / MiB:.0f} MiB, nginx +{(nginx_peak - nginx_before) / MiB:.1f} MiB"
    )


def test_an_http_reader_that_stops_behind_nginx(
    proxied: tuple[Worker, Any, int, int, Path],
) -> None:
    """A 64 MiB HTTP answer through nginx read ten bytes a second: nginx buffers none of it
    to disk (proxy_buffering off), and the service cuts the proxy's connection at the end of its
    window: the budget back to 0."""
    worker, nginx, http_port, _, run_dir = proxied
    nginx_before = resident(nginx.pid)
    connection = socket.socket()
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    connection.connect(("127.0.0.1", http_port))
    try:
        connection.sendall(_http_request(f"http://127.0.0.1:{http_port}", _npz_gather(64)))
        connection.settimeout(0.1)
        started, held, back, nginx_peak, temp_peak = time.monotonic(), 0.0, False, 0, 0
        while time.monotonic() - started < 6 * WINDOW + 5:
            with contextlib.suppress(OSError):
                connection.recv(1)
            reserved = worker.reserved()
            held = max(held, reserved)
            nginx_peak = max(nginx_peak, resident(nginx.pid))
            temp_peak = max(temp_peak, temp_bytes(run_dir))
            if held and not reserved:
                back = True
                break
            time.sleep(0.1)
        assert held > 0 and back, held
    finally:
        connection.close()
    assert temp_peak == 0
    assert nginx_peak - nginx_before < 32 * MiB, (nginx_peak - nginx_before) / MiB
    print(
        f"http: reserved {held / MiB:.0f} MiB, nginx +{(nginx_peak - nginx_before) / MiB:.1f} MiB"
    )
