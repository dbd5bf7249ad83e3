"""Errors that say how to fix (issue 25, point 5), the client's part: a call that gets no answer
names the address it called and carries no ``[0]``; the HTTP client at a gRPC port and the gRPC
client at an HTTP port say which port serves what and are not retried; inputs NumPy cannot hold
(ragged lists, strings, None, objects, integers beyond int64) are refused before anything is
sent, in the service's words, with its status, fault kind and field."""

import pickle
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from tensor_ops_client import (
    AsyncTensorOpsClient,
    Retry,
    TensorOpsClient,
    TensorOpsError,
    Transport,
    main,
)
from tensor_ops_client._grpc import rpc_failure
from tests.support import free_port, launch_server, stop_server

pytestmark = pytest.mark.e2e

TRANSPORTS: list[Transport] = ["npz", "json", "v2", "grpc"]
HTTP_TRANSPORTS: list[Transport] = ["npz", "json", "v2"]
SCRIPT = Path(sys.executable).parent / "tensor-ops"
#: What both wrong-port messages end with: which port serves what, and what to pass.
WHICH_PORT = (
    "the service's HTTP port is 8000 by default (TENSOR_OPS_PORT) and its gRPC port 8001 "
    "(TENSOR_OPS_GRPC_PORT); give the HTTP URL as url= (--url) and the gRPC address as "
    "grpc_target= (--grpc-target)"
)
#: An empty HTTP/2 SETTINGS frame: what a gRPC server sends first on every connection.
SETTINGS_FRAME = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
RAGGED = (
    "ragged array: the nested lists must all have the same length at each depth, and hold "
    "numbers or booleans at depth 1"
)
INT64_RANGE = "[-9223372036854775808, 9223372036854775807]"


class Served:
    """A live server with gRPC on: its HTTP URL, its gRPC target and gRPC's URL."""

    def __init__(self, url: str, grpc_port: int) -> None:
        self.url = url
        self.http_target = url.removeprefix("http://")
        self.grpc_target = f"127.0.0.1:{grpc_port}"
        self.grpc_url = f"http://127.0.0.1:{grpc_port}"


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    port = free_port()
    url, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)})
    yield Served(url, port)
    stop_server(process)


class CountingPort:
    """A port of 127.0.0.1 that counts its connections and answers each as ``answer`` says:
    it reads the request, sends ``answer``, and waits for the client to hang up (an empty
    ``answer``: it hangs up itself, once the request is read)."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.connections += 1
            with connection:
                connection.settimeout(5)
                try:
                    connection.recv(1 << 16)
                    if not self.answer:
                        continue  # hangs up without a word, at once
                    connection.sendall(self.answer)
                    while connection.recv(1 << 16):  # until the client hangs up
                        pass
                except OSError:
                    pass

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.listener.close()


@pytest.fixture
def http2_port() -> Iterator[CountingPort]:
    """A port that answers as a gRPC port does: HTTP/2 frames, whatever it is sent."""
    port = CountingPort(SETTINGS_FRAME)
    yield port
    port.close()


def closed_port() -> int:
    return free_port()


def assert_no_answer(error: TensorOpsError) -> None:
    """No answer came: status 0, and nothing of a status in the text."""
    assert error.status == 0
    assert error.unreachable
    assert str(error) == error.message
    assert "[0]" not in str(error)


# --- No answer: the address is named -----------------------------------------------------------


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_closed_port_over_http_names_the_url(transport: Transport) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with (
        TensorOpsClient(url, transport=transport, retry=False, timeout=5) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        client.roll([1, 2], 1, 0)
    error = caught.value
    assert_no_answer(error)
    assert error.message == f"cannot reach the service at {url}: connection refused"
    assert error.retryable  # a service that is starting: a repeat may find it
    assert isinstance(error.__cause__, httpx.ConnectError)


def test_closed_port_health_and_info_name_the_url() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with TensorOpsClient(url, retry=False, timeout=5) as client:
        for call in (client.health, client.info):
            with pytest.raises(TensorOpsError) as caught:
                call()
            assert_no_answer(caught.value)
            assert caught.value.message.startswith(f"cannot reach the service at {url}: ")


def test_closed_port_over_grpc_names_the_target() -> None:
    target = f"127.0.0.1:{closed_port()}"
    with (
        TensorOpsClient(transport="grpc", grpc_target=target, retry=False, timeout=5) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        client.gather([1, 2], [0], 0)
    error = caught.value
    assert_no_answer(error)
    assert error.message.startswith(f"cannot reach the service at {target}: ")
    assert "Connection refused" in error.message
    assert error.detail["grpc_code"] == "UNAVAILABLE"
    assert error.retryable


def test_closed_port_with_retries_names_the_url_and_the_attempts() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    policy = Retry(attempts=2, backoff=0.01, max_backoff=0.01)
    with TensorOpsClient(url, retry=policy) as client, pytest.raises(TensorOpsError) as caught:
        client.roll([1, 2], 1, 0)
    assert caught.value.attempts == 2
    assert str(caught.value) == f"cannot reach the service at {url}: connection refused"
    assert caught.value.__notes__ == ["(gave up after 2 attempts, the most Retry allows)"]


def test_an_error_without_answer_pickles_without_a_status() -> None:
    error = TensorOpsError(0, "cannot reach the service at http://h:1: connection refused")
    again = pickle.loads(pickle.dumps(error))
    assert (str(again), again.status) == (error.message, 0)
    assert str(TensorOpsError(503, "busy")) == "[503] busy"


# --- The other port: said, and not retried -----------------------------------------------------


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_http_client_at_the_grpc_port(served: Served, transport: Transport) -> None:
    with (
        TensorOpsClient(served.grpc_url, transport=transport, timeout=10) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        client.roll([1, 2], 1, 0)
    error = caught.value
    assert_no_answer(error)
    assert error.message == (
        f"{served.grpc_url} speaks HTTP/2 (gRPC), not HTTP/1.1, as the service's gRPC port "
        f"does: {WHICH_PORT}"
    )
    assert not error.retryable
    assert error.attempts == 1  # with the default policy of 5
    assert not getattr(error, "__notes__", None)


def test_http_client_at_the_grpc_port_health_and_info(served: Served) -> None:
    with TensorOpsClient(served.grpc_url, timeout=10) as client:
        for call in (client.health, client.info):
            with pytest.raises(TensorOpsError) as caught:
                call()
            assert caught.value.message.startswith(f"{served.grpc_url} speaks HTTP/2 (gRPC)")
            assert caught.value.attempts == 1


def test_http_client_at_an_http2_port_connects_once(http2_port: CountingPort) -> None:
    policy = Retry(attempts=5, backoff=0.01, max_backoff=0.01)
    with (
        TensorOpsClient(http2_port.url, retry=policy, timeout=10) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        client.gather([1, 2, 3], [0], 0)
    assert caught.value.message.startswith(f"{http2_port.url} speaks HTTP/2 (gRPC), not HTTP/1.1")
    assert WHICH_PORT in caught.value.message
    assert http2_port.connections == 1
    assert caught.value.attempts == 1


def test_a_connection_that_breaks_is_still_retried() -> None:
    """A port that hangs up without a word is not taken for a gRPC port: retried as ever."""
    port = CountingPort(b"")
    try:
        policy = Retry(attempts=3, backoff=0.01, max_backoff=0.01)
        with (
            TensorOpsClient(port.url, retry=policy, timeout=10) as client,
            pytest.raises(TensorOpsError) as caught,
        ):
            client.roll([1], 0, 0)
    finally:
        port.close()
    assert caught.value.message.startswith(f"cannot reach the service at {port.url}: ")
    assert caught.value.retryable
    assert caught.value.attempts == 3
    assert port.connections == 3


def test_grpc_client_at_the_http_port(served: Served) -> None:
    with (
        TensorOpsClient(
            served.url, transport="grpc", grpc_target=served.http_target, timeout=10
        ) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        client.gather([1, 2], [1], 0)
    error = caught.value
    assert_no_answer(error)
    assert error.message == (
        f"{served.http_target} speaks HTTP/1.1, not gRPC (HTTP/2), as the service's HTTP port "
        f"does: {WHICH_PORT}"
    )
    assert not error.retryable
    assert error.attempts == 1  # with the default policy of 5
    assert error.detail["grpc_code"] == "UNAVAILABLE"
    assert isinstance(error.__cause__, grpc.RpcError)


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return ()


def test_rpc_failure_names_the_target_and_the_http1_port() -> None:
    refused = FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connect: Connection refused")
    error = rpc_failure(refused, 5.0, "gpu-box:8001")
    assert error.message == "cannot reach the service at gpu-box:8001: connect: Connection refused"
    assert error.retryable
    http1 = FakeRpcError(
        grpc.StatusCode.UNAVAILABLE,
        "failed to connect to all addresses; last error: INTERNAL: ipv4:10.0.0.1:8000: Failed "
        "parsing HTTP/2 (Trying to connect an http1.x server (HTTP status 400))",
    )
    error = rpc_failure(http1, 5.0, "gpu-box:8000")
    assert error.message.startswith("gpu-box:8000 speaks HTTP/1.1, not gRPC (HTTP/2)")
    assert error.message.endswith(WHICH_PORT)
    assert (error.status, error.retryable, error.kind) == (0, False, None)


@pytest.mark.anyio
async def test_async_clients_at_the_other_port(served: Served) -> None:
    async with AsyncTensorOpsClient(served.grpc_url, transport="json") as client:
        with pytest.raises(TensorOpsError) as caught:
            await client.roll([1, 2], 1, 0)
        assert caught.value.message.startswith(f"{served.grpc_url} speaks HTTP/2 (gRPC)")
        assert caught.value.attempts == 1
    async with AsyncTensorOpsClient(transport="grpc", grpc_target=served.http_target) as client:
        with pytest.raises(TensorOpsError) as caught:
            await client.roll([1, 2], 1, 0)
        assert caught.value.message.startswith(f"{served.http_target} speaks HTTP/1.1")
        assert caught.value.attempts == 1
    url = f"http://127.0.0.1:{closed_port()}"
    async with AsyncTensorOpsClient(url, retry=False) as client:
        with pytest.raises(TensorOpsError) as caught:
            await client.roll([1, 2], 1, 0)
        assert str(caught.value) == f"cannot reach the service at {url}: connection refused"


# --- Inputs NumPy cannot hold: refused before anything is sent -----------------------------------

#: (op, inputs, status, kind, field, message): each refused before sending.
BAD_INPUTS: list[tuple[str, dict[str, Any], int, str, str, str]] = [
    # Ragged lists: the service's 400 tensor_decode.
    ("roll", {"data": [[1, 2], [3]], "shift": 1, "axes": 0}, 400, "tensor_decode", "data",
     f"data: {RAGGED}"),
    ("roll", {"data": [1, [2]], "shift": 1, "axes": 0}, 400, "tensor_decode", "data",
     f"data: {RAGGED}"),
    ("roll", {"data": [1, 2], "shift": [[1], [1, 2]], "axes": 0}, 400, "tensor_decode", "shift",
     f"shift: {RAGGED}"),
    ("gather", {"data": [[1, [2]]], "indices": [0], "axis": 0}, 400, "tensor_decode", "data",
     "data: ragged array: the nested lists must all have the same length at each depth, and "
     "hold numbers or booleans at depth 2"),
    ("gather", {"data": [1, 2], "indices": [[0], [0, 1]], "axis": 0}, 400, "tensor_decode",
     "indices", f"indices: {RAGGED}"),
    ("gather", {"data": [1, 2], "indices": [0], "axis": [[0], []]}, 400, "tensor_decode",
     "axis", f"axis: {RAGGED}"),
    # Elements that are not numbers: the service's 422 tensor_type.
    ("roll", {"data": ["a", 1], "shift": 1, "axes": 0}, 422, "tensor_type", "data",
     "data: a tensor's elements must be numbers or booleans, found strings"),
    ("roll", {"data": [None, 1], "shift": 1, "axes": 0}, 422, "tensor_type", "data",
     "data: a tensor's elements must be numbers or booleans, found None"),
    ("roll", {"data": [1, 2], "shift": [1], "axes": [None]}, 422, "tensor_type", "axes",
     "axes: must hold integers (int64), found None"),
    ("gather", {"data": [{"a": 1}], "indices": [0], "axis": 0}, 422, "tensor_type", "data",
     "data: a tensor's elements must be numbers or booleans, found dicts"),
    ("gather", {"data": [object(), 1.5], "indices": [0], "axis": 0}, 422, "tensor_type", "data",
     "data: a tensor's elements must be numbers or booleans, found objects"),
    ("gather", {"data": [1, 2], "indices": ["x"], "axis": 0}, 422, "tensor_type", "indices",
     "indices: must hold integers (int64), found strings"),
    ("gather", {"data": None, "indices": [0], "axis": 0}, 422, "tensor_type", "data",
     "data: a tensor's elements must be numbers or booleans, found None"),
    # Integers beyond int64: the service's 422 tensor_type.
    ("roll", {"data": [2**70, 1], "shift": 1, "axes": 0}, 422, "tensor_type", "data",
     f"data: value {2**70} is out of range for int64 {INT64_RANGE}"),
    ("roll", {"data": [2**63, 1], "shift": 1, "axes": 0}, 422, "tensor_type", "data",
     f"data: value {2**63} is out of range for int64 {INT64_RANGE}"),
    ("roll", {"data": [-(2**63) - 1], "shift": 1, "axes": 0}, 422, "tensor_type", "data",
     f"data: value {-(2**63) - 1} is out of range for int64 {INT64_RANGE}"),
    ("roll", {"data": [1, 2], "shift": 2**70, "axes": 0}, 422, "tensor_type", "shift",
     f"shift: value {2**70} does not fit in int64"),
    ("gather", {"data": [1, 2], "indices": [0, 2**64], "axis": 0}, 422, "tensor_type",
     "indices", f"indices: value {2**64} does not fit in int64"),
    ("gather", {"data": [1, 2], "indices": [0], "axis": 2**63}, 422, "tensor_type", "axis",
     f"axis: value {2**63} does not fit in int64"),
]  # fmt: skip
BAD_IDS = [f"{op}-{field}-{kind}-{index}" for index, (op, _, _, kind, field, _) in
           enumerate(BAD_INPUTS)]  # fmt: skip


def call(client: TensorOpsClient, op: str, inputs: dict[str, Any]) -> Any:
    if op == "roll":
        return client.roll(inputs["data"], inputs["shift"], inputs["axes"])
    return client.gather(inputs["data"], inputs["indices"], inputs["axis"])


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("op", "inputs", "status", "kind", "field", "message"), BAD_INPUTS,
                         ids=BAD_IDS)  # fmt: skip
def test_bad_inputs_are_refused_before_sending(
    transport: Transport,
    op: str,
    inputs: dict[str, Any],
    status: int,
    kind: str,
    field: str,
    message: str,
) -> None:
    # A closed port: were anything sent, the error would be "cannot reach the service".
    port = closed_port()
    with (
        TensorOpsClient(
            f"http://127.0.0.1:{port}",
            transport=transport,
            grpc_target=f"127.0.0.1:{port}",
            retry=False,
        ) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        call(client, op, inputs)
    error = caught.value
    assert (error.status, error.kind, error.field) == (status, kind, field)
    assert error.message == message
    assert str(error) == f"[{status}] {message}"
    assert not error.retryable
    assert error.__cause__ is None


def test_bad_inputs_send_nothing(http2_port: CountingPort) -> None:
    with TensorOpsClient(http2_port.url) as client:
        for op, inputs, status, *_ in BAD_INPUTS:
            with pytest.raises(TensorOpsError) as caught:
                call(client, op, inputs)
            assert caught.value.status == status
    assert http2_port.connections == 0


@pytest.mark.parametrize(
    ("op", "inputs"),
    [
        ("roll", {"data": [[1, 2], [3]], "shift": 1, "axes": 0}),
        ("roll", {"data": [1, 2], "shift": [1, [2]], "axes": 0}),
        ("roll", {"data": ["a", 1], "shift": 1, "axes": 0}),
        ("roll", {"data": [2**63, 1], "shift": 1, "axes": 0}),
        ("roll", {"data": [1, 2], "shift": [2**63], "axes": 0}),
        ("gather", {"data": [1, 2], "indices": ["x"], "axis": 0}),
        ("gather", {"data": [1, 2], "indices": [0], "axis": [[0], []]}),
    ],
)
def test_the_refusal_is_the_services_own(served: Served, op: str, inputs: dict[str, Any]) -> None:
    """The same values sent as JSON (which carries them) get the same refusal from the service."""
    with TensorOpsClient(served.url) as client, pytest.raises(TensorOpsError) as caught:
        call(client, op, inputs)
    answer = httpx.post(f"{served.url}/{op}", json=inputs, timeout=10)
    item = answer.json()["detail"][0]
    assert caught.value.status == answer.status_code
    assert caught.value.kind == item["type"]
    assert caught.value.field == item["loc"][-1]
    assert caught.value.message == f"{item['loc'][-1]}: {item['msg']}"


@pytest.mark.anyio
async def test_async_bad_inputs_are_refused_before_sending() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with AsyncTensorOpsClient(url, retry=False) as client:
        with pytest.raises(TensorOpsError) as caught:
            await client.gather([[1, 2], [3]], [0], 0)
        assert (caught.value.status, caught.value.field) == (400, "data")
        with pytest.raises(TensorOpsError) as caught:
            await client.roll([1, 2], 2**70, 0)
        assert caught.value.message == f"shift: value {2**70} does not fit in int64"


def test_what_numpy_holds_is_sent_as_it_is(served: Served) -> None:
    """Arrays of any type, lists of floats, bools and int64 integers are not refused."""
    with TensorOpsClient(served.url, transport="json") as client:
        assert client.roll([1.5, 2.5], 1, 0).tolist() == [2.5, 1.5]
        assert client.roll([2**63 - 1, -(2**63)], 1, 0).tolist() == [-(2**63), 2**63 - 1]
        assert client.roll(np.array([2**63, 1], np.uint64), 1, 0).tolist() == [1, 2**63]
        assert client.gather([[1, 2], [3, 4]], np.array([1], np.uint8), 0).tolist() == [[3, 4]]
        assert client.roll([True, False], 1, 0).tolist() == [False, True]


# --- The command line --------------------------------------------------------------------------


def test_cli_at_a_closed_port_prints_one_line_naming_the_url() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    done = subprocess.run(
        [str(SCRIPT), "--url", url, "--no-retry", "roll", "[1, 2, 3]", "--shift", "1",
         "--axes", "0"],
        capture_output=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 4
    assert done.stdout == b""
    assert done.stderr.decode().splitlines() == [
        f"tensor-ops: cannot reach the service at {url}: connection refused"
    ]


def test_cli_at_the_other_port(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--url", served.grpc_url, "roll", "[1, 2, 3]", "--shift", "1", "--axes", "0"]
    assert main(argv) == 4
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"tensor-ops: {served.grpc_url} speaks HTTP/2 (gRPC), not HTTP/1.1, as the service's "
        f"gRPC port does: {WHICH_PORT}"
    ]
    argv = ["--url", served.url, "--transport", "grpc", "--grpc-target", served.http_target,
            "roll", "[1, 2, 3]", "--shift", "1", "--axes", "0"]  # fmt: skip
    assert main(argv) == 4
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"tensor-ops: {served.http_target} speaks HTTP/1.1, not gRPC (HTTP/2), as the service's "
        f"HTTP port does: {WHICH_PORT}"
    ]


def test_cli_refuses_a_ragged_literal_before_sending(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    assert main(["--url", url, "roll", "[1, 2]", "--shift", "[[1], [1, 2]]", "--axes", "0"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach" not in err
    assert "shift" in err
