"""A request's head is bounded in size and time, a chunked body's trailers hold nothing, and a
request the parser cannot read gets the error model (app/http/protocol.py), against
real servers: ``python -m uvicorn app.main:app`` with the service's protocol (``--http``) and
``python -m app``.

Before: 2 GB of header lines were 2.3 GB of the worker's memory; 500 MB of trailer lines 576
MB; half a request line, or nothing at all, kept a connection open for good.
"""

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from app.http.protocol import MAX_HEAD_BYTES
from tests.support import address, launch_server, server_output, stop_server

pytestmark = pytest.mark.e2e

WINDOW = 1.0  # TENSOR_OPS_RATE_WINDOW: the head's deadline too
MiB = 1 << 20


@pytest.fixture(scope="module", params=["uvicorn", "app"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    # The kernels loaded before the tests measure the worker's memory (their log line is info).
    env = {"TENSOR_OPS_RATE_WINDOW": str(WINDOW)}
    command = ["-m", "app"] if request.param == "app" else None
    url, process = launch_server(env, command, settled=True)
    try:
        yield url, process
    finally:
        output = server_output(process)
        stop_server(process)
        assert "Traceback" not in output, output[-3000:]


def resident(process: Any) -> int:
    """The RSS of the process serving (``python -m app`` with one worker serves itself)."""
    with open(f"/proc/{process.pid}/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def read_answer(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection (or ``timeout``)."""
    sock.settimeout(timeout)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except (TimeoutError, ConnectionResetError):
        pass
    return b"".join(chunks)


def refusal(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"content-type: application/json" in head.lower()
    return status, orjson.loads(body)


def still_serving(url: str) -> None:
    response = httpx.post(
        f"{url}/roll", json={"data": [1, 2, 3], "shift": 1, "axes": 0}, timeout=10
    )
    assert response.status_code == 200
    assert response.json()["data"] == [3, 1, 2]


def test_endless_header_lines_are_refused_at_the_limit(server: tuple[str, Any]) -> None:
    url, process = server
    before = resident(process)
    line = b"X-Filler: " + b"a" * 990 + b"\r\n"
    sent = 0
    with socket.create_connection(address(url)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n")
        try:
            for _ in range(2000):  # 20 MB, if nothing stopped it
                sock.sendall(line * 10)
                sent += 10 * len(line)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = read_answer(sock, 10)
    assert sent < 8 * MiB, f"{sent} bytes of headers were taken"
    status, body = refusal(answer)
    assert status == 431
    assert body["detail"][0]["loc"] == ["header"]
    assert body["detail"][0]["type"] == "too_large"
    assert str(MAX_HEAD_BYTES) in body["detail"][0]["msg"]
    assert resident(process) - before < 16 * MiB
    still_serving(url)


@pytest.mark.parametrize("lines", [1, 80])
def test_a_head_past_the_limit_in_one_read_is_refused_too(
    server: tuple[str, Any], lines: int
) -> None:
    url, _ = server
    filler = b"".join(
        b"X-Filler-%d: %s\r\n" % (index, b"c" * (MAX_HEAD_BYTES // lines)) for index in range(lines)
    )
    with socket.create_connection(address(url)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n" + filler + b"\r\n")
        answer = read_answer(sock, 10)
    status, body = refusal(answer)
    assert status == 431
    assert body["detail"][0]["type"] == "too_large"
    assert answer.count(b"HTTP/1.1 ") == 1  # the refusal alone, no 400 after it
    still_serving(url)


def test_a_head_within_the_limit_is_served(server: tuple[str, Any]) -> None:
    url, _ = server
    filler = {f"x-filler-{index}": "b" * 900 for index in range(60)}  # some 55 KB
    response = httpx.post(
        f"{url}/roll",
        json={"data": [[1, 2], [3, 4]], "shift": 1, "axes": 1},
        headers=filler,
        timeout=10,
    )
    assert response.status_code == 200
    assert response.json()["data"] == [[2, 1], [4, 3]]


def stall(sock: socket.socket, part: bytes) -> tuple[bytes, float]:
    """Send part of a head and wait: the answer, and the seconds it took to come."""
    sock.sendall(part)
    started = time.monotonic()
    answer = read_answer(sock, WINDOW + 10)
    return answer, time.monotonic() - started


def test_a_stalled_head_gets_408_within_the_window(server: tuple[str, Any]) -> None:
    url, _ = server
    with socket.create_connection(address(url)) as sock:
        answer, waited = stall(sock, b"POST /roll HTTP/1.1\r\nHost: t\r\nContent-")
    status, body = refusal(answer)
    assert status == 408
    assert body["detail"][0] == {
        "loc": ["header"],
        "msg": f"the request line and headers did not arrive within {WINDOW:g} seconds",
        "type": "timeout",
    }
    assert WINDOW * 0.8 <= waited < WINDOW + 5
    still_serving(url)


def test_a_connection_that_sends_nothing_is_closed_without_a_word(
    server: tuple[str, Any],
) -> None:
    url, _ = server
    with socket.create_connection(address(url)) as sock:
        started = time.monotonic()
        answer = read_answer(sock, WINDOW + 10)
        waited = time.monotonic() - started
    assert answer == b""
    assert waited < WINDOW + 5


def test_the_next_head_on_a_kept_connection_has_its_deadline_too(
    server: tuple[str, Any],
) -> None:
    url, _ = server
    with socket.create_connection(address(url)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        sock.settimeout(10)
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /heal")
        answer = read_answer(sock, WINDOW + 10)
    status, body = refusal(answer)
    assert status == 408
    assert body["detail"][0]["type"] == "timeout"


def test_the_next_head_gets_a_whole_window_from_its_own_first_byte(
    server: tuple[str, Any],
) -> None:
    """The head timer is not made again for every request: the one of the connection's first
    head, when it fires, waits on for a later head's deadline instead of refusing it early."""
    url, _ = server
    with socket.create_connection(address(url)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        time.sleep(WINDOW / 2)  # the first head's timer falls in the middle of the next head
        answer, waited = stall(sock, b"GET /heal")
    status, body = refusal(answer)
    assert status == 408
    assert body["detail"][0]["type"] == "timeout"
    assert WINDOW * 0.8 <= waited < WINDOW + 5


def test_trailers_of_a_chunked_body_hold_no_memory(server: tuple[str, Any]) -> None:
    url, process = server
    before = resident(process)
    payload = b'{"data":[1,2],"shift":1,"axes":0}'
    line = b"X-Trailer: " + b"t" * 990 + b"\r\n"
    with socket.create_connection(address(url)) as sock:
        sock.sendall(
            b"POST /roll HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n0\r\n" % (len(payload), payload)
        )
        deadline = time.monotonic() + 3 * WINDOW
        sent = 0
        try:
            while time.monotonic() < deadline and sent < 200 * MiB:
                sock.sendall(line * 100)
                sent += 100 * len(line)
        except (BrokenPipeError, ConnectionResetError):
            pass
        grown = resident(process) - before
        answer = read_answer(sock, 10)
    assert grown < 16 * MiB, f"{sent} bytes of trailers grew the server by {grown}"
    # The body never ends: cut off by the body's minimum rate, not served.
    status, body = refusal(answer)
    assert status == 408
    assert body["detail"][0]["type"] == "timeout"
    still_serving(url)


def test_pipelined_requests_are_all_answered(server: tuple[str, Any]) -> None:
    url, _ = server
    request = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
    with socket.create_connection(address(url)) as sock:
        sock.sendall(request * 5)
        sock.settimeout(30)
        received = b""
        while received.count(b'{"status":"ok"}') < 5:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                chunk = b""
            assert chunk, f"closed or silent after {received!r}"
            received += chunk
    assert received.count(b"HTTP/1.1 200 OK\r\n") == 5, received


def test_pipelined_requests_of_a_client_that_does_not_read_hold_little_memory(
    server: tuple[str, Any],
) -> None:
    # uvicorn read on after every answer, queuing a socket buffer of requests (thousands) each
    # time: 20 connections sending without reading grew a worker by 2.1 GB in 25 s. Reading
    # stops while requests are queued; every one is answered, in order, once the client reads.
    url, process = server
    count = 20_000
    body = b'{"data":[1,2],"shift":1,"axes":0}'
    request = (
        b"POST /roll HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    before = resident(process)
    with socket.create_connection(address(url)) as sock:
        sending = threading.Thread(target=sock.sendall, args=(request * count,), daemon=True)
        sending.start()
        time.sleep(2)  # the client reads nothing meanwhile
        grown = resident(process) - before
        sock.settimeout(30)
        received = bytearray()
        while received.count(b"HTTP/1.1 ") < count:
            chunk = sock.recv(1 << 20)
            assert chunk, f"closed after {received.count(b'HTTP/1.1 ')} answers"
            received += chunk
        sending.join(10)
    assert grown < 32 * MiB, f"{grown} bytes for {count} pipelined requests"
    assert received.count(b"HTTP/1.1 200 OK\r\n") == count
    assert received.count(b'{"data":[2,1],"dtype":"int64","shape":[2]}') == count


def test_a_refused_head_on_v2_gets_the_v2_shape(server: tuple[str, Any]) -> None:
    """The 431 and 408 come from the one error model, in the shape of the route the request
    line names: V2's ``{"error"}`` with the fault's kind in ``Tensor-Ops-Fault`` under /v2."""
    url, _ = server
    with socket.create_connection(address(url)) as sock:
        sock.sendall(
            b"POST /v2/models/roll/infer HTTP/1.1\r\nHost: t\r\n"
            + (b"X-Filler: " + b"a" * 990 + b"\r\n") * 80
        )
        answer = read_answer(sock, 10)
    status, body = refusal(answer)
    assert status == 431
    assert str(MAX_HEAD_BYTES) in body["error"]
    assert b"tensor-ops-fault: too_large" in answer.partition(b"\r\n\r\n")[0].lower()
    with socket.create_connection(address(url)) as sock:
        sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n")
        answer = read_answer(sock, 30)
    status, body = refusal(answer)
    assert status == 408
    assert "did not arrive within" in body["error"]
    still_serving(url)


@pytest.mark.parametrize(
    ("request_bytes", "shape", "loc", "kind", "found"),
    [
        (b"FOO /roll HTTP/1.1\r\nHost: t\r\n\r\n", "detail", "header", "bad_header", "method"),
        (
            b"GET /health HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n",
            "detail",
            "header",
            "bad_header",
            "header",
        ),
        (
            b"POST /v2/models/roll/infer HTTP/1.1\r\nHost: t\r\nContent-Length: 1x\r\n\r\n",
            "error",
            "header",
            "bad_header",
            "content-length",
        ),
        (
            b"POST /roll HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\n\r\nZZ\r\n{}\r\n",
            "detail",
            "body",
            "bad_length",
            "chunk",
        ),
    ],
    ids=["method", "header-line", "v2-content-length", "chunk-size"],
)
def test_a_request_the_parser_cannot_read_gets_the_error_model(
    server: tuple[str, Any],
    request_bytes: bytes,
    shape: str,
    loc: str,
    kind: str,
    found: str,
) -> None:
    """A request line, header or chunk that is not HTTP/1.1 gets a JSON 400 in the error model
    of the route it names (uvicorn's own answer is a line of plain text), saying which part
    could not be read and what the parser found; the connection is closed and the service
    goes on."""
    url, _ = server
    with socket.create_connection(address(url)) as sock:
        sock.sendall(request_bytes)
        answer = read_answer(sock, 10)
    status, body = refusal(answer)
    assert status == 400
    assert b"connection: close" in answer.partition(b"\r\n\r\n")[0].lower()
    part = "body's framing" if loc == "body" else "request line and headers"
    if shape == "detail":
        [item] = body["detail"]
        assert item["loc"] == [loc]
        assert item["type"] == kind
        message = item["msg"]
    else:
        assert list(body) == ["error"]
        message = body["error"]
        head = answer.partition(b"\r\n\r\n")[0].lower()
        assert f"tensor-ops-fault: {kind}\r\n".encode() in head
    assert message.startswith(f"the {part} cannot be read as HTTP/1.1 (the parser found: ")
    assert found in message.lower()
    assert message.endswith("); send a well-formed request")
    still_serving(url)


def answers(stream: bytes) -> list[tuple[int, bytes, bytes]]:
    """The answers in ``stream``, in order: status, head and body (each has a Content-Length)."""
    found = []
    while stream:
        head, _, rest = stream.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")[1:]
            if line.lower().startswith(b"content-length:")
        )
        found.append((status, head.lower(), rest[:length]))
        stream = rest[length:]
    return found


@pytest.mark.parametrize(
    ("unreadable", "status", "loc", "words"),
    [
        (b"FOO /roll HTTP/1.1\r\nHost: t\r\n\r\n", 400, "header", "method"),
        (
            b"POST /roll HTTP/1.1\r\nHost: t\r\nContent-Length: 1x\r\n\r\n",
            400,
            "header",
            "content-length",
        ),
        (
            b"GET /health HTTP/1.1\r\nX-Filler: " + b"a" * (MAX_HEAD_BYTES + 10) + b"\r\n\r\n",
            431,
            "header",
            "take more",
        ),
        (
            b"POST /roll HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\n\r\nZZ\r\n{}\r\n",
            400,
            "body",
            "chunk",
        ),
    ],
    ids=["method", "content-length", "head-too-large", "chunk-size"],
)
def test_requests_pipelined_before_an_unreadable_one_are_answered_first(
    server: tuple[str, Any], unreadable: bytes, status: int, loc: str, words: str
) -> None:
    """Good requests, then one the parser cannot read, in one packet: each good one gets its
    answer, in order and exact, and then the refusal, and the connection closes. The refusal
    was written at once and the connection closed under the good requests' answers, which
    were lost (the access log said 200; the client read only the 400)."""
    url, _ = server
    roll = orjson.dumps({"data": [1, 2, 3], "shift": 1, "axes": 0})
    gather = orjson.dumps({"data": [[1, 2], [3, 4]], "indices": [1, 5, -1], "axis": 1})
    good = [
        b"POST /roll HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(roll), roll),
        b"POST /gather HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(gather), gather),
    ]
    with socket.create_connection(address(url)) as sock:
        sock.sendall(b"".join(good) + unreadable)
        stream = read_answer(sock, 10)
    [first, second, last] = answers(stream)
    assert first[0] == 200
    assert orjson.loads(first[2]) == {"data": [3, 1, 2], "dtype": "int64", "shape": [3]}
    assert second[0] == 200
    assert orjson.loads(second[2])["data"] == [[2, 0, 2], [4, 0, 4]]
    assert last[0] == status
    assert b"connection: close" in last[1]
    [item] = orjson.loads(last[2])["detail"]
    assert item["loc"] == [loc]
    assert words in item["msg"].lower()
    still_serving(url)


def test_a_head_stalled_in_the_packet_of_a_request_before_it_gets_408(
    server: tuple[str, Any],
) -> None:
    """A request and the start of the next head in one packet, then nothing: the request is
    answered, then the stalled head gets its 408 at the deadline. Its bytes came in the read
    that ended the request before it (the count starts again at that request's end), so it was
    taken for a connection never used again and closed without a word."""
    url, _ = server
    roll = orjson.dumps({"data": [1, 2, 3], "shift": -1, "axes": 0})
    with socket.create_connection(address(url)) as sock:
        sock.sendall(
            b"POST /roll HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(roll), roll) + b"POST /roll HTTP/1.1\r\nHo"
        )
        started = time.monotonic()
        stream = read_answer(sock, WINDOW + 10)
        waited = time.monotonic() - started
    [first, last] = answers(stream)
    assert first[0] == 200
    assert orjson.loads(first[2]) == {"data": [2, 3, 1], "dtype": "int64", "shape": [3]}
    assert last[0] == 408
    assert orjson.loads(last[2])["detail"][0] == {
        "loc": ["header"],
        "msg": f"the request line and headers did not arrive within {WINDOW:g} seconds",
        "type": "timeout",
    }
    assert waited < WINDOW + 5
    still_serving(url)
