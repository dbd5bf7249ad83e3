"""Clients that misbehave, memory admission and the event loop, against a real uvicorn.

Each test checks that the misbehaviour gets its answer (or none, if the client left), that the
same worker keeps serving everyone else, and that the memory it reserved comes back.
"""

import base64
import contextlib
import io
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support import (
    address,
    launch_server,
    malloc_env,
    npy_b64,
    npz_bytes,
    server_output,
    stop_server,
)

pytestmark = pytest.mark.e2e


def serve(env: dict[str, str]) -> Iterator[tuple[str, int]]:
    # The allocator settings of the Docker image (and Compose, and Kubernetes): what the memory
    # tests measure is the service as it is deployed.
    url, process = launch_server({**malloc_env(), **env}, settled=True)
    yield url, process.pid
    output = server_output(process)
    stop_server(process)
    assert "Traceback" not in output


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, int]]:
    """Default limits, but a client must send 16 bytes a second over every second."""
    yield from serve({"TENSOR_OPS_RATE_WINDOW": "1", "TENSOR_OPS_MIN_TRANSFER_RATE": "16"})


@pytest.fixture(scope="module")
def patient_server() -> Iterator[tuple[str, int]]:
    """Default limits with a rate window of a minute: for a test whose promise is not about the
    rate, run on a machine whose load may stall its client for over a second (the 1-second
    window cut a 64 MiB answer after 9.9 MB once, with two full test runs on two cores)."""
    yield from serve({"TENSOR_OPS_RATE_WINDOW": "60"})


@pytest.fixture(scope="module")
def tight_server() -> Iterator[tuple[str, int]]:
    """A memory budget of 300 MiB and an admission timeout of 1 s."""
    yield from serve(
        {
            "TENSOR_OPS_MEMORY_BUDGET_BYTES": str(300 << 20),
            "TENSOR_OPS_ADMISSION_TIMEOUT": "1",
            "TENSOR_OPS_BODY_TIMEOUT": "5",
        }
    )


@pytest.fixture(scope="module")
def patient_tight_server() -> Iterator[tuple[str, int]]:
    """The tight budget, with a body that stalls held for a minute: a loaded machine's seconds
    between two uploads must not end the first before the second is refused."""
    yield from serve(
        {
            "TENSOR_OPS_MEMORY_BUDGET_BYTES": str(300 << 20),
            "TENSOR_OPS_ADMISSION_TIMEOUT": "1",
            "TENSOR_OPS_BODY_TIMEOUT": "60",
            "TENSOR_OPS_RATE_WINDOW": "60",
        }
    )


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    match = re.search(rf"^{name} (\S+)$", text, flags=re.M)
    return float(match.group(1)) if match else 0.0


def wait_until_released(url: str) -> None:
    deadline = time.monotonic() + 10
    while metric(url, "tensor_ops_memory_reserved_bytes") != 0:
        assert time.monotonic() < deadline, "the reservation was not given back"
        time.sleep(0.05)


def healthy(url: str, pid: int) -> None:
    assert httpx.get(f"{url}/health", timeout=5).json() == {"status": "ok"}
    reply = httpx.post(f"{url}/roll", json={"data": [1, 2, 3], "shift": 1, "axes": 0}, timeout=5)
    assert reply.json()["data"] == [3, 1, 2]
    assert Path(f"/proc/{pid}").exists(), "the worker died"


def rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]


def request_head(path: str, length: int, content_type: str = "application/json") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def read_reply(connection: socket.socket) -> bytes:
    reply = b""
    connection.settimeout(10)
    while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
        chunk = connection.recv(65536)
        if not chunk:
            break
        reply += chunk
    return reply


def test_disconnect_in_the_middle_of_an_upload(server: tuple[str, int]) -> None:
    url, pid = server
    with socket.create_connection(address(url)) as connection:
        connection.sendall(request_head("/roll", 50 << 20) + b'{"data": "' + b"A" * (1 << 20))
        time.sleep(0.3)
    wait_until_released(url)
    healthy(url, pid)


def test_disconnect_in_the_middle_of_a_download(server: tuple[str, int]) -> None:
    url, pid = server
    buffer = io.BytesIO()
    np.savez(
        buffer,
        data=np.zeros((1, 4096), np.float64),
        indices=np.zeros(4096, np.int64),
        axis=np.int64(0),
    )
    body = buffer.getvalue()  # 128 MiB of output from a 100 KiB body
    with socket.create_connection(address(url)) as connection:
        connection.sendall(request_head("/gather", len(body), "application/x-npz") + body)
        connection.settimeout(30)
        first = connection.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
    wait_until_released(url)
    healthy(url, pid)


def test_a_client_that_stops_sending_gets_408(server: tuple[str, int]) -> None:
    url, pid = server
    with socket.create_connection(address(url)) as connection:
        # Content-Length says 1000 bytes; 10 arrive, then nothing (a lie, or a stalled client).
        connection.sendall(request_head("/roll", 1000) + b'{"data": [')
        reply = read_reply(connection)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"TENSOR_OPS_MIN_TRANSFER_RATE" in reply
    wait_until_released(url)
    healthy(url, pid)


def test_a_small_body_that_stalls_gets_408_at_the_body_timeout(
    tight_server: tuple[str, int],
) -> None:
    # 200 bytes, well below a window's quota: read by the small-body path, whose one deadline
    # is the body timeout (5 s here, shorter than the 10 s window).
    url, pid = tight_server
    with socket.create_connection(address(url)) as connection:
        started = time.monotonic()
        connection.sendall(request_head("/roll", 200) + b'{"data": [')
        reply = read_reply(connection)
        elapsed = time.monotonic() - started
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"TENSOR_OPS_BODY_TIMEOUT" in reply
    assert 4.5 < elapsed < 10
    healthy(url, pid)


def test_a_small_body_in_pieces_is_served(tight_server: tuple[str, int]) -> None:
    url, pid = tight_server
    body = b'{"data": [1, 2, 3, 4], "shift": 1, "axes": 0}'
    with socket.create_connection(address(url)) as connection:
        connection.sendall(request_head("/roll", len(body)))
        for start in range(0, len(body), 8):
            connection.sendall(body[start : start + 8])
            time.sleep(0.05)
        reply = read_reply(connection)
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    assert b'"data":[4,1,2,3]' in reply
    healthy(url, pid)


def test_a_slow_but_steady_client_is_served(server: tuple[str, int]) -> None:
    url, pid = server
    body = b'{"data": [1, 2, 3, 4], "shift": 1, "axes": 0}'
    with socket.create_connection(address(url)) as connection:
        connection.sendall(request_head("/roll", len(body)))
        for start in range(0, len(body), 8):  # a trickle, each part well inside the timeout
            connection.sendall(body[start : start + 8])
            time.sleep(0.2)
        reply = read_reply(connection)
    assert reply.startswith(b"HTTP/1.1 200")
    assert b'"data":[4,1,2,3]' in reply
    healthy(url, pid)


def test_content_length_shorter_than_the_body(server: tuple[str, int]) -> None:
    url, pid = server
    body = b'{"data": [1, 2, 3], "shift": 1, "axes": 0}'
    with socket.create_connection(address(url)) as connection:
        connection.sendall(request_head("/roll", 10) + body)
        reply = read_reply(connection)
    # The first 10 bytes are the body (not JSON: 400); the rest is no valid request at all.
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    healthy(url, pid)


def test_content_length_that_is_not_a_number(server: tuple[str, int]) -> None:
    url, pid = server
    with socket.create_connection(address(url)) as connection:
        connection.sendall(b"POST /roll HTTP/1.1\r\nHost: t\r\nContent-Length: 1e9\r\n\r\n{}")
        reply = read_reply(connection)
    assert reply.startswith(b"HTTP/1.1 400")
    healthy(url, pid)


def send_in_background(connection: socket.socket, data: bytes) -> threading.Thread:
    """Send ``data`` from a thread (the server may stop reading); errors mean it hung up."""

    def push() -> None:
        with contextlib.suppress(OSError):
            connection.sendall(data)

    thread = threading.Thread(target=push, daemon=True)
    thread.start()
    return thread


def test_memory_admission_waits_then_answers_503(
    patient_tight_server: tuple[str, int],
) -> None:
    # The first upload stalls past its 150 MiB for as long as the test takes: were it cut off
    # (the body timeout, the rate window), the second would be admitted and refused otherwise.
    url, pid = patient_tight_server
    holder = socket.create_connection(address(url))
    try:
        # 150 MiB of a 200 MiB body arrive: what has arrived (and a step ahead) is reserved.
        holder.sendall(request_head("/roll", 200 << 20) + b'{"data": "' + b"A" * (150 << 20))
        deadline = time.monotonic() + 10
        while metric(url, "tensor_ops_memory_reserved_bytes") < 150 << 20:
            assert time.monotonic() < deadline, "the arrived bytes were not reserved"
            time.sleep(0.05)
        # A second body of 160 MiB cannot fit beside it: it waits, then gets 503.
        started = time.monotonic()
        with socket.create_connection(address(url)) as second:
            second.sendall(request_head("/roll", 160 << 20))
            send_in_background(second, b'{"data": "' + b"A" * (160 << 20))
            reply = read_reply(second)
        waited = time.monotonic() - started
        assert reply.startswith(b"HTTP/1.1 503"), reply[:300]
        assert re.search(rb"retry-after: \d+", reply, flags=re.I)
        assert b"busy" in reply
        assert waited >= 0.9, "it should wait for the admission timeout first"
        # Small requests still pass: they fit in what is left.
        healthy(url, pid)
    finally:
        holder.close()
    wait_until_released(url)
    assert metric(url, "tensor_ops_admission_refused_total") >= 1


def test_announced_bodies_that_never_come_hold_no_memory(tight_server: tuple[str, int]) -> None:
    """16 uploads announce 256 MiB each (13 times the budget) and stall, 4 more trickle: a
    valid 8 MiB request is still served, and almost nothing is reserved meanwhile."""
    url, pid = tight_server
    stalled = [socket.create_connection(address(url)) for _ in range(20)]
    try:
        for connection in stalled:
            connection.sendall(request_head("/roll", 256 << 20) + b'{"data": "')
        for _ in range(3):  # the last four trickle a byte at a time
            for connection in stalled[16:]:
                connection.sendall(b"A")
            time.sleep(0.05)
        assert metric(url, "tensor_ops_memory_reserved_bytes") < 16 << 20
        data = np.arange(2 << 20, dtype=np.float32)
        buffer = io.BytesIO()
        np.save(buffer, data)
        body = {"data": base64.b64encode(buffer.getvalue()).decode(), "shift": 1, "axes": 0}
        reply = httpx.post(
            f"{url}/roll", json=body, headers={"accept": "application/x-npy"}, timeout=30
        )
        assert reply.status_code == 200, reply.text[:300]
        np.testing.assert_array_equal(np.load(io.BytesIO(reply.content)), np.roll(data, 1))
    finally:
        for connection in stalled:
            connection.close()
    wait_until_released(url)
    healthy(url, pid)


def test_a_trickle_below_the_minimum_rate_gets_408(server: tuple[str, int]) -> None:
    url, pid = server
    with socket.create_connection(address(url)) as connection:
        connection.sendall(request_head("/roll", 1000) + b'{"data": [')
        started = time.monotonic()
        connection.settimeout(0.3)
        # One byte every 0.3 s: 3 bytes a second, below the 16 the server asks for.
        while time.monotonic() - started < 10:
            try:
                connection.sendall(b"1")
                if connection.recv(1, socket.MSG_PEEK):
                    break
            except TimeoutError:
                continue
            except OSError:  # the server answered and hung up while we were sending
                break
        reply = read_reply(connection)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"TENSOR_OPS_MIN_TRANSFER_RATE" in reply
    wait_until_released(url)
    healthy(url, pid)


@pytest.fixture(scope="module")
def impatient_server() -> Iterator[tuple[str, int]]:
    """Clients must read their answers at 1 MiB a second over every second."""
    yield from serve({"TENSOR_OPS_RATE_WINDOW": "1", "TENSOR_OPS_MIN_TRANSFER_RATE": str(1 << 20)})


def test_a_client_that_never_reads_is_cut_off_and_its_memory_comes_back(
    impatient_server: tuple[str, int],
) -> None:
    url, pid = impatient_server
    data = np.arange(16 << 20, dtype=np.float32)  # a 64 MiB answer
    buffer = io.BytesIO()
    np.savez(buffer, data=data, shift=np.int64(1), axes=np.int64(0))
    connection = socket.socket()
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    connection.connect(address(url))
    try:
        connection.sendall(request_head("/roll", len(buffer.getvalue()), "application/x-npz"))
        connection.sendall(buffer.getvalue())
        # Never read: the answer's memory is reserved while the server waits to send it...
        deadline = time.monotonic() + 10
        while metric(url, "tensor_ops_memory_reserved_bytes") == 0:
            assert time.monotonic() < deadline, "the answer was never reserved"
            time.sleep(0.02)
        # ...until the window passes without the client reading: then it is cut off.
        wait_until_released(url)
        connection.settimeout(10)
        received = 0
        while chunk := connection.recv(1 << 20):
            received += len(chunk)
        assert received < data.nbytes, "the whole answer should not have been sent"
    finally:
        connection.close()
    healthy(url, pid)


def test_a_request_that_can_never_fit_gets_413(tight_server: tuple[str, int]) -> None:
    url, _ = tight_server
    size = 180 << 20  # with its decoded bytes (3/4 of it) it needs more than the whole budget
    body = b'{"data": "' + b"A" * (size - 12) + b'"}'
    with socket.create_connection(address(url)) as connection:
        connection.sendall(request_head("/roll", len(body)) + body)
        reply = read_reply(connection)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:300]
    assert b"TENSOR_OPS_MEMORY_BUDGET_BYTES" in reply
    wait_until_released(url)


def test_health_answers_promptly_while_a_64_mib_request_runs(
    patient_server: tuple[str, int],
) -> None:
    url, pid = patient_server
    data = np.random.default_rng(0).standard_normal(16 << 20).astype(np.float32)  # 64 MiB
    request = {"data": npy_b64(data), "shift": 12345, "axes": 0}
    outcome: dict[str, object] = {}

    def big() -> None:
        reply = httpx.post(f"{url}/roll", json=request, timeout=120)
        outcome["status"] = reply.status_code
        out = np.load(io.BytesIO(base64.b64decode(reply.json()["data"])))
        outcome["correct"] = bool(np.array_equal(out, np.roll(data, 12345)))

    thread = threading.Thread(target=big)
    thread.start()
    answered_while_running = 0
    with httpx.Client(base_url=url, timeout=10) as client:
        while thread.is_alive():
            reply = client.get("/health")
            assert reply.status_code == 200
            assert reply.json()["status"] == "ok", reply.text
            answered_while_running += thread.is_alive()
            time.sleep(0.02)
    thread.join()
    assert outcome == {"status": 200, "correct": True}
    # The promise (docs/limits.md, "The event loop") is that /health keeps answering while the
    # request is served, not a time: a loop that ran the request would answer once it was done
    # (one answer at most while it ran). How long an answer takes depends on the machine's load
    # (1.21 s seen under a loaded CI run), so it is not asserted here.
    assert answered_while_running >= 5, answered_while_running
    healthy(url, pid)


def test_memory_returns_near_its_baseline_after_a_burst(server: tuple[str, int]) -> None:
    url, pid = server
    data = np.random.default_rng(1).standard_normal(8 << 20).astype(np.float32)  # 32 MiB
    buffer = io.BytesIO()
    np.savez(buffer, data=data, shift=np.int64(7), axes=np.int64(0))
    body = buffer.getvalue()
    with httpx.Client(base_url=url, timeout=60) as client:
        client.post("/roll", content=body, headers={"content-type": "application/x-npz"})
        time.sleep(0.5)
        baseline = rss(pid)
        peak = baseline
        threads = []
        for _ in range(6):
            thread = threading.Thread(
                target=lambda: client.post(
                    "/roll", content=body, headers={"content-type": "application/x-npz"}
                )
            )
            thread.start()
            threads.append(thread)
        for thread in threads:
            while thread.is_alive():
                peak = max(peak, rss(pid))
                time.sleep(0.01)
            thread.join()
    wait_until_released(url)
    time.sleep(0.5)
    after = rss(pid)
    assert after - baseline < 64 << 20, (
        f"RSS {baseline >> 20} MiB before, {after >> 20} MiB after (peak {peak >> 20})"
    )
    healthy(url, pid)


def test_middle_sized_blocks_go_back_after_a_large_one(server: tuple[str, int]) -> None:
    # glibc's own threshold grows to the largest block freed (a 28 MiB request's here): the
    # 4 MiB blocks of the burst after it would then come from heaps that keep ~100 MiB. The
    # image's MALLOC_MMAP_THRESHOLD_ (which ``serve`` gives the server) keeps them on mmap.
    url, pid = server

    def npz_roll(elements: int) -> bytes:
        data = np.random.default_rng(2).standard_normal(elements).astype(np.float32)
        return npz_bytes(data=data, shift=np.int64(7), axes=np.int64(0))

    large, middle = npz_roll(7 << 20), npz_roll(1 << 20)
    headers = {"content-type": "application/x-npz"}
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.post("/roll", content=large, headers=headers).status_code == 200
        time.sleep(0.5)
        baseline = rss(pid)
        statuses: list[int] = []
        threads = [
            threading.Thread(
                target=lambda: statuses.append(
                    client.post("/roll", content=middle, headers=headers).status_code
                )
            )
            for _ in range(12)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert statuses == [200] * 12
    wait_until_released(url)
    time.sleep(0.5)
    after = rss(pid)
    assert after - baseline < 32 << 20, f"RSS {baseline >> 20} MiB before, {after >> 20} MiB after"
    healthy(url, pid)
