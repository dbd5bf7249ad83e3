"""Triton's protocol extensions through ``tritonclient.http`` and ``tritonclient.grpc``,
unchanged, against a real server: model configuration, statistics, the model repository's
index (load and unload refused), and the extensions server metadata lists."""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from app.registry import REGISTRY
from tests.support import free_port, launch_server, stop_server

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
    assert config == http.get_model_config(model, model_version="1")
    assert config["name"] == model
    assert config["platform"] == "openvino_opset"
    assert config["backend"] == "tensor-ops"
    assert config["max_batch_size"] == 0
    assert [item["name"] for item in config["input"]] == inputs
    assert [item["data_type"] for item in config["input"]] == types
    assert all(item["dims"] == [-1] for item in config["input"] + config["output"])
    assert config["output"] == [{"name": "output", "data_type": "TYPE_FP32", "dims": [-1]}]
    assert "FP16" in config["parameters"]["data.datatypes"]["string_value"].split(",")
    # gRPC answers the same configuration, in tritonclient's own ModelConfig message.
    message = grpc.get_model_config(model, model_version="1").config
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
    expected = [{"name": name, "version": "1", "state": "READY"} for name in REGISTRY]
    assert expected[:2] == [
        {"name": "roll", "version": "1", "state": "READY"},
        {"name": "gather", "version": "1", "state": "READY"},
    ]
    assert http.get_model_repository_index() == expected
    for body in (b"", b"{}", b'{"ready": true}'):
        reply = httpx.post(server[0] + "/v2/repository/index", content=body)
        assert reply.status_code == 200, reply.text
        assert reply.json() == expected
    assert grpc.get_model_repository_index(as_json=True) == {"models": expected}


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
    assert after["version"] == "1"
    # The other model's statistics are its own.
    assert http.get_inference_statistics("gather")["model_stats"][0] == gather_before
    names = [item["name"] for item in http.get_inference_statistics()["model_stats"]]
    assert names == list(REGISTRY)  # every op of the registry, in its order


def _roll_stats_grpc(client: Any) -> dict[str, Any]:
    """The gRPC answer in the HTTP answer's form (protobuf's JSON writes uint64 as strings
    and leaves out zeros)."""
    message = client.get_inference_statistics("roll", model_version="1").model_stats[0]
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
        "batch_stats": [],
    }
