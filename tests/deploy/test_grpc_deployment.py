"""gRPC as the deployment files serve it, with real servers: through the Compose profile's nginx
in front of two replicas, and the Kubernetes probes asked of a server set up as the Deployment.
"""

import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import numpy.typing as npt
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2_grpc as pbg
from tests.deploy.nginx_config import NGINX, nginx_version, render
from tests.support import free_port, launch_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
GRPC_SERVICE = "inference.GRPCInferenceService"
SERVING = health_pb2.HealthCheckResponse.SERVING


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until something accepts on 127.0.0.1:``port`` (not a timed assertion: a start-up wait)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}: {log.read_text()}")


def roll_request(data: npt.NDArray[Any], shift: list[int], axes: list[int], call_id: str) -> Any:
    """A V2 ModelInferRequest of model "roll", its tensors as raw contents."""
    tensors = [
        ("data", "FP32", data),
        ("shift", "INT64", np.array(shift, dtype=np.int64)),
        ("axes", "INT64", np.array(axes, dtype=np.int64)),
    ]
    return pb.ModelInferRequest(
        model_name="roll",
        id=call_id,
        inputs=[
            pb.ModelInferRequest.InferInputTensor(name=name, datatype=kind, shape=array.shape)
            for name, kind, array in tensors
        ],
        raw_input_contents=[array.tobytes() for _, _, array in tensors],
    )


def inference_stub(channel: grpc.Channel) -> Any:
    """The generated client of inference.GRPCInferenceService (its module is untyped)."""
    return pbg.GRPCInferenceServiceStub(channel)  # type: ignore[no-untyped-call]


def infer_roll(
    stub: Any,
    data: npt.NDArray[Any],
    shift: list[int],
    axes: list[int],
    request_id: str,
) -> None:
    """One ModelInfer of roll; its answer must be NumPy's, and the call's ids returned."""
    response, call = stub.ModelInfer.with_call(
        roll_request(data, shift, axes, request_id),
        metadata=[("x-request-id", request_id)],
        timeout=60,
    )
    assert (response.model_name, response.id) == ("roll", request_id)
    [output] = response.outputs
    assert (output.name, output.datatype, list(output.shape)) == ("output", "FP32", [*data.shape])
    result = np.frombuffer(response.raw_output_contents[0], dtype=np.float32).reshape(data.shape)
    assert np.array_equal(result, np.roll(data, shift, axes))
    assert ("x-request-id", request_id) in list(call.trailing_metadata() or ())


def health(channel: grpc.Channel, service: str) -> Any:
    """grpc.health.v1.Health/Check of ``service``: its status, as the kubelet's probe reads it."""
    stub: Any = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status


@pytest.fixture
def replicas() -> Iterator[list[tuple[str, int, subprocess.Popen[bytes]]]]:
    """Two servers standing in for the Compose replicas: (HTTP URL, gRPC port, process)."""
    started = []
    try:
        for _ in range(2):
            grpc_port = free_port()
            url, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(grpc_port)})
            started.append((url, grpc_port, process))
        yield started
    finally:
        for _, _, process in started:
            stop_server(process)


@pytest.mark.e2e
@pytest.mark.skipif(NGINX is None, reason="nginx is not installed")
def test_nginx_balances_grpc_calls_over_the_replicas_and_passes_refused_ones_on(
    replicas: list[tuple[str, int, subprocess.Popen[bytes]]], tmp_path: Path
) -> None:
    assert NGINX is not None
    (url_a, grpc_a, _), (url_b, grpc_b, process_b) = replicas
    http_port, grpc_port = free_port(), free_port()
    config = render(
        tmp_path,
        upstreams={
            8000: [url_a.removeprefix("http://"), url_b.removeprefix("http://")],
            8001: [f"127.0.0.1:{grpc_a}", f"127.0.0.1:{grpc_b}"],
        },
        listens={8080: http_port, 8081: grpc_port},
        version=nginx_version(),
    )
    output = tmp_path / "nginx.out"
    with output.open("wb") as sink:
        nginx = subprocess.Popen(
            [NGINX, "-c", str(config), "-p", str(tmp_path)], stdout=sink, stderr=sink
        )
    try:
        wait_for_port(grpc_port, nginx, output)
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = inference_stub(channel)
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live is True
            assert health(channel, "") == SERVING
            assert health(channel, GRPC_SERVICE) == SERVING
            data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
            for index in range(4):
                infer_roll(stub, data, [index, -1], [0, 2], f"through-nginx-{index}")
            # 2 MiB: past nginx's default body limit of 1 MiB, which the config lifts.
            large = np.random.default_rng(7).standard_normal((512, 1024)).astype(np.float32)
            infer_roll(stub, large, [3], [1], "through-nginx-large")

            # One replica gone: calls that nginx sends there are refused before they reach it,
            # and go to the other replica instead.
            stop_server(process_b)
            for index in range(4):
                infer_roll(stub, data, [1], [1], f"one-replica-{index}")
    finally:
        nginx.terminate()
        nginx.wait(30)

    calls = [line.split("|") for line in (tmp_path / "access.log").read_text().splitlines()]
    grpc_calls = [call for call in calls if call[0] == str(grpc_port)]
    assert all(status == "200" for _, _, status, _ in grpc_calls), grpc_calls
    infers = [call for call in grpc_calls if call[3] == f"/{GRPC_SERVICE}/ModelInfer"]
    assert len(infers) == 9
    replica_a, replica_b = f"127.0.0.1:{grpc_a}", f"127.0.0.1:{grpc_b}"
    # Both replicas took calls while both were up...
    assert {upstream for _, upstream, _, _ in infers[:5]} == {replica_a, replica_b}
    # ...and after one was stopped, every call was answered by the other, some after a
    # refused connection to the stopped one.
    after = [upstream for _, upstream, _, _ in infers[5:]]
    assert set(after) <= {replica_a, f"{replica_b}, {replica_a}"}, after
    assert f"{replica_b}, {replica_a}" in after
    refused = [
        line
        for line in (tmp_path / "error.log").read_text().splitlines()
        if "Connection refused) while connecting to upstream" in line
    ]
    assert len(refused) == after.count(f"{replica_b}, {replica_a}"), refused
    assert all(f'upstream: "grpc://{replica_b}"' in line for line in refused), refused


def deployment_container() -> dict[str, Any]:
    deployment = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "deployment.yaml").read_text())
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


@pytest.mark.e2e
def test_deployment_probes_pass_on_a_server_set_up_as_the_deployment(tmp_path: Path) -> None:
    # The Deployment's environment (its two workers sharing the gRPC port included), run as the
    # image runs it; only the ports are free ones of 127.0.0.1.
    container = deployment_container()
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    env = {item["name"]: item["value"] for item in container["env"]}
    grpc_port = free_port()
    setting_of = {ports["http"]: "TENSOR_OPS_PORT", ports["grpc"]: "TENSOR_OPS_GRPC_PORT"}
    for name in ("TENSOR_OPS_HOST", "TENSOR_OPS_PORT"):
        del env[name]
    # The key Secret the Deployment mounts, standing in: no key at all, the probes still open.
    keys = tmp_path / "api-keys"
    keys.write_text("# no key\n")
    env["TENSOR_OPS_API_KEYS_FILE"] = str(keys)
    env["TENSOR_OPS_GRPC_PORT"] = str(grpc_port)
    url, process = launch_server(env=env, command=["-m", "app"])
    try:
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container[kind]
            if "httpGet" in probe:
                assert setting_of[ports[probe["httpGet"]["port"]]] == "TENSOR_OPS_PORT"
                reply = httpx.get(url + probe["httpGet"]["path"], timeout=10)
                assert reply.status_code == 200, kind
                assert json.loads(reply.content)["status"] in {"ok", "ready"}, kind
            else:
                assert setting_of[probe["grpc"]["port"]] == "TENSOR_OPS_GRPC_PORT"
                # What the kubelet asks: grpc.health.v1.Health/Check of the probe's service.
                with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                    assert health(channel, probe["grpc"].get("service", "")) == SERVING, kind
    finally:
        stop_server(process)
