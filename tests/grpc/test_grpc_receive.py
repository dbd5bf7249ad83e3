"""gRPC's receive path keeps HTTP's promises, against a real ``python -m app`` (keys on, one
worker, glibc told to give freed memory back):

- no key, no bytes: a keyless call is refused on its headers, its message never read nor
  inflated, whatever it announces or compresses;
- compressed messages are inflated by the service within the message limit and its budget;
- one ``authorization`` entry (or header): two are refused the same way on gRPC and HTTP;
- a refusal frees its request at once (no reference cycle waits for a full collection);
- a stalled upload holds what it reserved, for a bounded time, and does not keep a small call
  from being served.

The worker's resident memory is read from /proc: its peak as the kernel's high-water mark,
reset before each probe (``clear_refs``), and sampled every millisecond where the reset is not
allowed.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import orjson
import pytest

from app.grpc.receive import message_coding
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tests.grpc_raw import RawConnection, deflated, framed, gzip_bomb, gzipped
from tests.support import (
    free_port,
    launch_server,
    malloc_env,
    send_and_read,
    server_output,
    stop_server,
    v2_binary_body,
)

pytestmark = pytest.mark.e2e

MiB = 1 << 20
KEY = "receive-path-key"
BEARER = [("authorization", f"Bearer {KEY}")]
#: The same, as gRPC's own client takes metadata.
GRPC_BEARER = (("authorization", f"Bearer {KEY}"),)


def _key_file(tmp: Path) -> Path:
    path = tmp / "keys"
    path.write_text(f"{hashlib.sha256(KEY.encode()).hexdigest()} receive-tests\n")
    return path


class Worker:
    """A ``python -m app`` with one worker: its pid is the worker's."""

    def __init__(self, url: str, process: Any, grpc_port: int) -> None:
        self.url = url
        self.process = process
        self.grpc_port = grpc_port

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def resident(self) -> int:
        fields = Path(f"/proc/{self.pid}/statm").read_text().split()
        return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")

    def settled(self) -> int:
        """The resident size once it stops moving (at most 3 s)."""
        previous = self.resident()
        for _ in range(30):
            time.sleep(0.1)
            current = self.resident()
            if abs(current - previous) < MiB:
                return current
            previous = current
        return previous

    def log_lines(self) -> list[dict[str, Any]]:
        lines = []
        for line in server_output(self.process).splitlines():
            if line.startswith("{"):
                lines.append(orjson.loads(line))
        return lines


class PeakSampler:
    """The worker's resident size sampled every millisecond while the block runs."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.peak = worker.resident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.worker.resident())
            time.sleep(0.001)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.worker.resident())


def _launch(tmp: Path, **settings: str) -> Worker:
    grpc_port = free_port()
    env = {
        **malloc_env(),
        "TENSOR_OPS_API_KEYS_FILE": str(_key_file(tmp)),
        "TENSOR_OPS_GRPC_PORT": str(grpc_port),
        "TENSOR_OPS_WORKERS": "1",
        **settings,
    }
    url, process = launch_server(env, command=["-m", "app"], settled=True)
    return Worker(url, process, grpc_port)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    server = _launch(tmp_path_factory.mktemp("receive"))
    yield server
    stop_server(server.process)


@pytest.fixture(scope="module")
def stalling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A worker whose messages must arrive within 3 s in all."""
    server = _launch(
        tmp_path_factory.mktemp("stalling"),
        TENSOR_OPS_BODY_TIMEOUT="3",
        TENSOR_OPS_RATE_WINDOW="2",
    )
    yield server
    stop_server(server.process)


def roll_message(data: np.ndarray[Any, Any], shift: int = 1, request_id: str = "") -> bytes:
    request = pb.ModelInferRequest(model_name="roll", id=request_id)
    for name, array in (
        ("data", data),
        ("shift", np.array([shift], dtype=np.int64)),
        ("axes", np.array([0], dtype=np.int64)),
    ):
        request.inputs.append(
            pb.ModelInferRequest.InferInputTensor(
                name=name, datatype={"f": "FP32", "i": "INT64"}[array.dtype.kind], shape=array.shape
            )
        )
        request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    return bytes(request.SerializeToString())


def answer_array(data: bytes) -> np.ndarray[Any, Any]:
    """The output of a ``ModelInferResponse`` framed as gRPC sends it."""
    assert data[0] == 0, "the answer came compressed"
    response = pb.ModelInferResponse.FromString(data[5:])
    output = response.outputs[0]
    dtype = {"FP32": np.float32, "INT64": np.int64}[output.datatype]
    return np.frombuffer(response.raw_output_contents[0], dtype=dtype).reshape(tuple(output.shape))


# ------------------------------------------------------------------------------------------------
# No key, no bytes


def test_keyless_compressed_calls_cost_their_headers_alone(worker: Worker) -> None:
    """Eight keyless calls at once, each 128 KiB of gzip that inflates to 128 MiB (1 MiB sent
    in all): refused UNAUTHENTICATED, and the worker's peak grows by less than 16 MiB (before:
    +921 MiB for four, +1.47 GiB for eight)."""
    bomb = gzip_bomb(128 * MiB)
    assert len(bomb) < 160 * 1024
    before = worker.settled()
    connection = RawConnection(worker.grpc_port)
    try:
        with PeakSampler(worker) as sampler:
            streams = [connection.start("ModelInfer", encoding="gzip") for _ in range(8)]
            for stream in streams:
                connection.send(stream, framed(bomb, True), end=True)
            outcomes = [connection.wait(stream) for stream in streams]
    finally:
        connection.close()
    assert [outcome.status for outcome in outcomes] == [16] * 8, outcomes
    assert all("a key is needed" in outcome.message for outcome in outcomes)
    growth = sampler.peak - before
    assert growth < 16 * MiB, f"the worker grew by {growth / MiB:.1f} MiB for keyless calls"


@pytest.mark.parametrize("method", ["ModelInfer", "ModelMetadata", "ServerMetadata"])
def test_keyless_call_is_refused_before_its_message_arrives(worker: Worker, method: str) -> None:
    """A keyless call announcing a 200 MiB message that has sent none of it is refused at once:
    the service never asks for its message."""
    connection = RawConnection(worker.grpc_port)
    try:
        stream = connection.start(method)
        outcome = connection.wait(stream, timeout=5)
    finally:
        connection.close()
    assert outcome.status == grpc.StatusCode.UNAUTHENTICATED.value[0]
    assert outcome.seconds < 2
    assert outcome.headers.get("www-authenticate", "").startswith("Bearer")


def test_http_keyless_gzip_body_is_refused_at_its_headers(worker: Worker) -> None:
    """HTTP held before and holds: a 64 MiB gzip body without a key is 401 before its bytes."""
    body = gzip_bomb(64 * MiB)
    started = time.monotonic()
    reply = httpx.post(
        f"{worker.url}/roll",
        content=body,
        headers={"content-type": "application/json", "content-encoding": "gzip"},
        timeout=10,
    )
    assert reply.status_code == 401
    assert reply.json()["detail"][0]["type"] == "unauthenticated"
    assert time.monotonic() - started < 2


def test_two_authorization_entries_are_refused_alike_on_grpc_and_http(worker: Worker) -> None:
    """Two credentials are one rule everywhere: refused, whatever either holds (the valid key
    first or last)."""
    pairs = [
        [("authorization", f"Bearer {KEY}"), ("authorization", "Bearer wrong")],
        [("authorization", "Bearer wrong"), ("authorization", f"Bearer {KEY}")],
        [("authorization", f"Bearer {KEY}"), ("authorization", f"Bearer {KEY}")],
    ]
    message = roll_message(np.arange(4, dtype=np.float32))
    for metadata in pairs:
        connection = RawConnection(worker.grpc_port)
        try:
            outcome = connection.call("ModelInfer", message, metadata)
        finally:
            connection.close()
        assert outcome.status == grpc.StatusCode.UNAUTHENTICATED.value[0], outcome
        assert "2 Authorization headers" in outcome.message
        http = httpx.post(
            f"{worker.url}/roll",
            json={"data": [1, 2, 3], "shift": 1, "axes": 0},
            headers=httpx.Headers(metadata),
        )
        assert http.status_code == 401, http.text
        assert "2 Authorization headers" in http.json()["detail"][0]["msg"]
        assert 'error="invalid_request"' in http.headers["www-authenticate"]


# ------------------------------------------------------------------------------------------------
# Compressed messages inside the limits and the budget


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_compressed_messages_are_served_bit_exact(worker: Worker, coding: str) -> None:
    data = np.arange(300_000, dtype=np.float32) * 0.5
    message = roll_message(data, shift=7)
    packed = gzipped(message) if coding == "gzip" else deflated(message)
    connection = RawConnection(worker.grpc_port)
    try:
        outcome = connection.call("ModelInfer", packed, BEARER, encoding=coding)
    finally:
        connection.close()
    assert outcome.status == 0, outcome
    np.testing.assert_array_equal(answer_array(outcome.data), np.roll(data, 7))


def test_grpc_clients_own_compression_is_served(worker: Worker) -> None:
    """gRPC's own client compressing with gzip (as tritonclient's compression_algorithm does)."""
    data = np.linspace(-1, 1, 1000, dtype=np.float32)
    with grpc.insecure_channel(f"127.0.0.1:{worker.grpc_port}") as channel:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer"
        )
        for compression in (grpc.Compression.Gzip, grpc.Compression.Deflate, None):
            reply = call(
                roll_message(data, shift=-3),
                metadata=GRPC_BEARER,
                compression=compression,
                timeout=10,
            )
            response = pb.ModelInferResponse.FromString(reply)
            got = np.frombuffer(response.raw_output_contents[0], dtype=np.float32)
            np.testing.assert_array_equal(got, np.roll(data, -3))
        metadata: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelMetadata"
        )
        reply = metadata(
            pb.ModelMetadataRequest(name="gather").SerializeToString(),
            metadata=GRPC_BEARER,
            compression=grpc.Compression.Gzip,
            timeout=10,
        )
        assert pb.ModelMetadataResponse.FromString(reply).name == "gather"


def test_keyed_bomb_past_the_limit_is_refused_within_its_reservation(
    tmp_path: Path,
) -> None:
    """With a key, a message that inflates past the message limit (64 MiB here) is refused
    RESOURCE_EXHAUSTED; the worker grows by at most 1.25 x what it reserved + 16 MiB (before:
    +815 MiB for 510 reserved)."""
    server = _launch(tmp_path, TENSOR_OPS_MAX_BODY_BYTES=str(64 * MiB))
    try:
        bomb = gzip_bomb(200 * MiB)
        before = server.settled()
        connection = RawConnection(server.grpc_port)
        try:
            with PeakSampler(server) as sampler:
                outcome = connection.call(
                    "ModelInfer", bomb, [*BEARER, ("x-request-id", "keyed-bomb")], "gzip"
                )
        finally:
            connection.close()
        assert outcome.status == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], outcome
        assert "inflates past the limit" in outcome.message
        line = _line_of(server, "keyed-bomb")
        growth = sampler.peak - before
        bound = 1.25 * line["reserved_bytes"] + 16 * MiB
        assert growth <= bound, (growth / MiB, line["reserved_bytes"] / MiB)
        assert server.settled() - before < 32 * MiB
    finally:
        stop_server(server.process)


def _line_of(worker: Worker, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for line in worker.log_lines():
            if line.get("request_id") == request_id:
                return line
        time.sleep(0.05)
    raise AssertionError(f"no log line for {request_id}")


# ------------------------------------------------------------------------------------------------
# A refusal frees its request at once


def _refusals(worker: Worker) -> list[tuple[str, Any]]:
    """Large requests refused for every reason, on gRPC and HTTP: (name, a function that sends
    one and returns its status)."""
    big = np.ones(8 * MiB, dtype=np.float32)  # 32 MiB
    good = roll_message(big)
    request = pb.ModelInferRequest.FromString(good)
    request.raw_input_contents[2] = np.array([5], dtype=np.int64).tobytes()
    bad_spec = bytes(request.SerializeToString())
    request = pb.ModelInferRequest.FromString(good)
    request.inputs[0].datatype = "BYTES"
    bad_type = bytes(request.SerializeToString())
    request = pb.ModelInferRequest.FromString(good)
    request.inputs[0].shape[0] = 4 * MiB  # the raw contents are twice the shape's bytes
    bad_size = bytes(request.SerializeToString())
    port = worker.grpc_port

    def grpc_call(
        message: bytes, metadata: tuple[tuple[str, str], ...], timeout: float = 30
    ) -> str:
        with grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", -1)]
        ) as channel:
            call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                "/inference.GRPCInferenceService/ModelInfer"
            )
            try:
                call(message, metadata=metadata, timeout=timeout)
            except grpc.RpcError as error:
                return str(error.code().name)
            return "OK"

    npz_body = _npz(big)
    v2_body = orjson.dumps(
        {"inputs": [{"name": "data", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    )

    def http(path: str, body: bytes, headers: dict[str, str]) -> str:
        return str(
            httpx.post(f"{worker.url}{path}", content=body, headers=headers, timeout=30).status_code
        )

    auth = {"authorization": f"Bearer {KEY}"}
    npz = {"content-type": "application/x-npz"}

    def v2_binary(datatype: str, axes: int) -> tuple[bytes, dict[str, str]]:
        body, headers = v2_binary_body(
            {
                "inputs": [
                    {"name": "data", "datatype": datatype, "shape": [big.size]},
                    {"name": "shift", "datatype": "INT64", "shape": [1]},
                    {"name": "axes", "datatype": "INT64", "shape": [1]},
                ]
            },
            [big.tobytes(), np.int64(1).tobytes(), np.int64(axes).tobytes()],
        )
        return body, {**headers, **auth}

    v2_spec, v2_spec_headers = v2_binary("FP32", 5)
    v2_type, v2_type_headers = v2_binary("FP33", 0)
    return [
        ("grpc-no-key", lambda: grpc_call(good, ())),
        ("grpc-bad-spec", lambda: grpc_call(bad_spec, GRPC_BEARER)),
        ("grpc-bad-type", lambda: grpc_call(bad_type, GRPC_BEARER)),
        ("grpc-bad-size", lambda: grpc_call(bad_size, GRPC_BEARER)),
        ("grpc-cancelled", lambda: grpc_call(good, GRPC_BEARER, timeout=0.001)),
        ("http-no-key", lambda: http("/roll", npz_body, npz)),
        ("http-bad-spec", lambda: http("/roll", npz_body, {**npz, **auth})),
        ("v2-bad-spec", lambda: http("/v2/models/roll/infer", v2_spec, v2_spec_headers)),
        ("v2-bad-type", lambda: http("/v2/models/roll/infer", v2_type, v2_type_headers)),
        ("http-over-limit", lambda: _sent_whole(worker.url, v2_body + b" " * (300 * MiB))),
    ]


def _sent_whole(url: str, body: bytes) -> str:
    """The status of ``POST /v2/models/roll/infer`` with ``body`` sent whole as fast as the
    socket takes it, then the answer read (httpx takes 15-20 s to send 300 MiB: it slices what
    is left of the body after each send)."""
    head = (
        "POST /v2/models/roll/infer HTTP/1.1\r\nhost: test\r\n"
        f"authorization: Bearer {KEY}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    answer = send_and_read(url, head.encode("ascii") + body, b"\r\n", timeout=30)
    return (
        answer.split(b" ", 2)[1].decode("ascii")
        if answer.startswith(b"HTTP/1.1 ")
        else answer.decode(errors="replace")
    )


def _npz(data: np.ndarray[Any, Any]) -> bytes:
    out = io.BytesIO()
    np.savez(out, data=data, shift=np.array(1), axes=np.array(5))
    return out.getvalue()


def test_refused_requests_are_freed_at_once(worker: Worker) -> None:
    """Eight 32 MiB requests refused for each reason, on gRPC and HTTP, one after the other:
    the worker's resident size comes back within 64 MiB of before, with no collection asked for
    (before: +338 MiB kept after eight keyless gRPC calls, +145 MiB after eight spec
    refusals)."""
    refusals = _refusals(worker)
    before = worker.settled()
    statuses: dict[str, set[str]] = {}
    for name, send in refusals:
        for _ in range(8):
            statuses.setdefault(name, set()).add(send())
    assert statuses["grpc-no-key"] == {"UNAUTHENTICATED"}
    assert statuses["grpc-bad-spec"] == {"INVALID_ARGUMENT"}
    assert statuses["grpc-bad-type"] == {"INVALID_ARGUMENT"}
    assert statuses["grpc-bad-size"] == {"INVALID_ARGUMENT"}
    assert statuses["grpc-cancelled"] <= {"DEADLINE_EXCEEDED", "CANCELLED"}
    assert statuses["http-no-key"] == {"401"}
    assert statuses["http-bad-spec"] <= {"422", "400"}
    assert statuses["v2-bad-spec"] == {"422"}
    assert statuses["v2-bad-type"] == {"422"}
    assert statuses["http-over-limit"] == {"413"}
    kept = worker.settled() - before
    assert kept < 64 * MiB, f"{kept / MiB:.0f} MiB kept after the refusals: {statuses}"


# ------------------------------------------------------------------------------------------------
# Stalled uploads


def test_stalled_uploads_are_cut_off_and_do_not_hold_up_a_small_call(stalling: Worker) -> None:
    """Three keyed calls that announce 200 MiB, send 16 MiB and stop: a small call is served at
    once meanwhile, the stalled ones are refused DEADLINE_EXCEEDED within the time limit (3 s
    here), and the worker gives their memory back. Three keyless ones are refused at once."""
    worker = stalling
    before = worker.settled()
    stalled = []
    sampler = PeakSampler(worker).__enter__()
    for number in range(3):
        connection = RawConnection(worker.grpc_port)
        stream = connection.start("ModelInfer", [*BEARER, ("x-request-id", f"stalled-{number}")])
        head = framed(b"\x00" * (200 * MiB))[: 16 * MiB]
        connection.send(stream, head)
        stalled.append((connection, stream))
    keyless = []
    for _ in range(3):
        connection = RawConnection(worker.grpc_port)
        stream = connection.start("ModelInfer")
        keyless.append((connection, stream))
    try:
        for connection, stream in keyless:
            outcome = connection.wait(stream, timeout=3)
            assert outcome.status == grpc.StatusCode.UNAUTHENTICATED.value[0]
        data = np.arange(10, dtype=np.float32)
        small = RawConnection(worker.grpc_port)
        try:
            started = time.monotonic()
            outcome = small.call("ModelInfer", roll_message(data, 2), BEARER, timeout=5)
            assert outcome.status == 0, outcome
            assert time.monotonic() - started < 1.0
            np.testing.assert_array_equal(answer_array(outcome.data), np.roll(data, 2))
        finally:
            small.close()
        for connection, stream in stalled:
            outcome = connection.wait(stream, timeout=8)
            assert outcome.status == grpc.StatusCode.DEADLINE_EXCEEDED.value[0], outcome
            assert "did not arrive within 3 s" in outcome.message
    finally:
        sampler.__exit__()
        for connection, _ in stalled + keyless:
            connection.close()
    reserved = sum(_line_of(worker, f"stalled-{number}")["reserved_bytes"] for number in range(3))
    assert sampler.peak - before <= 1.25 * reserved + 16 * MiB, (sampler.peak - before, reserved)
    kept = worker.settled() - before
    assert kept < 32 * MiB, f"{kept / MiB:.0f} MiB kept after the stalled calls"


def test_concurrent_keyed_uploads_stay_within_their_reservations(worker: Worker) -> None:
    """Six keyed 32 MiB rolls at once on six connections, two of them gzip: every answer right,
    and the worker's growth within 1.25 x what the six reserved + 16 MiB."""
    data = np.arange(8 * MiB, dtype=np.float32)
    message = roll_message(data, shift=5)
    outcomes: dict[int, bytes] = {}

    def send(number: int) -> None:
        with grpc.insecure_channel(
            f"127.0.0.1:{worker.grpc_port}",
            options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
        ) as channel:
            call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                "/inference.GRPCInferenceService/ModelInfer"
            )
            outcomes[number] = call(
                message,
                metadata=(*GRPC_BEARER, ("x-request-id", f"concurrent-{number}")),
                compression=grpc.Compression.Gzip if number % 3 == 0 else None,
                timeout=120,
            )

    before = worker.settled()
    with PeakSampler(worker) as sampler:
        threads = [threading.Thread(target=send, args=(number,)) for number in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    expected = np.roll(data, 5)
    for number in range(6):
        response = pb.ModelInferResponse.FromString(outcomes[number])
        got = np.frombuffer(response.raw_output_contents[0], dtype=np.float32)
        np.testing.assert_array_equal(got, expected)
    reserved = sum(
        _line_of(worker, f"concurrent-{number}")["reserved_bytes"] for number in range(6)
    )
    growth = sampler.peak - before
    assert growth <= 1.25 * reserved + 16 * MiB, (growth / MiB, reserved / MiB)


# ------------------------------------------------------------------------------------------------
# Request ids


def test_a_request_id_with_a_final_newline_is_replaced_and_the_call_served(worker: Worker) -> None:
    """An id is checked whole: ``rt3-id\\n`` is not the client's id to echo (gRPC could not send
    it back); the call is served and logged with the status the client got."""
    data = np.arange(6, dtype=np.float32)
    connection = RawConnection(worker.grpc_port)
    try:
        outcome = connection.call(
            "ModelInfer", roll_message(data, 1), [*BEARER, ("x-request-id", "rt3-id\n")]
        )
    finally:
        connection.close()
    assert outcome.status == 0, outcome
    np.testing.assert_array_equal(answer_array(outcome.data), np.roll(data, 1))
    lines = [line for line in worker.log_lines() if line.get("route", "").endswith("ModelInfer")]
    assert not any("rt3-id" in line.get("request_id", "") for line in lines)
    assert re.fullmatch(r"[0-9a-f]{32}", lines[-1]["request_id"]), lines[-1]
    assert lines[-1]["status"] == "OK"


def test_zlib_header_sniffing_never_takes_a_v2_message_for_a_compressed_one() -> None:
    """Every V2 request field is length-delimited: a message's first byte has 2 in its low
    three bits, which neither gzip's magic nor a zlib header has."""
    for message in (
        pb.ModelInferRequest(model_name="roll").SerializeToString(),
        pb.ModelInferRequest(id="x").SerializeToString(),
        pb.ModelReadyRequest(name="gather", version="1").SerializeToString(),
        pb.ModelInferRequest(raw_input_contents=[b"\x1f\x8b"]).SerializeToString(),
        b"",
    ):
        assert message_coding(message) is None
    assert message_coding(gzipped(b"x")) == "gzip"
    for level in range(10):
        assert message_coding(zlib.compress(b"abc", level)) == "deflate"


# ------------------------------------------------------------------------------------------------
# The health and reflection services read as the V2 service's small calls do


def test_reflection_and_health_messages_are_read_within_the_budget(tmp_path: Path) -> None:
    """Reflection is open (no key); gRPC read its messages whole, outside any budget, as they
    came. Eight keyless reflection calls announcing 30 MiB, each stopping after 16 MiB, against
    a 64 MiB budget: only two are read at once (one reserved, one in the worker's unreserved
    slot), the others' windows stay shut (64 KiB), so the worker holds about two of them (eight
    held 8 x 16 MiB before); each is cut off at the time limit (3 s here) or refused busy after
    the admission timeout (2 s), and a health check and reflection's own list answer
    meanwhile."""
    server = _launch(
        tmp_path,
        TENSOR_OPS_MEMORY_BUDGET_BYTES=str(64 * MiB),
        TENSOR_OPS_BODY_TIMEOUT="3",
        TENSOR_OPS_RATE_WINDOW="2",
        TENSOR_OPS_ADMISSION_TIMEOUT="2",
    )
    reflection = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
    try:
        before = server.settled()
        head = framed(b"\x0a" + b"\xff" * (30 * MiB))[: 16 * MiB]
        connections = [RawConnection(server.grpc_port) for _ in range(8)]
        streams = [connection.start(reflection) for connection in connections]
        try:
            sent = [
                connection.send(stream, head, wait=0.3, give_up=True)
                for connection, stream in zip(connections, streams, strict=True)
            ]
            time.sleep(1.0)
            held = server.resident() - before
            with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
                check: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                    "/grpc.health.v1.Health/Check"
                )
                assert check(b"", timeout=5) == b"\x08\x01"  # SERVING
                listing: grpc.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
                    reflection
                )
                answers = list(listing(iter([b"\x3a\x00"]), timeout=5))  # list_services
                assert b"inference.GRPCInferenceService" in answers[0]
            outcomes = [
                connection.wait(stream, timeout=15)
                for connection, stream in zip(connections, streams, strict=True)
            ]
        finally:
            for connection in connections:
                connection.close()
        assert sum(count >= 16 * MiB for count in sent) <= 2, sent
        assert held < 48 * MiB, f"{held / MiB:.0f} MiB held by stalled reflection calls"
        # Cut off at the time limit while read, or refused busy while waiting for the slot.
        codes = {
            grpc.StatusCode.DEADLINE_EXCEEDED.value[0],
            grpc.StatusCode.RESOURCE_EXHAUSTED.value[0],
        }
        assert all(outcome.status in codes for outcome in outcomes), outcomes
        assert max(outcome.seconds for outcome in outcomes) < 8
        assert server.settled() - before < 24 * MiB
    finally:
        stop_server(server.process)


def test_calls_waiting_for_memory_hold_no_more_than_their_window(tmp_path: Path) -> None:
    """While the budget is busy (a stalled keyed upload holds it all), six more keyed calls
    that each try to send 16 MiB wait for memory with their window shut: gRPC takes at most
    its 64 KiB lookahead of each (a bandwidth-probed window took 8 MiB), and they are refused
    RESOURCE_EXHAUSTED after the admission timeout (2 s here)."""
    server = _launch(
        tmp_path,
        TENSOR_OPS_MEMORY_BUDGET_BYTES=str(64 * MiB),
        TENSOR_OPS_ADMISSION_TIMEOUT="2",
        TENSOR_OPS_BODY_TIMEOUT="6",
    )
    try:
        before = server.settled()
        head = framed(b"\x00" * (30 * MiB))[: 16 * MiB]
        holder = RawConnection(server.grpc_port)
        holder_stream = holder.start("ModelInfer", BEARER)
        assert holder.send(holder_stream, head[: 1 * MiB], wait=2, give_up=True) == 1 * MiB
        waiting = [RawConnection(server.grpc_port) for _ in range(6)]
        streams = [connection.start("ModelInfer", BEARER) for connection in waiting]
        try:
            sent = [
                connection.send(stream, head, wait=0.3, give_up=True)
                for connection, stream in zip(waiting, streams, strict=True)
            ]
            held = server.resident() - before
            outcomes = [
                connection.wait(stream, timeout=8)
                for connection, stream in zip(waiting, streams, strict=True)
            ]
        finally:
            for connection in [holder, *waiting]:
                connection.close()
        assert max(sent) <= 256 * 1024, sent
        assert held < 24 * MiB, f"{held / MiB:.0f} MiB held by calls waiting for memory"
        code = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        assert [outcome.status for outcome in outcomes] == [code] * 6, outcomes
        assert all("busy" in outcome.message for outcome in outcomes)
    finally:
        stop_server(server.process)


def test_http_uploads_cut_off_by_their_client_are_freed_at_once(worker: Worker) -> None:
    """The cancelled member of the refusals on HTTP: eight keyed uploads announcing 64 MiB
    that close after 32 MiB, on each body form; the worker comes back within 16 MiB."""
    port = int(worker.url.rsplit(":", 1)[1])
    for path, media in (
        ("/roll", "application/x-npz"),
        ("/v2/models/roll/infer", "application/octet-stream"),
        ("/roll", "application/json"),
    ):
        before = worker.settled()
        for _ in range(8):
            with socket.create_connection(("127.0.0.1", port)) as raw:
                raw.sendall(
                    f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: {media}\r\n"
                    f"Content-Length: {64 * MiB}\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode()
                )
                raw.sendall(bytes(32 * MiB))
                time.sleep(0.1)
        kept = worker.settled() - before
        assert kept < 16 * MiB, f"{path} ({media}): {kept / MiB:.0f} MiB kept"
