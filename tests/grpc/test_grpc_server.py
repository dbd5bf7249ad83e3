"""gRPC served by the real process beside HTTP: ``python -m app`` and uvicorn alike, several
workers on one port and one set of metrics, and a clear refusal to start on a port another
process holds."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2.framing import join_raw, split_raw
from tests.support import ROOT, free_port, launch_server, server_output, stop_server

pytestmark = pytest.mark.e2e

ROLLED = [[2.0, 0.0, 1.0], [5.0, 3.0, 4.0]]


def grpc_roll(address: str) -> list[Any]:
    """A small roll over a new channel (a new connection), its output as a list."""
    message = pb.ModelInferRequest(model_name="roll")
    data = np.arange(6, dtype="<f4").reshape(2, 3)
    for name, array in (
        ("data", data),
        ("shift", np.array([1], "<i8")),
        ("axes", np.array([1], "<i8")),
    ):
        message.inputs.add(name=name, datatype=pb_type(array), shape=list(array.shape))
        message.raw_input_contents.append(array.tobytes())
    with grpc.insecure_channel(address) as channel:
        infer: Any = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        answer = pb.ModelInferResponse.FromString(infer(message.SerializeToString(), timeout=10))
    output = np.frombuffer(answer.raw_output_contents[0], "<f4")
    values: list[Any] = output.reshape(list(answer.outputs[0].shape)).tolist()
    return values


def pb_type(array: np.ndarray[Any, Any]) -> str:
    return "FP32" if array.dtype.kind == "f" else "INT64"


@pytest.mark.parametrize(
    "command",
    [pytest.param(["-m", "app"], id="python-m-app"), pytest.param(None, id="uvicorn")],
)
def test_grpc_is_served_beside_http(command: list[str] | None) -> None:
    port = free_port()
    _, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)}, command=command)
    try:
        assert grpc_roll(f"127.0.0.1:{port}") == ROLLED
        log = server_output(process)
        assert f'"message":"gRPC serving","address":"127.0.0.1:{port}"' in log, log
    finally:
        stop_server(process)


def test_workers_share_the_port_and_the_metrics() -> None:
    port = free_port()
    url, process = launch_server(
        env={"TENSOR_OPS_GRPC_PORT": str(port), "TENSOR_OPS_WORKERS": "2"}, command=["-m", "app"]
    )
    try:
        # Both workers serving first (the second may start a few seconds after the first).
        deadline = time.monotonic() + 30
        while server_output(process).count('"message":"gRPC serving"') < 2:
            assert time.monotonic() < deadline, server_output(process)
            time.sleep(0.1)
        for _ in range(24):  # a connection each: the kernel spreads them over the workers
            assert grpc_roll(f"127.0.0.1:{port}") == ROLLED
        # Each worker's figures reach the shared metrics within FLUSH_AFTER (0.25 s).
        deadline = time.monotonic() + 10
        while True:
            metrics = httpx.get(f"{url}/metrics", timeout=10).text
            line = re.search(
                r'tensor_ops_requests_total\{route="/inference.GRPCInferenceService/ModelInfer",'
                r'status="OK"\} (\S+)',
                metrics,
            )
            if (line and float(line.group(1)) == 24.0) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert line is not None, metrics
        assert float(line.group(1)) == 24.0
        serving = re.findall(r'"message":"gRPC serving"', server_output(process))
        assert len(serving) == 2, server_output(process)
    finally:
        stop_server(process)


def start_and_fail(env: dict[str, str], command: list[str]) -> tuple[int, str]:
    """Run the service until it exits (it must, within 30 s): its exit status and output."""
    done = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        env={**os.environ, "TENSOR_OPS_HOST": "127.0.0.1", **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_held_by_another_process_stops_the_start(workers: str) -> None:
    port = free_port()
    # A stranger on the port that also lets others share it (as Triton's gRPC server does).
    with socket.socket() as stranger:
        stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        stranger.bind(("127.0.0.1", port))
        stranger.listen()
        status, output = start_and_fail(
            {
                "TENSOR_OPS_PORT": str(free_port()),
                "TENSOR_OPS_GRPC_PORT": str(port),
                "TENSOR_OPS_WORKERS": workers,
            },
            ["-m", "app"],
        )
    assert status != 0, output
    assert f"the gRPC port 127.0.0.1:{port} is already in use by another process" in output
    assert "TENSOR_OPS_GRPC_PORT=0" in output


def test_grpc_port_zero_serves_http_only() -> None:
    _, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": "0"})
    try:
        assert "gRPC serving" not in server_output(process)
    finally:
        stop_server(process)


def test_sigterm_drains_the_calls_in_flight_and_turns_new_ones_away() -> None:
    port = free_port()
    url, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)})
    address = f"127.0.0.1:{port}"
    data = np.random.default_rng(1).standard_normal((4096, 4096), dtype=np.float32)  # 64 MiB
    head = pb.ModelInferRequest(model_name="roll")
    head.inputs.add(name="data", datatype="FP32", shape=[4096, 4096])
    head.inputs.add(name="shift", datatype="INT64", shape=[1])
    head.inputs.add(name="axes", datatype="INT64", shape=[1])
    tensors = [data.tobytes(), np.array([3], "<i8").tobytes(), np.array([0], "<i8").tobytes()]
    message = join_raw(head.SerializeToString(), 7, tensors)
    answers: list[Any] = []
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    try:
        with grpc.insecure_channel(address, options=options) as channel:
            infer: Any = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")

            def call() -> None:
                try:
                    answers.append(infer(message, timeout=60))
                except grpc.RpcError as error:
                    answers.append(error)

            caller = threading.Thread(target=call)
            caller.start()
            # The signal comes once the call is being served (its memory reserved), however
            # long a loaded machine takes to send 64 MiB: a call the server has not yet taken
            # would rightly be turned away.
            assert _reserved_soon(url), server_output(process)[-3000:]
            os.kill(process.pid, signal.SIGTERM)
            caller.join(60)
        # uvicorn re-raises the signal once it has shut down: the status says SIGTERM.
        assert process.wait(30) in (0, -signal.SIGTERM)
        assert "Traceback" not in server_output(process)
        [answer] = answers
        assert isinstance(answer, bytes), (answer, server_output(process)[-3000:])
        head_bytes, [raw] = split_raw(answer, 6)
        assert pb.ModelInferResponse.FromString(head_bytes).outputs[0].datatype == "FP32"
        rolled = np.frombuffer(raw, "<f4").reshape(4096, 4096)
        assert np.array_equal(rolled.view(np.uint32), np.roll(data, 3, axis=0).view(np.uint32))
        with pytest.raises(grpc.RpcError) as caught:
            grpc_roll(address)
        assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        stop_server(process)


def _reserved_soon(url: str, seconds: float = 30) -> bool:
    """Whether the server reports memory reserved by a request in flight within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = httpx.get(f"{url}/metrics", timeout=5).text
        found = re.search(r"^tensor_ops_memory_reserved_bytes (\S+)$", text, flags=re.M)
        if found and float(found.group(1)) > 0:
            return True
        time.sleep(0.02)
    return False


def test_an_address_that_cannot_be_bound_stops_the_start_with_its_reason() -> None:
    # 192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this machine.
    status, output = start_and_fail(
        {"TENSOR_OPS_HOST": "192.0.2.1", "TENSOR_OPS_GRPC_PORT": str(free_port())},
        ["-m", "app"],
    )
    assert status == 1, output
    assert "the gRPC address 192.0.2.1:" in output
    assert "cannot be bound" in output
    assert "Traceback" not in output
