"""Who may reach a shared memory region, against real servers: with keys on, a region belongs
to the key that registered it (to another key it does not exist: the same answer as a name
never registered, over HTTP and gRPC); registration refused in a process that is one of several
workers however they were started (``uvicorn --workers 2``); the objects a region may map
restricted by TENSOR_OPS_SHARED_MEMORY_PREFIX; region names that read as paths refused."""

from __future__ import annotations

import hashlib
import os
import socket
import time
import uuid
from collections.abc import Iterator
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from app.v2.siblings import Siblings
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tests.support import free_port, launch_server, server_output, stop_server

pytestmark = pytest.mark.e2e

ALICE = "k-a11ce0000000000000000000000000000"
BOB = "k-b0b00000000000000000000000000000000"
SYSTEM = "/v2/systemsharedmemory"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    keys = tmp_path_factory.mktemp("keys") / "keys"
    keys.write_text(
        "".join(
            f"{hashlib.sha256(key.encode()).hexdigest()} {label}\n"
            for key, label in ((ALICE, "alice"), (BOB, "bob"))
        )
    )
    port = free_port()
    url, process = launch_server(
        env={"TENSOR_OPS_GRPC_PORT": str(port), "TENSOR_OPS_API_KEYS_FILE": str(keys)},
        command=["-m", "app"],
    )
    yield url, port
    stop_server(process)


@pytest.fixture
def objects() -> Iterator[list[shared_memory.SharedMemory]]:
    made: list[shared_memory.SharedMemory] = []
    yield made
    for item in made:
        item.close()
        item.unlink()


def new_object(made: list[shared_memory.SharedMemory], values: Any, prefix: str = "t34_") -> str:
    array = np.asarray(values, np.float32)
    item = shared_memory.SharedMemory(f"{prefix}{uuid.uuid4().hex}", create=True, size=64)
    np.ndarray(array.shape, np.float32, item.buf)[:] = array
    made.append(item)
    return f"/{item.name}"


def roll_from(url: str, key: str, region: str) -> httpx.Response:
    body = {
        "inputs": [
            {
                "name": "data",
                "shape": [4],
                "datatype": "FP32",
                "parameters": {"shared_memory_region": region, "shared_memory_byte_size": 16},
            },
            {"name": "shift", "shape": [1], "datatype": "INT64", "data": [1]},
            {"name": "axes", "shape": [1], "datatype": "INT64", "data": [0]},
        ]
    }
    return httpx.post(f"{url}/v2/models/roll/infer", json=body, headers=bearer(key))


def test_a_region_belongs_to_the_key_that_registered_it(
    served: tuple[str, int], objects: list[shared_memory.SharedMemory]
) -> None:
    url, port = served
    alice_object = new_object(objects, [1, 2, 3, 4])
    bob_object = new_object(objects, [5, 6, 7, 8])
    register = {"key": alice_object, "byte_size": 16}
    # The worker's first mapping installs its guard (after the kernels load): seconds when loaded.
    assert httpx.post(f"{url}{SYSTEM}/region/io/register", json=register,
                      headers=bearer(ALICE), timeout=120).status_code == 200  # fmt: skip
    # Bob sees no region, and Alice's answers as a name never registered.
    assert httpx.get(f"{url}{SYSTEM}/status", headers=bearer(BOB)).json() == []
    unknown = httpx.get(f"{url}{SYSTEM}/region/never/status", headers=bearer(BOB))
    hers = httpx.get(f"{url}{SYSTEM}/region/io/status", headers=bearer(BOB))
    assert hers.status_code == unknown.status_code == 400
    assert hers.json()["error"] == unknown.json()["error"].replace("'never'", "'io'")
    refused, never = roll_from(url, BOB, "io"), roll_from(url, BOB, "never")
    assert refused.status_code == never.status_code == 400
    assert refused.json()["error"] == never.json()["error"].replace("'never'", "'io'")
    # Bob's unregister of the name, and of everything, leaves Alice's region.
    httpx.post(f"{url}{SYSTEM}/region/io/unregister", headers=bearer(BOB))
    httpx.post(f"{url}{SYSTEM}/unregister", headers=bearer(BOB))
    # Bob registers his own "io": each key's requests read its own object.
    register = {"key": bob_object, "byte_size": 16}
    assert httpx.post(f"{url}{SYSTEM}/region/io/register", json=register,
                      headers=bearer(BOB)).status_code == 200  # fmt: skip
    assert roll_from(url, ALICE, "io").json()["outputs"][0]["data"] == [4, 1, 2, 3]
    assert roll_from(url, BOB, "io").json()["outputs"][0]["data"] == [8, 5, 6, 7]
    listed = httpx.get(f"{url}{SYSTEM}/status", headers=bearer(ALICE)).json()
    assert [item["key"] for item in listed] == [alice_object]
    # Over gRPC, the same: Bob's status lists his region alone; Alice's is unknown to him.
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        status = channel.unary_unary(
            "/inference.GRPCInferenceService/SystemSharedMemoryStatus",
            request_serializer=pb.SystemSharedMemoryStatusRequest.SerializeToString,
            response_deserializer=pb.SystemSharedMemoryStatusResponse.FromString,
        )
        answer = status(
            pb.SystemSharedMemoryStatusRequest(), metadata=(("authorization", f"Bearer {BOB}"),)
        )
        assert [region.key for region in answer.regions.values()] == [bob_object]
        unregister = channel.unary_unary(
            "/inference.GRPCInferenceService/SystemSharedMemoryUnregister",
            request_serializer=pb.SystemSharedMemoryUnregisterRequest.SerializeToString,
            response_deserializer=pb.SystemSharedMemoryUnregisterResponse.FromString,
        )
        unregister(
            pb.SystemSharedMemoryUnregisterRequest(), metadata=(("authorization", f"Bearer {BOB}"),)
        )
        register_call = channel.unary_unary(
            "/inference.GRPCInferenceService/SystemSharedMemoryRegister",
            request_serializer=pb.SystemSharedMemoryRegisterRequest.SerializeToString,
            response_deserializer=pb.SystemSharedMemoryRegisterResponse.FromString,
        )
        for name in (".", ".."):
            with pytest.raises(grpc.RpcError) as refusal:
                register_call(
                    pb.SystemSharedMemoryRegisterRequest(name=name, key=bob_object, byte_size=16),
                    metadata=(("authorization", f"Bearer {BOB}"),),
                )
            assert refusal.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "could be read as a path" in str(refusal.value.details())
    assert roll_from(url, ALICE, "io").json()["outputs"][0]["data"] == [4, 1, 2, 3]
    httpx.post(f"{url}{SYSTEM}/unregister", headers=bearer(ALICE))
    assert httpx.get(f"{url}{SYSTEM}/status", headers=bearer(ALICE)).json() == []


def test_registration_is_refused_under_uvicorn_workers(
    objects: list[shared_memory.SharedMemory],
) -> None:
    """``uvicorn --workers 2`` (TENSOR_OPS_WORKERS unset): both workers refuse, saying why."""
    # python -m uvicorn, its port the one launch_server chose (TENSOR_OPS_PORT).
    url, process = launch_server(
        command=[
            "-c",
            "import os, sys, uvicorn; sys.argv = ['uvicorn', 'app.main:app', '--host', "
            "'127.0.0.1', '--port', os.environ['TENSOR_OPS_PORT'], '--workers', '2', '--http', "
            "'app.http.protocol:ServiceHttpProtocol']; uvicorn.main()",
        ]
    )
    try:
        name = new_object(objects, [1, 2, 3, 4])
        for _ in range(6):  # whichever worker answers
            answer = httpx.post(
                f"{url}{SYSTEM}/region/io/register", json={"key": name, "byte_size": 16}
            )
            assert answer.status_code in {501, 400}, answer.text
            assert "one of several" in answer.json()["error"], answer.text
    finally:
        output = server_output(process)
        stop_server(process)
    assert "Traceback" not in output


def test_the_objects_a_region_may_map_can_be_restricted(
    objects: list[shared_memory.SharedMemory], tmp_path: Path
) -> None:
    url, process = launch_server(
        env={"TENSOR_OPS_SHARED_MEMORY_PREFIX": "psm_"}, command=["-m", "app"]
    )
    try:
        other = new_object(objects, [1, 2, 3, 4])
        allowed = new_object(objects, [1, 2, 3, 4], prefix="psm_")
        refused = httpx.post(
            f"{url}{SYSTEM}/region/a/register", json={"key": other, "byte_size": 16}
        )
        assert refused.status_code == 400
        assert "TENSOR_OPS_SHARED_MEMORY_PREFIX" in refused.json()["error"]
        # The first region a worker maps installs its guard, which compiles it (numba, in the
        # background since the kernels compile there): seconds on a loaded machine.
        taken = httpx.post(
            f"{url}{SYSTEM}/region/b/register", json={"key": allowed, "byte_size": 16}, timeout=120
        )
        assert taken.status_code == 200, taken.text
    finally:
        stop_server(process)


def test_workers_forked_with_one_listening_socket_know_of_each_other(tmp_path: Path) -> None:
    """Gunicorn's way (workers forked, not spawned, the settings never told): each process
    holding the inherited listening socket sees the other; once alone, it is alone again."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    ready, done = os.pipe(), os.pipe()
    child = os.fork()
    if child == 0:  # the other worker: holds its lock until told to go
        try:
            Siblings(1, tmp_path).claim()
            os.write(ready[1], b"x")
            os.read(done[0], 1)
        finally:
            os._exit(0)
    try:
        mine = Siblings(1, tmp_path)
        mine.claim()
        os.read(ready[0], 1)
        reason = mine.reason()
        assert reason is not None and "same listening socket" in reason
    finally:
        os.write(done[1], b"x")
        os.waitpid(child, 0)
    deadline = time.monotonic() + 5
    while mine.reason() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mine.reason() is None
    mine.close()
    listener.close()
