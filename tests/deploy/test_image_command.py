"""The image's own CMD and HEALTHCHECK, run on the host in a fresh network namespace.

There is no Docker engine here, so the test does what the container would: it takes the final
stage's ENV, CMD and HEALTHCHECK from the Dockerfile, runs them under ``unshare -n`` (a network
namespace of its own, where ports 8000 and 8001 are free), and checks that the service answers
``/roll``, that the healthcheck passes, that gRPC answers on the port the image sets, and that
SIGTERM lets an in-flight request finish and ends the process cleanly.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import image_env

ROOT = Path(__file__).resolve().parents[2]


def final_stage() -> tuple[dict[str, str], list[str], list[str]]:
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    stage = text[text.rindex("\nFROM ") :]
    env = image_env()
    cmd = json.loads(re.search(r"^CMD (\[.+\])$", stage, flags=re.M).group(1))  # type: ignore[union-attr]
    health = json.loads(re.search(r"HEALTHCHECK .*?CMD (\[.+\])$", stage, flags=re.M).group(1))  # type: ignore[union-attr]
    return env, cmd, health


INNER = textwrap.dedent(
    """
    import base64, io, json, os, signal, subprocess, sys, threading, time, urllib.request
    import grpc
    import numpy as np
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb, grpc_predict_v2_pb2_grpc as pbg

    env, cmd, health = json.loads(sys.argv[1])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    server = subprocess.Popen(cmd, env=env, cwd="/tmp", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    result = {}

    def post(path, payload, timeout=120):
        request = urllib.request.Request("http://127.0.0.1:8000" + path, data=json.dumps(payload).encode(),
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())

    for _ in range(300):
        try:
            urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    result["healthcheck_rc"] = subprocess.run(health, env=env).returncode
    grpc_address = "127.0.0.1:" + env["TENSOR_OPS_GRPC_PORT"]

    def server_live():
        with grpc.insecure_channel(grpc_address) as channel:
            return pbg.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=10).live

    result["grpc_live"] = server_live()
    with grpc.insecure_channel(grpc_address) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status
        result["grpc_health"] = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    result["roll"] = post("/roll", {"data": [[1, 2, 3], [4, 5, 6]], "shift": 1, "axes": 1})

    data = np.arange(8 << 20, dtype=np.float32)  # 32 MiB: long enough to be in flight
    buffer = io.BytesIO(); np.save(buffer, data)
    big = {"data": base64.b64encode(buffer.getvalue()).decode(), "shift": 5, "axes": 0}
    in_flight = {}

    def send_big():
        try:
            status, body = post("/roll", big)
            out = np.load(io.BytesIO(base64.b64decode(body["data"])))
            in_flight["status"], in_flight["correct"] = status, bool((out == np.roll(data, 5)).all())
        except Exception as error:
            in_flight["error"] = repr(error)

    thread = threading.Thread(target=send_big)
    thread.start()
    time.sleep(0.4)
    server.send_signal(signal.SIGTERM)
    thread.join(120)
    result["in_flight"] = in_flight
    try:
        result["exit_code"] = server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        result["exit_code"] = "did not stop"
    result["output"] = server.stdout.read().decode(errors="replace")
    try:
        urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=1)
        result["after_stop"] = "answered"
    except OSError:
        result["after_stop"] = "refused"
    try:
        result["grpc_after_stop"] = server_live()
    except grpc.RpcError as error:
        result["grpc_after_stop"] = error.code().name
    print(json.dumps(result))
    """
)


def test_image_cmd_serves_passes_its_healthcheck_and_stops_cleanly(tmp_path: Path) -> None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("unshare or ip is missing")
    env, cmd, health = final_stage()
    # The image puts its virtual environment first on PATH; here that is this test's own.
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = (
        env.get("PATH", "$PATH")
        .replace("/opt/venv/bin", venv_bin)
        .replace("$PATH", os.environ["PATH"])
    )
    full_env = {**os.environ, **env}
    script = tmp_path / "inner.py"
    script.write_text(INNER)
    completed = subprocess.run(
        ["unshare", "-n", sys.executable, str(script), json.dumps([full_env, cmd, health])],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    if completed.returncode != 0 and "Operation not permitted" in completed.stderr:
        if os.environ.get("CI"):
            pytest.fail("unshare -n is not permitted here")
        pytest.skip("unshare -n needs root")
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["healthcheck_rc"] == 0
    assert env["TENSOR_OPS_GRPC_PORT"] == "8001"
    assert (result["grpc_live"], result["grpc_health"]) == (True, "SERVING")
    assert result["roll"] == [
        200,
        {"data": [[3, 1, 2], [6, 4, 5]], "dtype": "int64", "shape": [2, 3]},
    ]
    assert result["in_flight"] == {"status": 200, "correct": True}
    # uvicorn re-raises SIGTERM after a clean shutdown: 0 and -15 (143) are both clean exits.
    assert result["exit_code"] in (0, -15, 143), result["output"]
    assert "Traceback" not in result["output"]
    assert "Finished server process" in result["output"]
    assert result["after_stop"] == "refused"
    assert result["grpc_after_stop"] == "UNAVAILABLE"
