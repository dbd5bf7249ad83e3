"""Triton's system shared memory extension, through ``tritonclient.http`` and
``tritonclient.grpc`` unchanged, with regions made by ``tritonclient.utils.shared_memory``:
bit-exact tensors both ways, every registration and parameter checked, CUDA refused."""

import hashlib
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import orjson
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from app.errors import ServiceError
from app.http.v2_exchange import V2Exchange
from app.main import create_app
from app.ops import gather, roll
from app.pipeline.jobs import Limits
from app.registry import REGISTRY
from app.settings import Settings
from app.v2.shared_memory import MAX_REGIONS, Regions, SharedTensors
from tensor_ops_client import TensorOpsClient
from tests.support import DTYPES, assert_same_bits, free_port, launch_server, sample, stop_server

Array = npt.NDArray[Any]
SHM_DIR = Path("/dev/shm")


class Server:
    """A real server, HTTP and gRPC, with both clients."""

    def __init__(self, url: str, grpc_port: int) -> None:
        self.url = url
        self.http = httpclient.InferenceServerClient(url.removeprefix("http://"))
        self.grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        self.grpc_target = f"127.0.0.1:{grpc_port}"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    grpc_port = free_port()
    url, process = launch_server({"TENSOR_OPS_GRPC_PORT": str(grpc_port)})
    served = Server(url, grpc_port)
    yield served
    served.http.close()
    served.grpc.close()
    stop_server(process)


class Object:
    """A shared memory object made by tritonclient, removed at the end of the test."""

    def __init__(self, size: int) -> None:
        self.key = f"/tensor-ops-test-{uuid.uuid4().hex[:12]}"
        self.handle = shm.create_shared_memory_region(self.key[1:], self.key, size)
        self.size = size

    def write(self, array: Array, offset: int = 0) -> None:
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        shm.set_shared_memory_region(self.handle, [raw], offset)

    def read(self, dtype: np.dtype[Any], shape: tuple[int, ...], offset: int = 0) -> Array:
        raw: Array = shm.get_contents_as_numpy(
            self.handle, np.uint8, [int(np.prod(shape)) * dtype.itemsize], offset
        )
        return raw.copy().view(dtype).reshape(shape)


@pytest.fixture
def objects() -> Iterator[list[Object]]:
    made: list[Object] = []
    yield made
    for item in made:
        shm.destroy_shared_memory_region(item.handle)


@pytest.fixture
def new_object(objects: list[Object]) -> Any:
    def make(size: int) -> Object:
        item = Object(size)
        objects.append(item)
        return item

    return make


@pytest.fixture(autouse=True)
def _unregistered(request: pytest.FixtureRequest) -> Iterator[None]:
    # Every test begins and ends with no region registered (the server is the module's).
    yield
    if "server" in request.fixturenames:
        request.getfixturevalue("server").http.unregister_system_shared_memory()


def refused(call: Any, *words: str) -> str:
    with pytest.raises(InferenceServerException) as caught:
        call()
    message = str(caught.value)
    for word in words:
        assert word in message, message
    return message


def http_tensor(name: str, array: Array, datatype: str | None = None) -> Any:
    tensor = httpclient.InferInput(name, list(array.shape), datatype or type_name(array))
    tensor.set_data_from_numpy(array, binary_data=True)
    return tensor


def grpc_tensor(name: str, array: Array) -> Any:
    tensor = grpcclient.InferInput(name, list(array.shape), type_name(array))
    tensor.set_data_from_numpy(array)
    return tensor


def type_name(array: Array) -> str:
    return next(name for name, dtype in DTYPES.items() if dtype == array.dtype)


def roll_case(name: str) -> tuple[Array, Array, Array]:
    data = sample(name, (6, 7), finite=False, seed=3)
    return data, np.array([2, -3], np.int64), np.array([0, 1], np.int64)


# ------------------------------------------------------------------------------------------------
# Tensors through shared memory, bit-exact


@pytest.mark.parametrize("name", list(DTYPES))
def test_roll_in_and_out_of_shared_memory_over_http(
    server: Server, new_object: Any, name: str
) -> None:
    data, shift, axes = roll_case(name)
    size = data.nbytes
    region = new_object(2 * size + 64)
    region.write(data)
    server.http.register_system_shared_memory("io", region.key, region.size)
    tensor = httpclient.InferInput("data", list(data.shape), name)
    tensor.set_shared_memory("io", size)
    output = httpclient.InferRequestedOutput("output")
    output.set_shared_memory("io", size, offset=size + 64 - (size + 64) % 8)
    result = server.http.infer(
        "roll",
        [tensor, http_tensor("shift", shift), http_tensor("axes", axes)],
        outputs=[output],
    )
    answer = result.get_response()["outputs"][0]
    assert "data" not in answer
    assert answer["parameters"]["shared_memory_region"] == "io"
    assert answer["parameters"]["shared_memory_byte_size"] == size
    got = region.read(data.dtype, data.shape, offset=size + 64 - (size + 64) % 8)
    assert_same_bits(got, roll(data, shift, axes))


@pytest.mark.parametrize("name", list(DTYPES))
def test_gather_in_and_out_of_shared_memory_over_grpc(
    server: Server, new_object: Any, name: str
) -> None:
    data = sample(name, (5, 4), finite=False, seed=5)
    indices = np.array([[4, -1], [0, 9]], np.int32)
    expected = gather(data, indices, np.array(0))
    inputs = new_object(4096)
    outputs = new_object(expected.nbytes)
    inputs.write(data)
    inputs.write(indices, offset=1024)
    server.grpc.register_system_shared_memory("inputs", inputs.key, inputs.size)
    server.grpc.register_system_shared_memory("output", outputs.key, outputs.size)
    tensors = []
    for tensor_name, array, offset in (("data", data, 0), ("indices", indices, 1024)):
        tensor = grpcclient.InferInput(tensor_name, list(array.shape), type_name(array))
        tensor.set_shared_memory("inputs", array.nbytes, offset=offset)
        tensors.append(tensor)
    tensors.append(grpc_tensor("axis", np.array(0, np.int64)))
    output = grpcclient.InferRequestedOutput("output")
    output.set_shared_memory("output", expected.nbytes)
    result = server.grpc.infer("gather", tensors, outputs=[output])
    response = result.get_response()
    assert len(response.raw_output_contents) == 0
    parameters = response.outputs[0].parameters
    assert parameters["shared_memory_region"].string_param == "output"
    assert parameters["shared_memory_byte_size"].int64_param == expected.nbytes
    assert_same_bits(outputs.read(data.dtype, expected.shape), expected)


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_inputs_and_output_each_way_alone(server: Server, new_object: Any, transport: str) -> None:
    """Input in shared memory with the output in the answer, and the other way round; the raw
    contents of the other inputs still line up (gRPC)."""
    data, shift, axes = roll_case("FP32")
    expected = roll(data, shift, axes)
    region = new_object(2 * data.nbytes)
    region.write(data)
    client = server.http if transport == "http" else server.grpc
    module: Any = httpclient if transport == "http" else grpcclient
    make = http_tensor if transport == "http" else grpc_tensor
    client.register_system_shared_memory("io", region.key, region.size)
    tensor = module.InferInput("data", list(data.shape), "FP32")
    tensor.set_shared_memory("io", data.nbytes)
    result = client.infer("roll", [tensor, make("shift", shift), make("axes", axes)])
    assert_same_bits(result.as_numpy("output"), expected)
    output = module.InferRequestedOutput("output")
    output.set_shared_memory("io", data.nbytes, offset=data.nbytes)
    client.infer(
        "roll", [make("data", data), make("shift", shift), make("axes", axes)], outputs=[output]
    )
    assert_same_bits(region.read(data.dtype, data.shape, offset=data.nbytes), expected)


def _checked_by_the_kernel(broken: str) -> tuple[str, dict[str, Array], Array | None, str]:
    """A request whose values the kernel checks as it reads them (a large GatherTree's ids, a
    large GatherElements' indices along the inner axis, axis 1), ``broken`` one way or not at
    all: the op, its inputs, its output (or None) and the words of its refusal."""
    from app.ops import gather_elements as elements  # noqa: PLC0415
    from app.ops import gather_tree as walk  # noqa: PLC0415

    rng = np.random.default_rng(4)
    if broken.startswith("indices"):
        data = rng.integers(-9, 9, (64, 4096)).astype(np.int8)
        indices = rng.integers(0, 4096, (64, 4096)).astype(np.int32)
        assert indices.nbytes >= elements._KERNEL_CHECKS_BYTES
        if broken == "indices":
            indices[63, 4095] = -1
        arrays: dict[str, Array] = {"data": data, "indices": indices}
        good = None if broken == "indices" else elements.gather_elements(data, indices, 1)
        return "gather_elements", arrays, good, "is out of bounds"
    shape = (64, 64, 64)  # float32: 1 MiB of ids
    step_ids = rng.integers(0, 9, shape).astype(np.float32)
    parent_ids = rng.integers(0, 64, shape).astype(np.float32)
    assert step_ids.nbytes >= walk._WALK_CHECKS_BYTES
    if broken == "step_ids":
        step_ids[63, 63, 63] = 0.5
    elif broken == "parent_ids":
        parent_ids[63, 63, 63] = 64.0
    lengths, end = np.full(64, 64, np.float32), np.array(3, np.float32)
    arrays = {"step_ids": step_ids, "parent_ids": parent_ids, "max_seq_len": lengths,
              "end_token": end}  # fmt: skip
    good = walk.gather_tree(step_ids, parent_ids, lengths, end) if broken == "ids" else None
    words = "integer values only" if broken == "step_ids" else "is no beam"
    return "gather_tree", arrays, good, words


@pytest.mark.parametrize("transport", ["http", "grpc"])
@pytest.mark.parametrize("broken", ["step_ids", "parent_ids", "ids", "indices", "indices-none"])
def test_an_output_region_is_written_only_for_an_answer(
    server: Server, new_object: Any, transport: str, broken: str
) -> None:
    """A request whose values the kernel checks as it reads them (``Plan.check``): a refused
    one leaves the output's region as it was (the checks made before a byte is written
    there), naming the input; a good one fills it."""
    op, arrays, good, words = _checked_by_the_kernel(broken)
    first = next(iter(arrays.values()))
    region = new_object(first.nbytes)
    pattern = np.full(first.shape, 7.25).astype(first.dtype)
    region.write(pattern)
    client = server.http if transport == "http" else server.grpc
    module: Any = httpclient if transport == "http" else grpcclient
    make = http_tensor if transport == "http" else grpc_tensor
    client.register_system_shared_memory("out", region.key, region.size)
    output = module.InferRequestedOutput("output")
    output.set_shared_memory("out", first.nbytes)
    tensors = [make(name, array) for name, array in arrays.items()]
    parameters = {"axis": 1} if op == "gather_elements" else None
    if good is not None:
        client.infer(op, tensors, outputs=[output], parameters=parameters)
        assert_same_bits(region.read(first.dtype, first.shape), good)
        return
    refused(lambda: client.infer(op, tensors, outputs=[output], parameters=parameters), broken,
            words)  # fmt: skip
    assert_same_bits(region.read(first.dtype, first.shape), pattern)


def test_a_region_at_an_offset_of_its_object(server: Server, new_object: Any) -> None:
    data, shift, axes = roll_case("INT64")
    size = data.nbytes
    region = new_object(8192 + 2 * size + 64)
    region.write(data, offset=8192 + 8)
    server.http.register_system_shared_memory("late", region.key, 2 * size + 16, offset=8192)
    status = server.http.get_system_shared_memory_status("late")
    assert status == [
        {"name": "late", "key": region.key, "offset": 8192, "byte_size": 2 * size + 16}
    ]
    tensor = httpclient.InferInput("data", list(data.shape), "INT64")
    tensor.set_shared_memory("late", size, offset=8)
    inputs = [tensor, http_tensor("shift", shift), http_tensor("axes", axes)]
    output = httpclient.InferRequestedOutput("output")
    output.set_shared_memory("late", size + 8, offset=size + 16)
    refused(
        lambda: server.http.infer("roll", inputs, outputs=[output]),
        "passes the end of region 'late', of",
    )
    output.set_shared_memory("late", size - 8, offset=size + 8)
    refused(
        lambda: server.http.infer("roll", inputs, outputs=[output]),
        "shared_memory_byte_size",
        "too small",
    )
    output.set_shared_memory("late", size, offset=size + 8)
    result = server.http.infer("roll", inputs, outputs=[output])
    parameters = result.get_response()["outputs"][0]["parameters"]
    assert parameters["shared_memory_offset"] == size + 8
    got = region.read(data.dtype, data.shape, offset=8192 + size + 8)
    assert_same_bits(got, roll(data, shift, axes))


# ------------------------------------------------------------------------------------------------
# Registration


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("../etc/passwd", "contains '..'"),
        ("/a/b", "has a '/' after the leading one"),
        ("", "is empty"),
        ("/", "is empty"),
        ("/" + "x" * 256, "longer than 255 bytes"),
        ("/tensor-ops-test-absent", "there is no shared memory object"),
    ],
)
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_bad_keys_are_refused(server: Server, key: str, words: str, transport: str) -> None:
    client = server.http if transport == "http" else server.grpc
    refused(lambda: client.register_system_shared_memory("r", key, 16), words)
    assert not server.http.get_system_shared_memory_status()


def test_a_nul_in_a_key_is_refused(server: Server) -> None:
    response = httpx.post(
        f"{server.url}/v2/systemsharedmemory/region/r/register",
        json={"key": "/a\0b", "offset": 0, "byte_size": 4},
    )
    assert response.status_code == 400
    assert "contains a NUL character" in response.json()["error"]


def test_links_and_directories_are_not_opened(server: Server) -> None:
    name = f"tensor-ops-test-{uuid.uuid4().hex[:12]}"
    link = SHM_DIR / name
    link.symlink_to("/etc/hostname")
    try:
        refused(
            lambda: server.http.register_system_shared_memory("r", "/" + name, 4),
            "cannot be opened",
        )
    finally:
        link.unlink()
    link.mkdir()
    try:
        refused(
            lambda: server.http.register_system_shared_memory("r", "/" + name, 4),
            "cannot be opened",
        )
    finally:
        link.rmdir()


def test_sizes_offsets_and_names_are_checked(server: Server, new_object: Any) -> None:
    region = new_object(100)
    http = server.http
    refused(lambda: http.register_system_shared_memory("r", region.key, 101), "passes the end")
    refused(lambda: http.register_system_shared_memory("r", region.key, 60, 41), "passes the end")
    refused(lambda: http.register_system_shared_memory("r", region.key, 0), "at least 1")
    refused(lambda: http.register_system_shared_memory("a b", region.key, 4), "region name")
    refused(lambda: http.register_system_shared_memory("x" * 129, region.key, 4), "region name")
    for body, words in (
        ({"key": region.key, "offset": -1, "byte_size": 4}, "offset must be a non-negative"),
        ({"key": region.key, "byte_size": "4"}, "byte_size must be a non-negative integer"),
        ({"key": 7, "byte_size": 4}, "key must be a string"),
        ({"byte_size": 4}, "key is missing"),
        ([1], "must be a JSON object"),
    ):
        response = httpx.post(f"{server.url}/v2/systemsharedmemory/region/r/register", json=body)
        assert response.status_code in (400, 422), response.text
        assert words in response.json()["error"], response.text
    http.register_system_shared_memory("r", region.key, 60, 40)
    refused(lambda: http.register_system_shared_memory("r", region.key, 4), "already registered")
    refused(lambda: http.get_system_shared_memory_status("other"), "no system shared memory")
    http.unregister_system_shared_memory("other")  # as in Triton: nothing to do, no error
    http.unregister_system_shared_memory("r")
    assert http.get_system_shared_memory_status() == []


def test_regions_are_limited_in_number(server: Server, new_object: Any) -> None:
    region = new_object(4096)
    for number in range(MAX_REGIONS):
        server.grpc.register_system_shared_memory(f"r{number}", region.key, 8, number * 8)
    refused(
        lambda: server.grpc.register_system_shared_memory("one-more", region.key, 8),
        "RESOURCE_EXHAUSTED",
        f"{MAX_REGIONS} regions are registered",
    )
    assert len(server.http.get_system_shared_memory_status()) == MAX_REGIONS
    server.grpc.unregister_system_shared_memory()
    assert server.http.get_system_shared_memory_status() == []


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_cuda_shared_memory_is_refused(server: Server, transport: str) -> None:
    client = server.http if transport == "http" else server.grpc
    for call in (
        client.get_cuda_shared_memory_status,
        lambda: client.register_cuda_shared_memory("gpu", b"aGFuZGxl", 0, 16),
        client.unregister_cuda_shared_memory,
        lambda: client.unregister_cuda_shared_memory("gpu"),
    ):
        refused(call, "CUDA shared memory is not offered here: the service has no GPU")


# ------------------------------------------------------------------------------------------------
# What an inference request says of its regions


def post_infer(server: Server, inputs: list[dict[str, Any]], outputs: Any = None) -> Any:
    body: dict[str, Any] = {"inputs": inputs}
    if outputs is not None:
        body["outputs"] = outputs
    return httpx.post(f"{server.url}/v2/models/roll/infer", json=body)


def roll_inputs(data_parameters: dict[str, Any], **data: Any) -> list[dict[str, Any]]:
    return [
        {"name": "data", "shape": [4], "datatype": "FP32", "parameters": data_parameters, **data},
        {"name": "shift", "shape": [1], "datatype": "INT64", "data": [1]},
        {"name": "axes", "shape": [1], "datatype": "INT64", "data": [0]},
    ]


@pytest.mark.parametrize(
    ("parameters", "extra", "words"),
    [
        ({"shared_memory_region": "nowhere", "shared_memory_byte_size": 16}, {}, "no system"),
        ({"shared_memory_region": "r", "shared_memory_byte_size": 12}, {}, "takes 16 bytes"),
        ({"shared_memory_region": "r", "shared_memory_byte_size": 20}, {}, "takes 16 bytes"),
        ({"shared_memory_region": "r"}, {}, "shared_memory_byte_size is missing"),
        ({"shared_memory_byte_size": 16}, {}, "goes with shared_memory_region"),
        ({"shared_memory_region": 3, "shared_memory_byte_size": 16}, {}, "must be a string"),
        (
            {
                "shared_memory_region": "r",
                "shared_memory_byte_size": 16,
                "shared_memory_offset": -4,
            },
            {},
            "shared_memory_offset must be a non-negative integer",
        ),
        (
            {
                "shared_memory_region": "r",
                "shared_memory_byte_size": 16,
                "shared_memory_offset": 60,
            },
            {},
            "passes the end of region 'r'",
        ),
        (
            {"shared_memory_region": "r", "shared_memory_byte_size": 16, "shared_memory_offset": 2},
            {},
            "not a multiple of its 4-byte elements",
        ),
        (
            {"shared_memory_region": "r", "shared_memory_byte_size": 16},
            {"data": [1, 2, 3, 4]},
            "has both shared_memory_region and data",
        ),
    ],
)
def test_input_parameters_are_checked(
    server: Server, new_object: Any, parameters: dict[str, Any], extra: Any, words: str
) -> None:
    region = new_object(64)
    server.http.register_system_shared_memory("r", region.key, 64)
    response = post_infer(server, roll_inputs(parameters, **extra))
    assert response.status_code == 400, response.text
    assert words in response.json()["error"], response.text


def test_an_output_that_does_not_fit_is_refused_before_any_work(
    server: Server, new_object: Any
) -> None:
    data = np.arange(1 << 20, dtype=np.float32)
    region = new_object(data.nbytes + 4096)
    region.write(data)
    sentinel = np.full(1024, 7, np.uint8)
    region.write(sentinel, offset=data.nbytes)
    server.http.register_system_shared_memory("r", region.key, region.size)
    place: dict[str, Any] = {
        "shared_memory_region": "r",
        "shared_memory_byte_size": 4096,
        "shared_memory_offset": data.nbytes,
    }
    output = {"name": "output", "parameters": place}
    inputs = roll_inputs({"shared_memory_region": "r", "shared_memory_byte_size": data.nbytes})
    inputs[0]["shape"] = [data.size]
    response = post_infer(server, inputs, [output])
    assert response.status_code == 400
    assert response.json()["error"] == (
        "output.parameters.shared_memory_byte_size: shared_memory_byte_size 4096 is too small: "
        f"the output takes {data.nbytes} bytes (shape [{data.size}], FP32)"
    )
    assert_same_bits(region.read(np.dtype(np.uint8), (1024,), offset=data.nbytes), sentinel)
    # Over the input it reads: refused too.
    place |= {"shared_memory_offset": 0, "shared_memory_byte_size": data.nbytes}
    response = post_infer(server, inputs, [output])
    assert response.status_code == 400
    assert "overlap input 'data'" in response.json()["error"]


def test_an_object_cut_short_after_registration_is_refused(server: Server, new_object: Any) -> None:
    # Read past its end, the mapping would be a SIGBUS in the worker: refused instead.
    region = new_object(4096)
    server.http.register_system_shared_memory("r", region.key, 4096)
    os.truncate(SHM_DIR / region.key[1:], 8)
    response = post_infer(
        server, roll_inputs({"shared_memory_region": "r", "shared_memory_byte_size": 16})
    )
    assert response.status_code == 400
    assert "has shrunk to 8 bytes since it was registered" in response.json()["error"]


#: Run in a process of its own: without the SIGBUS guard the read below kills the process.
def run_script(script: str, *arguments: str) -> "subprocess.CompletedProcess[str]":
    """``script`` run by a Python process of its own from the project's root (a SIGBUS there
    ends that process, not the test's), its output as text."""
    return subprocess.run(
        [sys.executable, "-c", script, *arguments],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )


_CUT_UNDER_A_READ = """
import os, signal, sys
import numpy as np
from app.errors import ServiceError
from app.settings import Settings
from app.v2.shared_memory import Regions, SharedTensors

key, other = sys.argv[1], sys.argv[2]
regions = Regions(Settings())
regions.register("r", key, 0, 1 << 16)
shared = SharedTensors(regions)
parameters = {"shared_memory_region": "r", "shared_memory_byte_size": 1 << 16}
array = shared.input("data", parameters, [1 << 14], "FP32", None)  # checked whole: it is
os.truncate("/dev/shm" + key, 0)  # cut short after the check, before the read
print("sum", float(array.sum()))  # past the object's end: zeros, not a SIGBUS
try:
    shared.verify()
except ServiceError as error:
    print("refused", tuple(error.problems[0].loc), error)
try:
    SharedTensors(regions).input("data", parameters, [1 << 14], "FP32", None)
except ServiceError as error:
    print("later", error)
# A SIGBUS in a mapping that is no region's still ends the process, as it would have.
import mmap
descriptor = os.open("/dev/shm" + other, os.O_RDWR)
mapping = mmap.mmap(descriptor, 4096)
os.ftruncate(descriptor, 0)
print("reading", flush=True)
print(mapping[0])
"""


def test_an_object_cut_short_under_a_read_is_refused_not_a_sigbus(new_object: Any) -> None:
    region, other = new_object(1 << 16), new_object(4096)
    region.write(np.arange(1 << 14, dtype=np.float32))
    done = run_script(_CUT_UNDER_A_READ, region.key, other.key)
    lines = done.stdout.splitlines()
    assert lines[:1] == ["sum 0.0"], (done.returncode, done.stdout + done.stderr)
    assert lines[1] == (
        "refused ('body', 'data', 'parameters', 'shared_memory_region') shared memory object "
        f"'{region.key}' of region 'r' was cut short while a request used it (ftruncate): its "
        "bytes are gone from the region; unregister the region and register it again"
    )
    assert lines[2].startswith(f"later shared memory object '{region.key}' of region 'r' was cut")
    assert lines[3:] == ["reading"]
    assert done.returncode == -signal.SIGBUS, done.stderr


class _Faulted:
    """A guard slot that has taken a fault (what the SIGBUS handler counts)."""

    faults = 1


@pytest.mark.parametrize("cut", [True, False])
def test_a_faulted_region_is_refused_naming_what_happened(new_object: Any, cut: bool) -> None:
    """A fault on an object cut short says so; one on an object still whole (tmpfs refusing a
    page when /dev/shm is full) does not send the client looking for an ftruncate."""
    made = new_object(4096)
    regions = Regions(Settings())
    regions.register("r", made.key, 0, 4096)
    region = regions.get("r", ("body",))
    object.__setattr__(region, "guard", _Faulted())
    if cut:
        os.truncate("/dev/shm" + made.key, 0)
    with pytest.raises(ServiceError) as refused:
        region.require_unfaulted(("body", "data"))
    words = (
        "was cut short while a request used it (ftruncate)"
        if cut
        else "could not be read or written while a request used it, though it is whole (the "
        "system's shared memory, /dev/shm, may be full)"
    )
    (problem,) = refused.value.problems
    assert problem.msg == (
        f"shared memory object '{made.key}' of region 'r' {words}: its bytes are gone from the "
        "region; "
        + ("" if cut else "make room, then ")
        + "unregister the region and register it again"
    )
    assert problem.loc == ("body", "data")


class _FaultsLater:
    """A guard slot whose mapping faults after its first look (while the request runs)."""

    def __init__(self) -> None:
        self.looks = 0

    @property
    def faults(self) -> int:
        self.looks += 1
        return int(self.looks > 1)


@pytest.mark.parametrize("faulted", [True, False])
def test_a_refusal_after_a_fault_names_the_region_not_what_its_zeros_broke(
    new_object: Any, faulted: bool
) -> None:
    """Refused once its data was read from a region that faulted meanwhile (axes here), a
    request is told of the region: the check may have failed on the guard's zeros."""
    made = new_object(4096)
    regions = Regions(Settings())
    regions.register("r", made.key, 0, 4096)
    if faulted:
        object.__setattr__(regions.get("r", ("body",)), "guard", _FaultsLater())
    region = {"shared_memory_region": "r", "shared_memory_byte_size": 16}
    body = orjson.dumps(
        {
            "inputs": [
                {"name": "data", "datatype": "FP32", "shape": [4], "parameters": region},
                {"name": "shift", "datatype": "INT64", "shape": [], "data": [1]},
                {"name": "axes", "datatype": "INT64", "shape": [], "data": [5]},
            ]
        }
    )
    exchange = V2Exchange(REGISTRY["roll"], None, SharedTensors(regions))
    exchange.prepare(body)
    with pytest.raises(ServiceError) as refused:
        exchange.decode(Limits.of(Settings()))
    (problem,) = refused.value.problems
    if faulted:
        assert problem.loc == ("body", "data", "parameters", "shared_memory_region")
        assert "could not be read or written while a request used it" in problem.msg
    else:
        assert problem.loc == ("body", "axes")
        assert "out of range" in problem.msg


_HANDLER_REPLACED = """
import faulthandler, os, sys
from app.settings import Settings
from app.v2.shared_memory import Regions, SharedTensors

first, second = sys.argv[1], sys.argv[2]
regions = Regions(Settings())
regions.register("first", first, 0, 1 << 16)  # the guard installed
faulthandler.enable()  # SIGBUS's handler replaced after it (as -X faulthandler would not be)
regions.register("second", second, 0, 1 << 16)  # the guard installed again, over it
parameters = {"shared_memory_region": "second", "shared_memory_byte_size": 1 << 16}
array = SharedTensors(regions).input("data", parameters, [1 << 14], "FP32", None)
os.truncate("/dev/shm" + second, 0)
print("sum", float(array.sum()), flush=True)
"""


def test_a_sigbus_handler_set_after_the_guard_is_replaced_at_the_next_registration(
    new_object: Any,
) -> None:
    """A library that sets its own SIGBUS handler after the guard (faulthandler here) would
    let a cut object kill the worker: each registration puts the guard back first."""
    first, second = new_object(1 << 16), new_object(1 << 16)
    second.write(np.arange(1 << 14, dtype=np.float32))
    done = run_script(_HANDLER_REPLACED, first.key, second.key)
    assert (done.returncode, done.stdout) == (0, "sum 0.0\n"), done.stderr


@pytest.mark.parametrize("cut", ["input", "output"])
def test_an_object_cut_short_while_a_request_runs_leaves_the_worker_alive(
    server: Server, new_object: Any, cut: str
) -> None:
    """ftruncate to 0 at some moment of a 64 MiB roll: each answer is the right bytes or a 400
    naming the region, the worker lives, and the next request is bit-exact."""
    data = np.arange(16 << 20, dtype=np.float32)
    expected = np.roll(data, 1)
    inputs = roll_inputs({"shared_memory_region": "in", "shared_memory_byte_size": data.nbytes})
    inputs[0]["shape"] = [data.size]
    place = {"shared_memory_region": "out", "shared_memory_byte_size": data.nbytes}
    outputs = [{"name": "output", "parameters": place}]
    refusals = 0
    for delay in (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016):
        source, target = new_object(data.nbytes), new_object(data.nbytes)
        source.write(data)
        server.http.register_system_shared_memory("in", source.key, data.nbytes)
        server.http.register_system_shared_memory("out", target.key, data.nbytes)
        victim = SHM_DIR / (source if cut == "input" else target).key[1:]
        cutter = threading.Timer(delay, os.truncate, (victim, 0))
        cutter.start()
        response = post_infer(server, inputs, outputs)
        cutter.join()
        if response.status_code == 200:
            if cut == "input":  # an output cut short after the answer is the client's loss
                assert_same_bits(target.read(data.dtype, data.shape), expected)
        else:
            refusals += 1
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            field = "data" if cut == "input" else "output"
            assert error.startswith(f"{field}.parameters.shared_memory_region: "), error
            assert "was cut short while a request used it" in error or "has shrunk" in error
        server.http.unregister_system_shared_memory()
    assert refusals  # the cut was seen at least once
    # The worker is alive and exact.
    source, target = new_object(data.nbytes), new_object(data.nbytes)
    source.write(data)
    server.http.register_system_shared_memory("in", source.key, data.nbytes)
    server.http.register_system_shared_memory("out", target.key, data.nbytes)
    assert post_infer(server, inputs, outputs).status_code == 200
    assert_same_bits(target.read(data.dtype, data.shape), expected)


def test_an_unregister_during_a_request_leaves_the_request_whole(new_object: Any) -> None:
    """The request's views keep the mapping: the region is unmapped when the last goes."""
    regions = Regions(Settings())
    data = np.arange(64, dtype=np.float64)
    region = new_object(data.nbytes)
    region.write(data)
    regions.register("r", region.key, 0, data.nbytes)
    shared = SharedTensors(regions)
    parameters = {"shared_memory_region": "r", "shared_memory_byte_size": data.nbytes}
    array = shared.input("data", parameters, [64], "FP64", None)
    assert array is not None
    regions.unregister("r")
    assert len(regions) == 0
    # Still mapped, still the client's bytes: the request runs to its end.
    region.write(data[::-1].copy())
    assert_same_bits(array, data[::-1])
    with pytest.raises(ServiceError, match="no system shared memory region 'r'"):
        SharedTensors(regions).input("data", parameters, [64], "FP64", None)


def test_an_unregister_while_requests_run_over_http(server: Server, new_object: Any) -> None:
    """Requests and unregisters racing: each request either is refused (its region gone
    before it was read) or answers the right bytes, never anything else."""
    data = np.arange(4 << 20, dtype=np.float32)
    region = new_object(2 * data.nbytes)
    region.write(data)
    inputs = roll_inputs({"shared_memory_region": "r", "shared_memory_byte_size": data.nbytes})
    inputs[0]["shape"] = [data.size]
    output = {
        "name": "output",
        "parameters": {
            "shared_memory_region": "r",
            "shared_memory_byte_size": data.nbytes,
            "shared_memory_offset": data.nbytes,
        },
    }
    answered = 0
    for _ in range(5):
        server.http.register_system_shared_memory("r", region.key, region.size)
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(post_infer, server, inputs, [output])
            server.http.unregister_system_shared_memory("r")
            response = running.result()
        if response.status_code == 200:
            answered += 1
            got = region.read(data.dtype, data.shape, offset=data.nbytes)
            assert_same_bits(got, np.roll(data, 1))
            region.write(np.zeros(data.size, np.float32), offset=data.nbytes)
        else:
            assert "no system shared memory region 'r'" in response.json()["error"]


# ------------------------------------------------------------------------------------------------
# Settings and keys


def test_registration_is_refused_with_several_workers(new_object: Any) -> None:
    region = new_object(16)
    with pytest.raises(ServiceError, match="TENSOR_OPS_WORKERS=1"):
        Regions(Settings(workers=2)).register("r", region.key, 0, 16)


@pytest.fixture
async def off_client() -> Any:
    app = create_app(Settings(shared_memory="off"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.mark.anyio
async def test_off_refuses_the_routes_and_the_parameters(off_client: httpx.AsyncClient) -> None:
    for method, path in (
        ("POST", "/v2/systemsharedmemory/region/r/register"),
        ("POST", "/v2/systemsharedmemory/unregister"),
        ("GET", "/v2/systemsharedmemory/status"),
    ):
        response = await off_client.request(method, path, json={"key": "/k", "byte_size": 4})
        assert response.status_code == 400
        assert (
            "system shared memory is off here (TENSOR_OPS_SHARED_MEMORY=off)"
            in (response.json()["error"])
        )
    inputs = roll_inputs({"shared_memory_region": "r", "shared_memory_byte_size": 16})
    response = await off_client.post("/v2/models/roll/infer", json={"inputs": inputs})
    assert response.status_code == 400
    assert "which is not supported here" in response.json()["error"]


@pytest.mark.anyio
async def test_registration_needs_a_key_when_keys_are_on(tmp_path: Path, new_object: Any) -> None:
    key = "shared-memory-test-key"
    path = tmp_path / "keys"
    path.write_text(f"{hashlib.sha256(key.encode()).hexdigest()} tests\n")
    region = new_object(16)
    app = create_app(Settings(api_keys_file=path))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        url = "/v2/systemsharedmemory/region/r/register"
        body = {"key": region.key, "byte_size": 16}
        response = await client.post(url, json=body)
        assert response.status_code == 401
        assert (await client.get("/v2/systemsharedmemory/status")).status_code == 401
        headers = {"authorization": f"Bearer {key}"}
        assert (await client.post(url, json=body, headers=headers)).status_code == 200
        status = await client.get("/v2/systemsharedmemory/status", headers=headers)
        assert status.json() == [{"name": "r", "key": region.key, "offset": 0, "byte_size": 16}]


# ------------------------------------------------------------------------------------------------
# The project's own client


@pytest.mark.parametrize("transport", ["v2", "grpc"])
def test_the_client_passes_tensors_through_shared_memory(server: Server, transport: Any) -> None:
    before = set(os.listdir(SHM_DIR))
    with TensorOpsClient(
        server.url, transport=transport, grpc_target=server.grpc_target, shared_memory=True
    ) as client:
        data = sample("BF16", (3, 5), finite=False, seed=1)
        assert_same_bits(client.roll(data, 2, 1), roll(data, np.array(2), np.array(1)))
        values = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
        indices = np.array([[2, 0], [1, 1]])
        assert_same_bits(
            client.gather(values, indices, 2, batch_dims=1),
            gather(values, indices, np.array(2), 1),
        )
    # Every object the client made removed (Python's SharedMemory names its own psm_...;
    # tests running beside this one in other workers make and remove objects of their own).
    assert not {name for name in set(os.listdir(SHM_DIR)) - before if name.startswith("psm_")}
    assert server.http.get_system_shared_memory_status() == []  # and unregistered


def test_the_client_wants_a_v2_transport() -> None:
    with pytest.raises(ValueError, match="shared_memory=True needs transport 'v2' or 'grpc'"):
        TensorOpsClient("http://127.0.0.1:1", shared_memory=True)
