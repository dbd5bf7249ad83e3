"""The balancer and API keys, with real servers: two ``python -m app`` replicas with keys on behind
a real nginx running deploy/nginx/nginx.conf.

nginx holds a request's body whole (in memory up to 1 MiB, then in a temporary file) before it
sends it to a replica, so that it can send it again to another. A body is taken only from a
client whose key a replica has accepted: one without a key, or with a wrong one, gets the
replica's 401 once nginx has read its headers, and nothing of its body is kept. And the client's
request id comes back through nginx as it does from a replica alone.
"""

import contextlib
import hashlib
import http.client
import os
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pytest

from app.access import OPEN_PATHS, PROBE_PATHS
from tests.deploy.nginx_config import NGINX
from tests.deploy.test_failover import Balancer, Replica
from tests.support import free_port

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed"),
]

KEY = "nginx-keys-test-key"
#: The request head's Authorization for each kind of client.
VALID = f"Bearer {KEY}"
WRONG = "Bearer not-a-key"
#: Bytes a client sends at a time, and how long it looks for an answer before the next send.
CHUNK = 256 << 10
PAUSE = 0.01
#: nginx's in-memory body buffer (client_body_buffer_size): a body within it never reaches disk.
MEMORY_BUFFER = 1 << 20
ORIGIN = "http://app.example"


@dataclass
class Deployment:
    balancer: Balancer
    replicas: list[Replica]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    directory = tmp_path_factory.mktemp("nginx-keys")
    keys = directory / "api-keys"
    keys.write_text(f"{hashlib.sha256(KEY.encode()).hexdigest()} nginx-test\n")
    env = {"TENSOR_OPS_API_KEYS_FILE": str(keys), "TENSOR_OPS_CORS_ORIGINS": ORIGIN}
    replicas = [
        Replica(free_port(), directory / f"replica-{index}.log", ("-m", "app"), env)
        for index in range(2)
    ]
    try:
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.wait_ready()
        with Balancer.running(directory, replicas) as balancer:
            yield Deployment(balancer, replicas)
    finally:
        for replica in replicas:
            replica.destroy()


@pytest.fixture
def balancer(deployment: Deployment) -> Balancer:
    return deployment.balancer


# ------------------------------------------------------------------------------------------------
# A client that sends a body slowly and watches for the answer while it does


@dataclass
class Upload:
    """One POST on its own connection: its head sent, its body sent a chunk at a time."""

    sock: socket.socket
    length: int  # the body's Content-Length
    sent: int = 0  # body bytes the kernel has taken from the client
    answered_at: int | None = None  # body bytes sent when the answer was there to read

    @classmethod
    def start(cls, port: int, path: str, length: int, headers: dict[str, str]) -> "Upload":
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {length}"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        return cls(sock, length)

    def push(self, limit: int, *, until_answered: bool) -> None:
        """Send the body up to ``limit`` bytes, one chunk every ``PAUSE`` at most, noting when
        the answer was there; stops at the answer if ``until_answered``, or when the server
        takes nothing for 2 s (it closed or stopped reading)."""
        chunk = b"\0" * CHUNK
        stalled = time.monotonic()
        while self.sent < limit:
            readable, writable, _ = select.select([self.sock], [self.sock], [], PAUSE)
            if readable and self.answered_at is None:
                self.answered_at = self.sent
                if until_answered:
                    return
            if writable:
                try:
                    self.sent += self.sock.send(chunk[: min(CHUNK, limit - self.sent)])
                except OSError:  # nginx closed the connection: it takes no more
                    return
                stalled = time.monotonic()
                time.sleep(PAUSE)
            elif time.monotonic() - stalled > 2:
                return

    def wait_for_answer(self, seconds: float) -> None:
        """Send nothing more; note the answer if it comes within ``seconds``."""
        if self.answered_at is None:
            readable, _, _ = select.select([self.sock], [], [], seconds)
            if readable:
                self.answered_at = self.sent

    def answer(self) -> tuple[http.client.HTTPResponse, bytes]:
        response = http.client.HTTPResponse(self.sock, method="POST")
        response.begin()
        return response, response.read()

    def close(self) -> None:
        self.sock.close()


def temp_file_bytes(balancer: Balancer) -> int:
    """Bytes of the request bodies nginx holds in temporary files now. nginx deletes each such
    file as soon as it has opened it, so they are found among its open files, not in the
    directory (nginx runs as one process here: see ``render``)."""
    directory = str(balancer.directory / "client_body")
    total = 0
    fds = Path(f"/proc/{balancer.process.pid}/fd")
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(directory):
                total += fd.stat().st_size
    return total


def call(
    port: int, method: str, path: str, body: bytes | None, headers: dict[str, str]
) -> tuple[http.client.HTTPResponse, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body, headers)
        response = connection.getresponse()
        return response, response.read()
    finally:
        connection.close()


# ------------------------------------------------------------------------------------------------
# Bodies without a valid key


#: What the refusal carries that a client may read, besides its status and body.
REFUSAL_HEADERS = (
    "WWW-Authenticate",
    "Tensor-Ops-Fault",
    "Tensor-Ops-Field",
    "Content-Type",
    "X-Request-ID",
    "Access-Control-Allow-Origin",
    "Access-Control-Expose-Headers",
)


@pytest.mark.parametrize("path", ["/roll", "/gather", "/v2/models/roll/infer"])
@pytest.mark.parametrize("authorization", [None, WRONG, "Basic a2V5", "Bearer "])
def test_a_body_without_a_valid_key_is_refused_before_nginx_takes_it(
    deployment: Deployment, path: str, authorization: str | None
) -> None:
    headers = {"Content-Type": "application/x-npz", "X-Request-ID": "refused-1", "Origin": ORIGIN}
    if authorization:
        headers["Authorization"] = authorization
    # A 32 MiB body announced, and no more than nginx's memory buffer of it sent: nginx answers
    # once the check is done, without the rest (with the check after the body it would wait for
    # all 32 MiB). The client then waits for the answer as long as it takes (a loaded machine
    # takes a while over the key check): the proof is what was sent, not how fast.
    upload = Upload.start(deployment.balancer.port, path, 32 << 20, headers)
    try:
        upload.push(MEMORY_BUFFER, until_answered=True)
        upload.wait_for_answer(15)
        print(f"\n{path} {authorization}: answered after {upload.answered_at} body bytes sent")
        assert upload.answered_at is not None and upload.answered_at <= MEMORY_BUFFER
        response, body = upload.answer()
    finally:
        upload.close()
    # The replica's own refusal: status, body, challenge, V2's headers, request id, CORS.
    own, own_body = call(deployment.replicas[0].port, "POST", path, b"", headers)
    assert (response.status, body) == (own.status, own_body) == (401, own_body)
    for name in REFUSAL_HEADERS:
        assert response.getheader(name) == own.getheader(name), name
    assert response.getheader("X-Request-ID") == "refused-1"


def test_paused_uploads_without_a_key_hold_no_temporary_file(balancer: Balancer) -> None:
    # Three keyless uploads of a 300 MB body, each sending 16 MiB whatever it is answered, then
    # pausing: nginx has answered each 401 and drops what follows, keeping none of it.
    uploads = [
        Upload.start(balancer.port, "/roll", 300_000_000, {"Content-Type": "application/x-npz"})
        for _ in range(3)
    ]
    keyed = None
    try:
        for upload in uploads:
            upload.push(16 << 20, until_answered=False)
        time.sleep(0.5)
        held = temp_file_bytes(balancer)
        print(f"\nkeyless, paused at {[upload.sent for upload in uploads]}: {held} B in temp files")
        assert held == 0
        for upload in uploads:
            assert upload.answered_at is not None and upload.answered_at <= MEMORY_BUFFER
            assert upload.answer()[0].status == 401
        # The measure sees a body nginx does keep: a client with a key, paused the same way.
        keyed = Upload.start(
            balancer.port,
            "/roll",
            300_000_000,
            {"Content-Type": "application/x-npz", "Authorization": VALID},
        )
        keyed.push(16 << 20, until_answered=True)
        time.sleep(0.5)
        held = temp_file_bytes(balancer)
        print(f"with a key, paused at {keyed.sent}: {held} B in temp files")
        assert keyed.answered_at is None
        assert held >= keyed.sent - 2 * MEMORY_BUFFER > 0
    finally:
        for upload in [*uploads, *([keyed] if keyed else [])]:
            upload.close()


# ------------------------------------------------------------------------------------------------
# Requests that pass


def test_a_request_with_a_key_is_answered(balancer: Balancer) -> None:
    data = np.arange(24).reshape(2, 3, 4)
    body = orjson.dumps({"data": data.tolist(), "shift": [1], "axes": [2]})
    headers = {"Content-Type": "application/json", "Authorization": VALID}
    response, answer = call(balancer.port, "POST", "/roll", body, headers)
    assert response.status == 200, answer
    assert orjson.loads(answer)["data"] == np.roll(data, 1, 2).tolist()
    response, answer = call(balancer.port, "GET", "/info", None, {"Authorization": VALID})
    assert response.status == 200 and orjson.loads(answer)["access"]["api_keys"]


@pytest.mark.parametrize(
    "path",
    [
        *sorted(OPEN_PATHS | PROBE_PATHS),
        "/v2/models/roll/ready",
        "/static-offline-docs/favicon.png",
    ],
)
def test_what_the_service_leaves_open_is_open_through_nginx(balancer: Balancer, path: str) -> None:
    response, _ = call(balancer.port, "GET", path, None, {})
    assert response.status == 200, path


def test_a_cors_preflight_passes_without_a_key(balancer: Balancer) -> None:
    headers = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    response, _ = call(balancer.port, "OPTIONS", "/roll", None, headers)
    assert response.status == 200
    assert response.getheader("Access-Control-Allow-Origin") == ORIGIN


# ------------------------------------------------------------------------------------------------
# Request ids


@pytest.mark.parametrize("authorization", [VALID, None])
def test_the_clients_request_id_comes_back_through_nginx(
    balancer: Balancer, authorization: str | None
) -> None:
    given = "client-id:42.A_b-" + "x" * 100
    headers = {"X-Request-ID": given, **({"Authorization": authorization} if authorization else {})}
    response, _ = call(balancer.port, "GET", "/info", None, headers)
    assert response.status == (200 if authorization else 401)
    assert response.getheader("X-Request-ID") == given
    # One the service would not take is nginx's own id (32 hex digits) instead.
    for invalid in ("has space", "x" * 129, "semi;colon"):
        response, _ = call(
            balancer.port, "GET", "/info", None, {**headers, "X-Request-ID": invalid}
        )
        echoed = response.getheader("X-Request-ID") or ""
        assert len(echoed) == 32 and int(echoed, 16) >= 0, echoed
