"""Start-up as a person sees it: a line while the kernels compile on a first start (and their
time once ready), and a port already taken, HTTP's or gRPC's, told in one clear line naming
the setting to change, under ``python -m app`` and under ``python -m uvicorn app.main:app``."""

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.numba_cache import kernels_cached
from app.ops.compiled import compiled_signatures
from tests.support import free_port

ROOT = Path(__file__).resolve().parents[1]
UVICORN = [
    "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1",
    "--http", "app.http.protocol:ServiceHttpProtocol",
]  # fmt: skip


@contextlib.contextmanager
def held_port() -> Iterator[int]:
    """A port of 127.0.0.1 another process's socket listens on (this one's, here)."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def run(arguments: list[str], env: dict[str, str], timeout: float = 120) -> tuple[int, str]:
    """A process that is expected to stop by itself: its status and its output."""
    result = subprocess.run(
        [sys.executable, *arguments],
        cwd=ROOT,
        env={**os.environ, "TENSOR_OPS_HOST": "127.0.0.1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    return result.returncode, result.stdout


def records(output: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_a_taken_grpc_port_is_one_line_under_python_m_app() -> None:
    # A second instance moved to another HTTP port still meets the first one's gRPC port.
    with held_port() as grpc_port:
        env = {"TENSOR_OPS_PORT": str(free_port()), "TENSOR_OPS_GRPC_PORT": str(grpc_port)}
        status, output = run(["-m", "app"], env)
    assert status == 1, output
    (line,) = records(output)
    assert line["level"] == "error"
    assert line["message"] == (
        f"gRPC cannot start: the gRPC port 127.0.0.1:{grpc_port} is already in use by another "
        "process; stop it, choose a free port with TENSOR_OPS_GRPC_PORT, or set "
        "TENSOR_OPS_GRPC_PORT=0 to serve HTTP only"
    )


def test_a_taken_http_port_is_one_line_under_python_m_app() -> None:
    with held_port() as port:
        env = {"TENSOR_OPS_PORT": str(port), "TENSOR_OPS_GRPC_PORT": str(free_port())}
        status, output = run(["-m", "app"], env)
    assert status == 1, output
    (line,) = records(output)
    assert line["level"] == "error"
    assert line["message"] == (
        f"HTTP cannot start: the HTTP port 127.0.0.1:{port} is already in use by another "
        "process; stop it, or choose a free port with TENSOR_OPS_PORT (and, for a second "
        "instance, TENSOR_OPS_GRPC_PORT: gRPC listens beside HTTP, on 8001 unless set)"
    )


def test_a_taken_grpc_port_is_one_clear_line_under_uvicorn() -> None:
    # uvicorn's --port moves HTTP only: a second instance meets gRPC's port.
    with held_port() as grpc_port:
        env = {"TENSOR_OPS_GRPC_PORT": str(grpc_port), "TENSOR_OPS_LOG_FORMAT": "json"}
        status, output = run([*UVICORN, "--port", str(free_port())], env)
    assert status != 0, output
    assert "Traceback" not in output
    assert "add_port" not in output  # gRPC core's own line
    lines = records(output)  # every line JSON: uvicorn's as well
    errors = [line for line in lines if line["level"] == "error"]
    assert errors[0]["message"] == (
        f"gRPC cannot start: the gRPC port 127.0.0.1:{grpc_port} is already in use by another "
        "process; stop it, choose a free port with TENSOR_OPS_GRPC_PORT, or set "
        "TENSOR_OPS_GRPC_PORT=0 to serve HTTP only"
    )
    # Then uvicorn's own last word, and nothing else.
    assert [line["message"] for line in errors[1:]] == ["Application startup failed. Exiting."]


def test_a_taken_http_port_is_one_line_under_uvicorn() -> None:
    with held_port() as port:
        env = {"TENSOR_OPS_GRPC_PORT": "0", "TENSOR_OPS_LOG_FORMAT": "json"}
        status, output = run([*UVICORN, "--port", str(port)], env)
    assert status != 0, output
    assert "Traceback" not in output
    errors = [line for line in records(output) if line["level"] == "error"]
    assert len(errors) == 1, output
    assert "address already in use" in errors[0]["message"]
    assert str(port) in errors[0]["message"]


def serve_until_healthy(
    env: dict[str, str], log: Path, seconds: float = 240, until: str = ""
) -> str:
    """``python -m app`` run to its first healthy answer (and, with ``until``, until its log
    has that text), then stopped: its output."""
    port = free_port()
    with log.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "app"],
            cwd=ROOT,
            env={
                **os.environ,
                "TENSOR_OPS_HOST": "127.0.0.1",
                "TENSOR_OPS_PORT": str(port),
                "TENSOR_OPS_GRPC_PORT": "0",
                "TENSOR_OPS_LOG_FORMAT": "json",
                **env,
            },
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        else:
            pytest.fail(f"no healthy answer in {seconds} s: {log.read_text()}")
        while until not in log.read_text() and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
    return log.read_text()


@pytest.mark.e2e
def test_the_first_start_says_the_kernels_compile_and_a_later_one_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "numba-cache"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    assert not kernels_cached()
    env = {"NUMBA_CACHE_DIR": str(cache)}
    ready = re.compile(r"kernels ready in \d+\.\d s")
    # A cold compile beside other work (the system tier runs it two at a time) may take minutes.
    log = serve_until_healthy(env, tmp_path / "1.log", seconds=480, until="kernels ready")
    first = [line["message"] for line in records(log)]
    # The kernels compile beside the service (NumPy's loops answer meanwhile), said once.
    compiling = first.index(
        "compiling the kernels (first start only, a few seconds); NumPy's loops answer meanwhile"
    )
    (done,) = [index for index, message in enumerate(first) if ready.fullmatch(message)]
    assert compiling < done
    assert kernels_cached()
    log = serve_until_healthy(env, tmp_path / "2.log", until="kernels ready")
    again = [line["message"] for line in records(log)]
    assert [message for message in again if ready.fullmatch(message)] != []
    assert not any(message.startswith("compiling") for message in again)
    # What the first start wrote is the whole of the machine code: an import in another process
    # loads every signature of every loop from NUMBA_CACHE_DIR and compiles none (the one cold
    # compile of this test serves both claims; each costs about a minute of CPU).
    assert loaded_from_the_cache(env) == dict(compiled_signatures())


#: Each compiled loop's signatures loaded from numba's cache and compiled, in a fresh process.
CACHE_STATISTICS = """
import json
from app.ops.compiled import cache_statistics
print(json.dumps(cache_statistics()))
"""


def loaded_from_the_cache(env: dict[str, str]) -> dict[str, int]:
    """How many signatures of each loop an import loaded from the cache (those it compiled
    instead fail the call: the cache was to hold them all)."""
    done = subprocess.run(
        [sys.executable, "-c", CACHE_STATISTICS],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    counts: dict[str, list[int]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert {name: missed for name, (_, missed) in counts.items()} == dict.fromkeys(counts, 0)
    return {name: hits for name, (hits, _) in counts.items()}
