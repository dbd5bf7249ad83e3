"""Shared memory regions belong to the app that ``create_app`` built: one set for its ``/v2``
routes and its gRPC service, none shared with another app of the same process."""

import os
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from app.main import create_app
from app.settings import Settings
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tests.support import grpc_channel, grpc_serving, inference_stub

pytestmark = pytest.mark.anyio

SIZE = 4096


@pytest.fixture
def key() -> Iterator[str]:
    """A shared memory object of ``SIZE`` bytes, removed at the end of the test."""
    name = f"tensor-ops-test-{uuid.uuid4().hex[:12]}"
    path = f"/dev/shm/{name}"
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(descriptor, SIZE)
    finally:
        os.close(descriptor)
    yield f"/{name}"
    os.unlink(path)


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_a_region_registered_over_http_is_used_over_grpc(key: str) -> None:
    app = create_app(Settings())
    async with client(app) as http, grpc_serving(app) as address:
        response = await http.post(
            "/v2/systemsharedmemory/region/in/register",
            json={"key": key, "offset": 1024, "byte_size": 2048},
        )
        assert (response.status_code, response.content) == (200, b"")
        async with grpc_channel(address) as channel:
            stub = inference_stub(channel)
            status = await stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest())
            assert {
                name: (item.key, item.offset, item.byte_size)
                for name, item in status.regions.items()
            } == {"in": (key, 1024, 2048)}
            # A roll over gRPC reads its input from the region /v2 registered.
            data = np.arange(6, dtype=np.float32)
            with open(f"/dev/shm{key}", "r+b") as shared:
                shared.seek(1024)
                shared.write(data.tobytes())
            request = pb.ModelInferRequest(model_name="roll")
            tensor = request.inputs.add(name="data", datatype="FP32", shape=[6])
            tensor.parameters["shared_memory_region"].string_param = "in"
            tensor.parameters["shared_memory_byte_size"].int64_param = data.nbytes
            for name, value in (("shift", 2), ("axes", 0)):
                request.inputs.add(name=name, datatype="INT64", shape=[]).contents.int64_contents[
                    :
                ] = [value]
            answer = await stub.ModelInfer(request)
            got = np.frombuffer(answer.raw_output_contents[0], np.float32)
            np.testing.assert_array_equal(got, np.roll(data, 2))
            await stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest())
        response = await http.get("/v2/systemsharedmemory/status")
        assert response.json() == []


async def test_two_apps_of_one_process_hold_regions_of_their_own(key: str) -> None:
    first, second = create_app(Settings()), create_app(Settings())
    async with client(first) as one, client(second) as other:
        response = await one.post(
            "/v2/systemsharedmemory/region/r/register", json={"key": key, "byte_size": SIZE}
        )
        assert response.status_code == 200
        assert (await one.get("/v2/systemsharedmemory/status")).json() == [
            {"name": "r", "key": key, "offset": 0, "byte_size": SIZE}
        ]
        assert (await other.get("/v2/systemsharedmemory/status")).json() == []
        response = await other.get("/v2/systemsharedmemory/region/r/status")
        assert response.status_code == 400
        assert "no system shared memory region 'r' is registered" in response.json()["error"]
        # The second app may register the same name over the same object: no clash.
        response = await other.post(
            "/v2/systemsharedmemory/region/r/register", json={"key": key, "byte_size": 16}
        )
        assert response.status_code == 200
        assert (await other.get("/v2/systemsharedmemory/region/r/status")).json()[0][
            "byte_size"
        ] == 16
        assert (await one.get("/v2/systemsharedmemory/region/r/status")).json()[0][
            "byte_size"
        ] == SIZE
