"""Triton's protocol extensions through ``tritonclient.http`` and ``tritonclient.grpc``,
unchanged, against a real server: model configuration, statistics, the model repository's
index (load and unload refused), and the extensions server metadata lists."""

import json
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc as grpc_module
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from tritonclient.utils import InferenceServerException

from app.pipeline.statistics import FLUSH_AFTER
from app.registry import REGISTRY, versions
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tests.support import (
    address,
    free_port,
    launch_server,
    send_and_read,
    server_output,
    stop_server,
)

pytestmark = pytest.mark.e2e

EXTENSIONS = {"model_configuration", "statistics", "model_repository", "system_shared_memory"}
STAGES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, str]]:
    port = free_port()
    url, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)})
    yield url, f"127.0.0.1:{port}"
    stop_server(process)


@pytest.fixture(scope="module")
def http(server: tuple[str, str]) -> Iterator[Any]:
    client = httpclient.InferenceServerClient(server[0].removeprefix("http://"))
    yield client
    client.close()


@pytest.fixture(scope="module")
def grpc(server: tuple[str, str]) -> Iterator[Any]:
    client = grpcclient.InferenceServerClient(server[1])
    yield client
    client.close()


def test_server_metadata_lists_the_extensions(http: Any, grpc: Any) -> None:
    over_http = http.get_server_metadata()["extensions"]
    over_grpc = list(grpc.get_server_metadata().extensions)
    assert over_http == over_grpc
    assert EXTENSIONS | {"binary_tensor_data"} == set(over_http)


@pytest.mark.parametrize(
    ("model", "inputs", "types"),
    [
        ("roll", ["data", "shift", "axes"], ["TYPE_FP32", "TYPE_INT64", "TYPE_INT64"]),
        ("gather", ["data", "indices", "axis"], ["TYPE_FP32", "TYPE_INT64", "TYPE_INT64"]),
    ],
)
def test_model_config(
    http: Any, grpc: Any, model: str, inputs: list[str], types: list[str]
) -> None:
    config = http.get_model_config(model)
    assert config == http.get_model_config(model, model_version=str(REGISTRY[model].version))
    assert config["name"] == model
    assert config["platform"] == "openvino_opset"
    assert config["backend"] == "tensor-ops"
    assert config["version_policy"] == {"all": {}}  # every version served, as Triton's "all"
    assert config["max_batch_size"] == 0
    assert [item["name"] for item in config["input"]] == inputs
    assert [item["data_type"] for item in config["input"]] == types
    assert all(item["dims"] == [-1] for item in config["input"] + config["output"])
    assert config["output"] == [{"name": "output", "data_type": "TYPE_FP32", "dims": [-1]}]
    assert "FP16" in config["parameters"]["data.datatypes"]["string_value"].split(",")
    # gRPC answers the same configuration, in tritonclient's own ModelConfig message.
    message = grpc.get_model_config(model, model_version=str(REGISTRY[model].version)).config
    assert message.name == model
    assert message.backend == "tensor-ops"
    assert message.max_batch_size == 0
    assert [item.name for item in message.input] == inputs
    assert [type(message).DESCRIPTOR.file.enum_types_by_name["DataType"].values_by_number[
        item.data_type].name for item in message.input] == types  # fmt: skip
    assert [list(item.dims) for item in message.output] == [[-1]]
    assert dict(message.parameters)["data.rank"].string_value == "any"


def test_unknown_models_and_versions_are_404(http: Any, grpc: Any, server: Any) -> None:
    for path in ("/v2/models/nope/config", "/v2/models/roll/versions/2/stats"):
        reply = httpx.get(server[0] + path)
        assert reply.status_code == 404
        assert "error" in reply.json()
    with pytest.raises(InferenceServerException, match="not served here"):
        grpc.get_model_config("nope")
    with pytest.raises(InferenceServerException, match="no version"):
        grpc.get_inference_statistics("roll", model_version="2")


def test_repository_index(http: Any, grpc: Any, server: Any) -> None:
    # Each entry as Triton's index response has it: name, version, state and reason (a
    # string; empty: a ready model has no reason to give).
    # One entry per model and version (gather: 1, 7 and 8), oldest version first.
    expected = [
        {"name": name, "version": str(number), "state": "READY", "reason": ""}
        for name in REGISTRY
        for number in versions(name)
    ]
    assert expected[:2] == [
        {"name": "roll", "version": "7", "state": "READY", "reason": ""},
        {"name": "gather", "version": "1", "state": "READY", "reason": ""},
    ]
    assert http.get_model_repository_index() == expected
    for body in (b"", b"{}", b'{"ready": true}', b'{"ready": false}'):
        reply = httpx.post(server[0] + "/v2/repository/index", content=body)
        assert reply.status_code == 200, reply.text
        assert reply.json() == expected
    rows = [(item["name"], item["version"], item["state"], item["reason"]) for item in expected]
    models = grpc.get_model_repository_index().models
    assert [(item.name, item.version, item.state, item.reason) for item in models] == rows
    with grpc_module.insecure_channel(server[1]) as channel:  # tritonclient sends no ready
        index: Any = channel.unary_unary("/inference.GRPCInferenceService/RepositoryIndex")
        answer = pb.RepositoryIndexResponse.FromString(
            index(pb.RepositoryIndexRequest(ready=True).SerializeToString(), timeout=10)
        )
    assert [(item.name, item.version, item.state, item.reason) for item in answer.models] == rows
    # Protobuf's JSON leaves the empty reason out.
    without_reason = [{k: v for k, v in item.items() if k != "reason"} for item in expected]
    assert grpc.get_model_repository_index(as_json=True) == {"models": without_reason}


@pytest.fixture(scope="module")
def hasty_server() -> Iterator[str]:
    """A server whose bodies must come within a second."""
    url, process = launch_server(
        env={"TENSOR_OPS_RATE_WINDOW": "1", "TENSOR_OPS_BODY_TIMEOUT": "2"}
    )
    yield url
    stop_server(process)


SMALL_BODY_ROUTES = ["/v2/repository/index", "/v2/systemsharedmemory/region/r/register"]


@pytest.mark.parametrize("path", SMALL_BODY_ROUTES)
def test_a_stalled_small_body_is_cut_off(hasty_server: str, path: str) -> None:
    """A body that stops coming is a 408 within the rate window, not a request held open."""
    started = time.monotonic()
    answer = send_and_read(
        hasty_server,
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n{".encode(),
        until=b"}",
    )
    assert time.monotonic() - started < 5
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer
    assert json.loads(body) == {
        "error": "the body came slower than 16384 bytes/s over 1.0 s "
        "(TENSOR_OPS_MIN_TRANSFER_RATE, TENSOR_OPS_RATE_WINDOW)"
    }
    assert httpx.post(hasty_server + "/v2/repository/index", json={}).status_code == 200


def test_with_no_minimum_rate_a_small_body_may_take_longer_than_a_window() -> None:
    """TENSOR_OPS_MIN_TRANSFER_RATE=0 (no pace asked) leaves the body its total time limit: an
    index body in two pieces 1.5 s apart, past a 1 s window, is answered, not a 408."""
    url, process = launch_server(
        env={
            "TENSOR_OPS_RATE_WINDOW": "1",
            "TENSOR_OPS_BODY_TIMEOUT": "5",
            "TENSOR_OPS_MIN_TRANSFER_RATE": "0",
        }
    )
    try:
        with socket.create_connection(address(url), timeout=10) as connection:
            connection.sendall(
                b"POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n"
                b'Content-Type: application/json\r\nContent-Length: 15\r\n\r\n{"ready"'
            )
            time.sleep(1.5)
            connection.sendall(b": true}")
            answer = b""
            while b"]" not in answer:
                piece = connection.recv(65536)
                if not piece:
                    break
                answer += piece
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 "), answer
        assert [entry["name"] for entry in json.loads(body)] == [
            name for name in REGISTRY for _ in versions(name)
        ]  # an entry per model and version
    finally:
        stop_server(process)


@pytest.mark.parametrize("declared", [True, False])
def test_a_large_index_body_is_refused_unread(hasty_server: str, declared: bool) -> None:
    """The index request holds a repository name and a flag: a body past 4096 bytes is a 413,
    read no further (it was read whole into memory, outside the budget)."""
    blank = b" " * (1 << 20)

    def chunks() -> Iterator[bytes]:
        for _ in range(16):
            yield blank
        yield b"{}"

    content: Any = blank * 16 + b"{}" if declared else chunks()
    reply = httpx.post(hasty_server + "/v2/repository/index", content=content, timeout=30)
    assert reply.status_code == 413
    assert reply.json() == {
        "error": "a repository index request holds a repository name and a flag: at most 4096 bytes"
    }


@pytest.mark.parametrize("action", ["load", "unload"])
def test_load_and_unload_are_refused(http: Any, grpc: Any, action: str) -> None:
    with pytest.raises(InferenceServerException, match="built-in ops, always loaded") as caught:
        getattr(http, f"{action}_model")("roll")
    assert caught.value.status() == "400"
    with pytest.raises(InferenceServerException, match="built-in ops, always loaded") as caught:
        getattr(grpc, f"{action}_model")("gather")
    assert caught.value.status() == "StatusCode.UNIMPLEMENTED"
    assert http.is_model_ready("roll") and grpc.is_model_ready("gather")


def _roll_inputs(module: Any, data: Any, shift: Any) -> list[Any]:
    arrays = {"data": data, "shift": shift, "axes": np.array([0], dtype=np.int64)}
    inputs = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), _triton_type(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _triton_type(dtype: np.dtype[Any]) -> str:
    return {"float32": "FP32", "int64": "INT64", "float64": "FP64"}[dtype.name]


def _roll_stats(client: Any) -> dict[str, Any]:
    (stats,) = client.get_inference_statistics("roll")["model_stats"]
    return stats  # type: ignore[no-any-return]


def test_statistics_count_every_transport(http: Any, grpc: Any, server: Any) -> None:
    before = _roll_stats(http)
    gather_before = http.get_inference_statistics("gather")["model_stats"][0]
    started_ms = time.time() * 1000
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    good, bad = np.array([1], dtype=np.int64), np.array([1.0], dtype=np.float64)
    successes = failures = 0
    for _ in range(2):  # /v2 over HTTP, gRPC, JSON and .npz routes
        http.infer("roll", _roll_inputs(httpclient, data, good))
        grpc.infer("roll", _roll_inputs(grpcclient, data, good))
        reply = httpx.post(server[0] + "/roll", json={"data": [[1, 2]], "shift": 1, "axes": 1})
        assert reply.status_code == 200
        successes += 3
    for module, client in ((httpclient, http), (grpcclient, grpc)):  # a float shift: refused
        with pytest.raises(InferenceServerException):
            client.infer("roll", _roll_inputs(module, data, bad))
        failures += 1
    reply = httpx.post(server[0] + "/roll", json={"data": [[1, 2]], "shift": 1, "axes": 5})
    assert reply.status_code == 422
    failures += 1
    ended_ms = time.time() * 1000
    after = _roll_stats(http)
    assert after == _roll_stats_grpc(grpc)

    def delta(stage: str, what: str) -> int:
        value = after["inference_stats"][stage][what] - before["inference_stats"][stage][what]
        return int(value)

    assert after["inference_count"] - before["inference_count"] == successes
    assert after["execution_count"] - before["execution_count"] == successes
    assert delta("success", "count") == successes
    assert delta("fail", "count") == failures
    for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert delta(stage, "count") == successes
    for stage in ("success", "fail", "compute_input", "compute_infer", "compute_output"):
        assert delta(stage, "ns") > 0, stage
    assert delta("queue", "ns") >= 0  # admission's wait: none for small requests
    parts = sum(delta(stage, "ns") for stage in STAGES[2:])
    assert abs(parts - delta("success", "ns")) <= len(STAGES)  # rounding of each sum
    assert started_ms - 1 <= after["last_inference"] <= ended_ms + 1
    assert after["version"] == "7"  # Roll-7
    # The proto's newer fields, as Triton writes them when it has nothing to say: per-response
    # statistics (decoupled models) and memory usage, none here.
    assert after["response_stats"] == {}
    assert after["memory_usage"] == []
    assert list(after) == [
        "name", "version", "last_inference", "inference_count", "execution_count",
        "inference_stats", "response_stats", "batch_stats", "memory_usage",
    ]  # fmt: skip
    # The other model's statistics are its own.
    assert http.get_inference_statistics("gather")["model_stats"][0] == gather_before
    models = [
        (item["name"], item["version"]) for item in http.get_inference_statistics()["model_stats"]
    ]
    # Every version of every op of the registry, in its order, a model's versions oldest first
    # as Triton orders them, and as the repository index lists them.
    assert models == [
        (op.name, str(op.version)) for name in REGISTRY for op in versions(name).values()
    ]
    index = [(item["name"], item["version"]) for item in http.get_model_repository_index()]
    assert models == index
    assert ("gather", "1") in models and models.index(("gather", "1")) < models.index(
        ("gather", "8")
    )


def _roll_stats_grpc(client: Any) -> dict[str, Any]:
    """The gRPC answer in the HTTP answer's form (protobuf's JSON writes uint64 as strings
    and leaves out zeros)."""
    message = client.get_inference_statistics("roll", model_version="7").model_stats[0]
    stats = message.inference_stats

    def duration(stage: str) -> dict[str, int]:
        item = getattr(stats, stage)
        return {"count": item.count, "ns": item.ns}

    return {
        "name": message.name,
        "version": message.version,
        "last_inference": message.last_inference,
        "inference_count": message.inference_count,
        "execution_count": message.execution_count,
        "inference_stats": {
            stage: duration(stage) for stage in (*STAGES, "cache_hit", "cache_miss")
        },
        "response_stats": dict(message.response_stats),
        "batch_stats": list(message.batch_stats),
        "memory_usage": list(message.memory_usage),
    }


# ------------------------------------------------------------------------------------------------
# Two workers: each keeps its own tally, the statistics are read back summed over both.

ROLL_DATA = [[1, 2, 3], [4, 5, 6]]
ROLLED_BY_ONE = [[3, 1, 2], [6, 4, 5]]
ROLLED_FLAT = [3, 1, 2, 6, 4, 5]  # /v2 and gRPC answer the elements in row-major order
FLOAT_SHIFT = "shift must be of type int32 or int64, got float64"


def _v2_roll_body(shift_type: str) -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "data", "datatype": "INT64", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]},
            {"name": "shift", "datatype": shift_type, "shape": [1], "data": [1]},
            {"name": "axes", "datatype": "INT64", "shape": [1], "data": [1]},
        ]
    }


def _grpc_roll_message(shift_type: str) -> bytes:
    message = pb.ModelInferRequest(model_name="roll")
    shift = np.array([1], "<f8" if shift_type == "FP64" else "<i8")
    for name, datatype, array in (
        ("data", "INT64", np.array(ROLL_DATA, "<i8")),
        ("shift", shift_type, shift),
        ("axes", "INT64", np.array([1], "<i8")),
    ):
        message.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        message.raw_input_contents.append(array.tobytes())
    return message.SerializeToString()


def _grpc_infer(address: str, message: bytes) -> pb.ModelInferResponse:
    """One ModelInfer over a new channel: a new connection, which the kernel may hand to either
    worker (each listens on the port with SO_REUSEPORT)."""
    with grpc_module.insecure_channel(address) as channel:
        infer: Any = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        return pb.ModelInferResponse.FromString(infer(message, timeout=10))


def _send_roll_requests(url: str, address: str, rounds: int) -> tuple[int, int]:
    """``rounds`` times a good roll over each of HTTP JSON, /v2 and gRPC, and every third round a
    refused one over each too, every request on its own connection (a kept-alive connection
    would stay with one worker). Checks every answer; returns the successes and failures sent."""
    successes = failures = 0
    for turn in range(rounds):
        with httpx.Client(base_url=url, timeout=10) as fresh:
            reply = fresh.post("/roll", json={"data": ROLL_DATA, "shift": 1, "axes": 1})
        assert reply.json()["data"] == ROLLED_BY_ONE, reply.text
        with httpx.Client(base_url=url, timeout=10) as fresh:
            reply = fresh.post("/v2/models/roll/infer", json=_v2_roll_body("INT64"))
        assert reply.json()["outputs"][0]["data"] == ROLLED_FLAT, reply.text
        answer = _grpc_infer(address, _grpc_roll_message("INT64"))
        assert np.frombuffer(answer.raw_output_contents[0], "<i8").tolist() == ROLLED_FLAT
        successes += 3
        if turn % 3:  # a third as many refusals as good requests, on every transport
            continue
        with httpx.Client(base_url=url, timeout=10) as fresh:
            reply = fresh.post("/roll", json={"data": ROLL_DATA, "shift": 1, "axes": 5})
        assert reply.status_code == 422
        assert reply.json()["detail"][0]["msg"].startswith("axes = 5 is out of range"), reply.text
        with httpx.Client(base_url=url, timeout=10) as fresh:
            reply = fresh.post("/v2/models/roll/infer", json=_v2_roll_body("FP64"))
        assert reply.json() == {"error": f"shift: {FLOAT_SHIFT}"}, reply.text
        with pytest.raises(grpc_module.RpcError) as caught:
            _grpc_infer(address, _grpc_roll_message("FP64"))
        assert caught.value.code() is grpc_module.StatusCode.INVALID_ARGUMENT
        assert FLOAT_SHIFT in str(caught.value.details())
        failures += 3
    return successes, failures


def _per_worker_roll_counts(folder: Path, scratch: Path) -> list[dict[str, float]]:
    """Each process's own roll counts by stage, from its file of the multiprocess directory
    (``counter_<pid>.db``): the figures the statistics sum. Processes that counted no roll
    (the supervisor) are left out."""
    counts = []
    for index, database in enumerate(sorted(folder.glob("counter_*.db"))):
        alone = scratch / str(index)  # the collector reads a directory: one file in each
        alone.mkdir()
        shutil.copy(database, alone)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))  # type: ignore[no-untyped-call]
        stages = {
            sample.labels["stage"]: sample.value
            for family in registry.collect()
            for sample in family.samples
            if sample.name == "tensor_ops_model_stage_total" and sample.labels["model"] == "roll"
        }
        if any(stages.values()):
            counts.append(stages)
    return counts


def test_statistics_are_summed_over_two_workers(tmp_path: Path) -> None:
    port = free_port()
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    url, process = launch_server(
        env={
            "TENSOR_OPS_GRPC_PORT": str(port),
            "TENSOR_OPS_WORKERS": "2",
            # Named here rather than made by python -m app: the test reads each worker's file.
            "PROMETHEUS_MULTIPROC_DIR": str(metrics),
        },
        command=["-m", "app"],
    )
    address = f"127.0.0.1:{port}"
    try:
        # Both workers serving before the requests (the second may start seconds later).
        deadline = time.monotonic() + 30
        while server_output(process).count('"message":"gRPC serving"') < 2:
            assert time.monotonic() < deadline, server_output(process)
            time.sleep(0.1)
        successes, failures = _send_roll_requests(url, address, rounds=12)
        assert (successes, failures) == (36, 12)
        # A worker moves its tally into its metrics file within statistics.FLUSH_AFTER of its
        # requests; a read flushes only the worker that takes it. So wait until the other's
        # figures are in (however slow the machine), then compare exactly: too many fails too.
        deadline = time.monotonic() + 15
        while True:
            with httpclient.InferenceServerClient(url.removeprefix("http://")) as fresh:
                over_http = _roll_stats(fresh)
            counted = over_http["inference_stats"]
            if counted["success"]["count"] >= successes and counted["fail"]["count"] >= failures:
                break
            assert time.monotonic() < deadline, (over_http, server_output(process)[-3000:])
            time.sleep(0.1)
        # The read that saw the last count may have come in the middle of that worker's flush
        # (its writes land in several files, one by one): read once more when it is surely over.
        time.sleep(2 * FLUSH_AFTER)
        with httpclient.InferenceServerClient(url.removeprefix("http://")) as fresh:
            over_http = _roll_stats(fresh)
        counted = over_http["inference_stats"]
        assert over_http["inference_count"] == successes
        assert over_http["execution_count"] == successes
        assert counted["success"]["count"] == successes
        assert counted["fail"]["count"] == failures
        for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
            assert counted[stage]["count"] == successes, stage
        assert counted["success"]["ns"] > 0 and counted["fail"]["ns"] > 0
        # gRPC's read, and another HTTP read (perhaps the other worker's), say the same.
        with grpcclient.InferenceServerClient(address) as over_grpc:
            assert _roll_stats_grpc(over_grpc) == over_http
        with httpclient.InferenceServerClient(url.removeprefix("http://")) as fresh:
            assert _roll_stats(fresh) == over_http
        # Both workers served some, and the statistics are the sum of their own figures.
        workers = _per_worker_roll_counts(metrics, tmp_path)
        assert len(workers) == 2, workers
        for stage in ("success", "fail"):
            assert sum(worker.get(stage, 0.0) for worker in workers) == counted[stage]["count"]
        assert all(worker.get("success", 0.0) + worker.get("fail", 0.0) for worker in workers)
        assert "Traceback" not in server_output(process)
    finally:
        stop_server(process)
