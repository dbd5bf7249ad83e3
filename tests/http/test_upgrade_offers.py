"""A request that offers to switch protocols (``Connection: Upgrade``, ``Upgrade: h2c``, as
Java's HttpClient sends on every cleartext request) is served over HTTP/1.1 with its body read
as its body, under ``python -m app`` and ``python -m uvicorn app.main:app`` alike
(app/http/protocol.py); Java's own client is run too when ``java`` is installed."""

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import launch_server, server_output, stop_server

pytestmark = pytest.mark.e2e

OFFER = (
    b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
    b"HTTP2-Settings: AAEAAEAAAAIAAAABAAMAAABkAAQBAAAAAAUAAEAA\r\n"
)
BODY = json.dumps({"data": [[1, 2, 3], [4, 5, 6]], "shift": 1, "axes": 1}).encode()
ANSWER = {"data": [[3, 1, 2], [6, 4, 5]], "dtype": "int64", "shape": [2, 3]}


@pytest.fixture(scope="module", params=["python -m app", "python -m uvicorn"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    command = ["-m", "app"] if request.param == "python -m app" else None
    url, process = launch_server(command=command)
    host, port = url.removeprefix("http://").split(":")
    yield host, int(port)
    assert "Traceback" not in server_output(process)
    stop_server(process)


def exchange(address: tuple[str, int], pieces: list[bytes]) -> bytes:
    """Send the pieces (a pause between them, so they arrive apart) and read to the close."""
    with socket.create_connection(address, timeout=10) as connection:
        for piece in pieces:
            connection.sendall(piece)
            time.sleep(0.05)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def head(framing: bytes) -> bytes:
    return (
        b"POST /roll HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n" + OFFER + framing
    )


def json_answer(raw: bytes) -> tuple[int, dict[str, object], bytes]:
    status_line, _, rest = raw.partition(b"\r\n")
    headers, _, body = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), json.loads(body), headers.lower()


def chunked(body: bytes, size: int) -> bytes:
    parts = [b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size])
             for i in range(0, len(body), size)]  # fmt: skip
    return b"".join(parts) + b"0\r\n\r\n"


@pytest.mark.parametrize(
    "pieces",
    [
        pytest.param(lambda: [head(b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY], id="length"),
        pytest.param(
            lambda: [head(b"Content-Length: %d\r\n\r\n" % len(BODY)), BODY[:10], BODY[10:]],
            id="length-split",
        ),
        pytest.param(
            lambda: [head(b"Transfer-Encoding: chunked\r\n\r\n") + chunked(BODY, 7)], id="chunked"
        ),
        pytest.param(
            lambda: [head(b"Transfer-Encoding: chunked\r\n\r\n"), chunked(BODY, 5)],
            id="chunked-split",
        ),
    ],
)
def test_the_body_after_a_declined_upgrade_is_the_body(
    server: tuple[str, int], pieces: object
) -> None:
    assert callable(pieces)
    status, answer, headers = json_answer(exchange(server, pieces()))
    assert (status, answer) == (200, ANSWER)
    assert b"connection: close" in headers  # the parser cannot go on: the connection ends


def test_a_declined_upgrade_with_a_broken_chunk_is_a_400(server: tuple[str, int]) -> None:
    raw = exchange(server, [head(b"Transfer-Encoding: chunked\r\n\r\n") + b"zz\r\nabc\r\n"])
    assert raw.startswith(b"HTTP/1.1 400 ")


def test_a_request_without_an_offer_keeps_its_connection(server: tuple[str, int]) -> None:
    request = (
        b"POST /roll HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
    )
    with socket.create_connection(server, timeout=10) as connection:
        for _ in range(2):  # two requests on one connection
            connection.sendall(request)
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
                answer += connection.recv(65536)
            assert json_answer(answer)[:2] == (200, ANSWER)


JAVA = """
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

public class Offer {
    public static void main(String[] args) throws Exception {
        HttpClient client = HttpClient.newHttpClient();  // HTTP/2 by default: offers h2c
        for (int i = 0; i < 2; i++) {
            HttpRequest request = HttpRequest.newBuilder(URI.create(args[0] + "/roll"))
                    .header("Content-Type", "application/json")
                    .POST(HttpRequest.BodyPublishers.ofString(args[1]))
                    .build();
            HttpResponse<String> answer = client.send(request, HttpResponse.BodyHandlers.ofString());
            System.out.println(answer.statusCode() + " " + answer.version() + " " + answer.body());
        }
    }
}
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="java is not installed on this machine")
def test_java_http_client_with_its_defaults(server: tuple[str, int], tmp_path: Path) -> None:
    source = tmp_path / "Offer.java"
    source.write_text(JAVA)
    host, port = server
    done = subprocess.run(
        ["java", str(source), f"http://{host}:{port}", BODY.decode()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        status, version, body = line.split(" ", 2)
        assert (status, version, json.loads(body)) == ("200", "HTTP_1_1", ANSWER)
