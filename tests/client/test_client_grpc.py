"""tensor_ops_client with ``transport="grpc"``: KServe V2 ``ModelInfer`` against a real server's
gRPC port, sync and async clients and the CLI; its gRPC statuses as ``TensorOpsError``; and the
package without grpcio (a subprocess in which ``import grpc`` fails)."""

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import numpy as np
import numpy.typing as npt
import pytest

from app.errors import Fault
from app.grpc.status import CODES
from app.ops import gather, roll
from tensor_ops_client import AsyncTensorOpsClient, TensorOpsClient, TensorOpsError, main
from tensor_ops_client._grpc import rpc_failure
from tensor_ops_wire.errors import FAULT_STATUS
from tests.support import (
    DTYPES,
    ROOT,
    SPEC_VIOLATIONS,
    assert_same_bits,
    free_port,
    launch_server,
    refused_call,
    sample,
    stop_server,
)

pytestmark = pytest.mark.e2e

Array = npt.NDArray[Any]
BFLOAT16 = DTYPES["BF16"]
INSTALL = "pip install 'tensor-ops-client[grpc]'"


class Server:
    """A live server: its HTTP URL and its gRPC target."""

    def __init__(self, url: str, target: str) -> None:
        self.url = url
        self.target = target


def serve(env: dict[str, str] | None = None) -> tuple[Server, Any]:
    port = free_port()
    url, process = launch_server(env={**(env or {}), "TENSOR_OPS_GRPC_PORT": str(port)})
    return Server(url, f"127.0.0.1:{port}"), process


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    live, process = serve()
    yield live
    stop_server(process)


@pytest.fixture(scope="module")
def small_server() -> Iterator[Server]:
    """A server that takes messages and produces outputs of at most 4 KiB."""
    live, process = serve(
        {"TENSOR_OPS_MAX_BODY_BYTES": "4096", "TENSOR_OPS_MAX_OUTPUT_BYTES": "4096"}
    )
    yield live
    stop_server(process)


@pytest.fixture(scope="module")
def tops(server: Server) -> Iterator[TensorOpsClient]:
    with TensorOpsClient(server.url, transport="grpc", grpc_target=server.target) as client:
        assert client.transport == "grpc"
        yield client


def closed_target() -> str:
    return f"127.0.0.1:{free_port()}"


def roll_case(dtype: str) -> tuple[Array, Array, Array]:
    return (
        sample(dtype, (3, 4, 5), finite=False, seed=1),
        np.array([2, -1, 7], dtype=np.int64),
        np.array([0, 2, -2], dtype=np.int32),
    )


def gather_case(dtype: str) -> tuple[Array, Array, Array]:
    # Axis 1 has length 6: 6 and -7 are out of range and give zeros.
    return (
        sample(dtype, (4, 6), finite=False, seed=2),
        np.array([[5, -1], [-7, 6], [0, -6]], dtype=np.int32),
        np.array(1, dtype=np.int64),
    )


# --- The gRPC target ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8001"),
        ("http://gpu-box:9000/", "gpu-box:8001"),
        ("https://tensor-ops.example", "tensor-ops.example:8001"),
        ("http://[::1]:8000", "[::1]:8001"),
    ],
)
def test_default_target_is_the_url_host_on_port_8001(url: str, target: str) -> None:
    # A channel connects on its first call: none is made here.
    with TensorOpsClient(url, transport="grpc") as client:
        assert client.grpc_target == target
    assert AsyncTensorOpsClient(url, transport="grpc").grpc_target == target
    with TensorOpsClient(url, transport="grpc", grpc_target="elsewhere:1234") as client:
        assert client.grpc_target == "elsewhere:1234"


def test_default_target_of_a_given_http_client() -> None:
    with httpx.Client(base_url="http://box:8000") as http:
        assert TensorOpsClient(http=http, transport="grpc").grpc_target == "box:8001"
    with httpx.Client() as http, pytest.raises(ValueError, match="grpc_target='host:port'"):
        TensorOpsClient(http=http, transport="grpc")
    with httpx.Client() as http:  # the HTTP transports never need one
        assert TensorOpsClient(http=http).grpc_target is None


@pytest.mark.parametrize("target", ["http://box:8001", "grpc://box:8001"])
def test_a_url_is_not_a_target(target: str) -> None:
    with pytest.raises(ValueError, match="grpc_target is host:port, not a URL"):
        TensorOpsClient(transport="grpc", grpc_target=target)
    with pytest.raises(ValueError, match="grpc_target is host:port, not a URL"):
        AsyncTensorOpsClient(transport="grpc", grpc_target=target)


# --- The sync client ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_roll_every_type(tops: TensorOpsClient, dtype: str) -> None:
    data, shift, axes = roll_case(dtype)
    output = tops.roll(data, shift, axes)
    assert output.dtype == DTYPES[dtype]
    assert_same_bits(output, roll(data, shift, axes))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_gather_every_type(tops: TensorOpsClient, dtype: str) -> None:
    data, indices, axis = gather_case(dtype)
    output = tops.gather(data, indices, axis)
    assert output.dtype == DTYPES[dtype]
    assert_same_bits(output, gather(data, indices, axis))
    assert not output[:, 1].any()  # indices -7 and 6: zeros


@pytest.mark.parametrize(
    ("op", "arrays", "batch_dims"),
    [
        pytest.param("roll", {"data": np.int16(-5), "shift": 1, "axes": 0}, 0, id="roll-scalar"),
        pytest.param(
            "roll",
            {"data": np.array(2.5, BFLOAT16), "shift": [3], "axes": [-1]},
            0,
            id="roll-bf16-scalar",
        ),
        pytest.param(
            "roll",
            {"data": np.zeros((0, 4), np.float16), "shift": 1, "axes": 1},
            0,
            id="roll-empty",
        ),
        pytest.param(
            "roll",
            {
                "data": sample("UINT16", (3, 2), finite=True, seed=3),
                "shift": np.array([], np.int32),
                "axes": np.array([], np.int32),
            },
            0,
            id="roll-no-axes",
        ),
        pytest.param(
            "gather",
            {
                "data": sample("FP64", (3, 4), finite=False, seed=4),
                "indices": np.zeros((2, 0), np.int64),
                "axis": 0,
            },
            0,
            id="gather-empty-indices",
        ),
        pytest.param(
            "gather",
            {"data": np.zeros((2, 0), np.uint32), "indices": [0, -1, 3], "axis": 1},
            0,
            id="gather-empty-axis",
        ),
        pytest.param(
            "gather",
            {
                "data": sample("INT64", (2, 5), finite=True, seed=5),
                "indices": [[0, -1, 4], [5, -5, -6]],
                "axis": 1,
            },
            1,
            id="batch-dims-1",
        ),
        pytest.param(
            "gather",
            {
                "data": sample("BF16", (2, 3, 4), finite=False, seed=6),
                "indices": [[3, -4, 0], [4, -5, -1]],
                "axis": -1,
            },
            -1,
            id="batch-dims-negative",
        ),
        pytest.param(
            "gather",
            {
                "data": sample("BOOL", (2, 3, 4), finite=True, seed=7),
                "indices": np.array([[[1], [-1], [2]], [[0], [9], [-4]]], np.int8),
                "axis": np.array([2], np.int16),
            },
            2,
            id="batch-dims-2",
        ),
    ],
)
def test_scalars_empty_tensors_and_batch_dims(
    tops: TensorOpsClient, op: str, arrays: dict[str, Any], batch_dims: int
) -> None:
    if op == "roll":
        output = tops.roll(arrays["data"], arrays["shift"], arrays["axes"])
        expected = roll(arrays["data"], arrays["shift"], arrays["axes"])
    else:
        output = tops.gather(arrays["data"], arrays["indices"], arrays["axis"], batch_dims)
        expected = gather(arrays["data"], arrays["indices"], arrays["axis"], batch_dims)
    assert_same_bits(output, expected)


def test_output_is_a_read_only_view(tops: TensorOpsClient) -> None:
    output = tops.roll(np.arange(6, dtype=np.float32), 1, 0)
    assert output.tolist() == [5, 0, 1, 2, 3, 4]
    assert not output.flags.writeable
    copy = output.copy()
    copy += 1
    assert copy.tolist() == [6, 1, 2, 3, 4, 5]


def test_inputs_in_any_layout(tops: TensorOpsClient) -> None:
    big_endian = np.arange(12, dtype=">f8").reshape(3, 4)
    output = tops.roll(big_endian, 1, 1)
    assert output.tolist() == np.roll(big_endian, 1, 1).tolist()
    assert_same_bits(output, roll(big_endian, 1, 1))
    transposed = sample("INT16", (4, 6), finite=True, seed=8).T[::2]
    assert_same_bits(tops.roll(transposed, -1, 0), roll(transposed, -1, 0))
    assert_same_bits(tops.gather(transposed, [1, 0], 1), gather(transposed, [1, 0], 1))
    indices = np.array([2, 0], dtype=">i4")
    assert_same_bits(tops.gather(transposed, indices, 1), gather(transposed, indices, 1))
    assert tops.gather([[1, 2, 3], [4, 5, 6]], [[1, 1]], 0).tolist() == [[[4, 5, 6], [4, 5, 6]]]


def test_larger_than_grpc_default_message_size(tops: TensorOpsClient) -> None:
    # 16 MiB each way: past gRPC's default 4 MiB receive limit, on both sides.
    data = sample("FP32", (4096, 1024), finite=False, seed=9)
    assert_same_bits(tops.roll(data, [1, -3], [0, 1]), roll(data, [1, -3], [0, 1]))


def test_calls_from_threads_share_one_client(tops: TensorOpsClient) -> None:
    data = sample("INT32", (5, 7), finite=True, seed=10)
    with ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(lambda shift: tops.roll(data, shift, 1), range(-8, 8)))
    for shift, output in zip(range(-8, 8), outputs, strict=True):
        assert_same_bits(output, roll(data, shift, 1))


def test_transport_may_change_after_construction(server: Server) -> None:
    with TensorOpsClient(server.url, grpc_target=server.target) as client:
        assert client.roll([1, 2, 3], 1, 0).flags.writeable  # npz
        client.transport = "grpc"
        output = client.roll([1, 2, 3], 1, 0)
        assert output.tolist() == [3, 1, 2]
        assert not output.flags.writeable


@pytest.mark.parametrize(("op", "arrays", "batch_dims", "field", "words"), SPEC_VIOLATIONS)
def test_refusals_raise_tensor_ops_error(
    tops: TensorOpsClient,
    op: str,
    arrays: dict[str, Any],
    batch_dims: int,
    field: str,
    words: str,
) -> None:
    with pytest.raises(TensorOpsError) as caught:
        refused_call(tops, op, arrays, batch_dims)
    error = caught.value
    assert error.status == 422
    assert error.message.startswith(f"{field}: ")
    assert words in error.message
    assert str(error) == f"[422] {error.message}"
    assert error.detail["grpc_code"] == "INVALID_ARGUMENT"
    assert error.detail["fault"] in ("spec_violation", "tensor_type")
    assert error.detail["request_id"]
    assert error.detail["retry_after"] is None
    assert isinstance(error.__cause__, grpc.RpcError)


def test_same_message_as_http(server: Server, tops: TensorOpsClient) -> None:
    with TensorOpsClient(server.url) as http, pytest.raises(TensorOpsError) as over_http:
        http.roll(np.zeros((2, 3)), 1, 2)
    with pytest.raises(TensorOpsError) as over_grpc:
        tops.roll(np.zeros((2, 3)), 1, 2)
    assert str(over_grpc.value) == str(over_http.value)
    assert str(over_grpc.value) == (
        "[422] axes: axes = 2 is out of range for data of rank 2 (allowed values: [-2, 1])"
    )


def test_unsupported_element_type_is_refused_before_sending(tops: TensorOpsClient) -> None:
    with pytest.raises(TensorOpsError) as caught:
        tops.gather(np.zeros(2), np.zeros(1, np.complex64), 0)
    assert caught.value.status == 422
    assert caught.value.message.startswith("indices: element type '<c8' (complex64)")
    assert caught.value.detail == {
        "grpc_code": None,
        "fault": "tensor_type",
        "request_id": None,
        "retry_after": None,
    }


def test_limits_give_413(small_server: Server) -> None:
    with TensorOpsClient(transport="grpc", grpc_target=small_server.target) as client:
        assert client.roll(np.arange(100, dtype=np.int64), 1, 0)[0] == 99
        # Over the message limit: refused by gRPC itself, without the service's fault kind.
        with pytest.raises(TensorOpsError) as caught:
            client.roll(np.zeros(8192, np.uint8), 1, 0)
        assert caught.value.status == 413
        assert caught.value.detail["grpc_code"] == "RESOURCE_EXHAUSTED"
        assert caught.value.detail["fault"] is None
        # A small message whose output is 100 x 100 float64 = 80,000 bytes: the service's own.
        with pytest.raises(TensorOpsError) as caught:
            client.gather(np.zeros((1, 100)), np.zeros(100, np.int8), 0)
        assert caught.value.status == 413
        assert "the output would be 80000 bytes" in caught.value.message
        assert "TENSOR_OPS_MAX_OUTPUT_BYTES" in caught.value.message
        assert caught.value.detail["grpc_code"] == "RESOURCE_EXHAUSTED"
        assert caught.value.detail["fault"] == "too_large"


def test_unreachable_service_is_status_0() -> None:
    with (
        TensorOpsClient(transport="grpc", grpc_target=closed_target(), timeout=5) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        client.roll([1, 2], 1, 0)
    assert caught.value.status == 0
    assert caught.value.message.startswith("cannot reach the service at 127.0.0.1:")
    assert caught.value.detail["grpc_code"] == "UNAVAILABLE"
    assert isinstance(caught.value.__cause__, grpc.RpcError)


def test_timeout_is_the_deadline(server: Server) -> None:
    with (
        TensorOpsClient(transport="grpc", grpc_target=server.target, timeout=1e-6) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        client.roll(np.zeros(1 << 20), 1, 0)
    assert caught.value.status == 0
    assert caught.value.message.startswith("no answer within the timeout of 1e-06 s: ")
    assert caught.value.detail["grpc_code"] == "DEADLINE_EXCEEDED"


# --- gRPC statuses as TensorOpsError -----------------------------------------------------------


class FakeRpcError(grpc.RpcError):
    """What a sync call raises: a code, details and trailing metadata."""

    def __init__(
        self, code: grpc.StatusCode, details: str, metadata: tuple[tuple[str, Any], ...] = ()
    ) -> None:
        super().__init__(details)
        self._code = code
        self._details = details
        self._metadata = metadata

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._metadata


def test_fault_table_is_the_services() -> None:
    assert {fault.value: fault.status for fault in Fault} == FAULT_STATUS
    for fault in Fault:
        error = FakeRpcError(CODES[fault], "words", (("tensor-ops-fault", fault.value),))
        mapped = rpc_failure(error, 120)
        assert (mapped.status, mapped.message) == (fault.status, "words"), fault
        assert mapped.detail["fault"] == fault.value


@pytest.mark.parametrize(
    ("code", "metadata", "status", "message"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, (), 400, "m"),
        (grpc.StatusCode.NOT_FOUND, (), 404, "m"),
        (grpc.StatusCode.UNAUTHENTICATED, (), 401, "m"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, (), 413, "m"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, (("retry-after", "1"),), 503, "m"),
        (grpc.StatusCode.UNIMPLEMENTED, (), 501, "m"),
        (grpc.StatusCode.INTERNAL, (), 500, "m"),
        (grpc.StatusCode.UNKNOWN, (), 500, "m"),
        (grpc.StatusCode.UNAVAILABLE, (), 0, "cannot reach the service: m"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, (), 0, "no answer within the timeout of 2.5 s: m"),
        (grpc.StatusCode.CANCELLED, (), 0, "the call was cancelled: m"),
        # With the service's fault kind, that decides.
        (grpc.StatusCode.UNAVAILABLE, (("tensor-ops-fault", "shutting_down"),), 503, "m"),
        (grpc.StatusCode.UNIMPLEMENTED, (("tensor-ops-fault", "not_offered"),), 400, "m"),
        (grpc.StatusCode.INVALID_ARGUMENT, (("tensor-ops-fault", "tensor_decode"),), 400, "m"),
        (grpc.StatusCode.INVALID_ARGUMENT, (("tensor-ops-fault", "missing"),), 422, "m"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, (("tensor-ops-fault", "too_large"),), 413, "m"),
        # A kind this client does not know: the code decides.
        (grpc.StatusCode.INVALID_ARGUMENT, (("tensor-ops-fault", "new_kind"),), 400, "m"),
    ],
)
def test_codes_become_http_statuses(
    code: grpc.StatusCode, metadata: tuple[tuple[str, str], ...], status: int, message: str
) -> None:
    mapped = rpc_failure(FakeRpcError(code, "m", metadata), 2.5)
    assert (mapped.status, mapped.message) == (status, message)
    assert mapped.detail["grpc_code"] == code.name


def test_busy_service_with_async_metadata() -> None:
    # grpc.aio's error and Metadata: the same reading; binary values are decoded.
    trailing = grpc.aio.Metadata(
        ("tensor-ops-fault", "busy"),
        ("Retry-After", "2"),
        ("x-request-id", "abc"),
        ("extra-bin", b"\xff"),
    )
    error = grpc.aio.AioRpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.aio.Metadata(),
        trailing,
        details="the memory budget is busy",
    )
    mapped = rpc_failure(error, None)
    assert mapped.status == 503
    assert mapped.message == "the memory budget is busy"
    assert mapped.detail == {
        "grpc_code": "RESOURCE_EXHAUSTED",
        "fault": "busy",
        "request_id": "abc",
        "retry_after": "2",
    }
    assert rpc_failure(FakeRpcError(grpc.StatusCode.ABORTED, ""), None).message == "ABORTED"


# --- The async client --------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("dtype", list(DTYPES))
async def test_async_every_type(server: Server, dtype: str) -> None:
    async with AsyncTensorOpsClient(
        server.url, transport="grpc", grpc_target=server.target
    ) as client:
        assert client.transport == "grpc"
        data, shift, axes = roll_case(dtype)
        assert_same_bits(await client.roll(data, shift, axes), roll(data, shift, axes))
        data, indices, axis = gather_case(dtype)
        assert_same_bits(await client.gather(data, indices, axis), gather(data, indices, axis))


@pytest.mark.anyio
async def test_async_concurrent_calls(server: Server) -> None:
    data = sample("FP64", (2, 3, 4), finite=False, seed=11)
    indices = np.array([[-1, 3, 0], [4, -4, 2]], dtype=np.int64)
    async with AsyncTensorOpsClient(transport="grpc", grpc_target=server.target) as client:
        outputs = await asyncio.gather(
            *(client.roll(data, shift, -1) for shift in range(-8, 8)),
            client.gather(data, indices, 2, batch_dims=1),
            client.gather(data[:, :0], [0], 1),
        )
    for shift, output in zip(range(-8, 8), outputs, strict=False):
        assert_same_bits(output, roll(data, shift, -1))
    assert_same_bits(outputs[16], gather(data, indices, 2, 1))
    assert outputs[17].shape == (2, 1, 4)
    assert not outputs[17].any()


@pytest.mark.anyio
@pytest.mark.parametrize(("op", "arrays", "batch_dims", "field", "words"), SPEC_VIOLATIONS)
async def test_async_refusals(
    server: Server, op: str, arrays: dict[str, Any], batch_dims: int, field: str, words: str
) -> None:
    async with AsyncTensorOpsClient(transport="grpc", grpc_target=server.target) as client:
        with pytest.raises(TensorOpsError) as caught:
            if op == "roll":
                await client.roll(arrays["data"], arrays["shift"], arrays["axes"])
            else:
                await client.gather(arrays["data"], arrays["indices"], arrays["axis"], batch_dims)
    assert caught.value.status == 422
    assert caught.value.message.startswith(f"{field}: ")
    assert words in caught.value.message
    assert caught.value.detail["grpc_code"] == "INVALID_ARGUMENT"


@pytest.mark.anyio
async def test_async_limits_and_unreachable(small_server: Server) -> None:
    async with AsyncTensorOpsClient(transport="grpc", grpc_target=small_server.target) as client:
        with pytest.raises(TensorOpsError) as caught:
            await client.gather(np.zeros((1, 100)), np.zeros(100, np.int8), 0)
        assert caught.value.status == 413
        assert "TENSOR_OPS_MAX_OUTPUT_BYTES" in caught.value.message
    async with AsyncTensorOpsClient(transport="grpc", grpc_target=closed_target()) as client:
        with pytest.raises(TensorOpsError) as caught:
            await client.roll([1, 2], 1, 0)
        assert caught.value.status == 0
        assert caught.value.message.startswith("cannot reach the service at ")


# --- The command line --------------------------------------------------------------------------


def save(path: Path, array: Array) -> str:
    np.save(path, array)
    return str(path)


def load(path: Path) -> Array:
    array: Array = np.load(path, allow_pickle=False)
    return array


def cli(server: Server, *argv: str) -> list[str]:
    return ["--url", server.url, "--transport", "grpc", "--grpc-target", server.target, *argv]


def test_cli_roll_and_gather(server: Server, tmp_path: Path) -> None:
    data = sample("INT64", (3, 4), finite=True, seed=12)
    source = save(tmp_path / "in.npy", data)
    out = tmp_path / "out.npy"
    assert (
        main(cli(server, "roll", source, "--shift", "1", "-2", "--axes", "0", "1", "-o", str(out)))
        == 0
    )
    assert_same_bits(load(out), roll(data, [1, -2], [0, 1]))
    indices = np.array([[1, -1], [4, 0], [0, 3]], dtype=np.int8)
    index_file = save(tmp_path / "idx.npy", indices)
    argv = cli(
        server, "gather", source, "--indices", index_file, "--axis", "1", "--batch-dims", "1"
    )
    assert main([*argv, "-o", str(out)]) == 0
    assert_same_bits(load(out), gather(data, indices, 1, 1))


def test_cli_bfloat16(server: Server, tmp_path: Path) -> None:
    data = sample("BF16", (2, 5), finite=False, seed=13)
    source = save(tmp_path / "in.npy", data.view(np.uint16))
    out = tmp_path / "out.npy"
    argv = cli(server, "roll", source, "--shift", "3", "--axes", "-1", "--dtype", "bfloat16")
    assert main([*argv, "-o", str(out)]) == 0
    output = load(out)
    assert output.dtype == np.uint16
    assert_same_bits(output.view(BFLOAT16), roll(data, 3, -1))


def test_cli_refusal_exits_3_with_the_message(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = save(tmp_path / "in.npy", np.zeros((2, 3), np.float32))
    out = tmp_path / "out.npy"
    assert main(cli(server, "roll", source, "--shift", "1", "--axes", "2", "-o", str(out))) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    first, second = captured.err.splitlines()
    assert first == (
        "tensor-ops: [422 spec_violation] axes: axes = 2 is out of range for data of rank 2 "
        "(allowed values: [-2, 1])"
    )
    assert second.startswith("tensor-ops: request id ")
    assert not out.exists()
    unreachable = Server(server.url, closed_target())
    argv = cli(unreachable, "gather", source, "--indices", "0", "--axis", "0")
    assert main(["--no-retry", *argv]) == 4
    assert capsys.readouterr().err.startswith("tensor-ops: cannot reach the service at ")


def test_cli_grpc_target_needs_grpc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = save(tmp_path / "in.npy", np.zeros(3, np.float32))
    with pytest.raises(SystemExit) as caught:
        main(["--grpc-target", "box:8001", "roll", source, "--shift", "1", "--axes", "0"])
    assert caught.value.code == 2
    assert "--grpc-target is for --transport grpc" in capsys.readouterr().err
    argv = ["--transport", "grpc", "--grpc-target", "http://box:8001", "roll", source]
    assert main([*argv, "--shift", "1", "--axes", "0"]) == 2
    assert capsys.readouterr().err == (
        "tensor-ops: grpc_target is host:port, not a URL: got 'http://box:8001'\n"
    )


# --- Without grpcio ----------------------------------------------------------------------------

#: Run in a fresh interpreter: the modules named in argv[3:] cannot be imported (None in
#: sys.modules), then the client is used over HTTP at argv[1], and asked for gRPC (the command
#: line on the .npy file argv[2] too).
WITHOUT = textwrap.dedent(
    """
    import asyncio, contextlib, sys
    for name in sys.argv[3:]:
        sys.modules[name] = None
    import numpy as np
    import tensor_ops_client
    from tensor_ops_client import AsyncTensorOpsClient, TensorOpsClient, main

    url = sys.argv[1]
    with TensorOpsClient(url, transport="json") as client:
        assert client.roll(np.arange(4, dtype=np.uint8), 1, 0).tolist() == [3, 0, 1, 2]
    with TensorOpsClient(url) as client:
        assert client.gather([[1, 2], [3, 4]], [1], 1).tolist() == [[2], [4]]
    for make in (TensorOpsClient, AsyncTensorOpsClient):
        try:
            make(url, transport="grpc")
        except ImportError as error:
            print("ImportError:", error)
        else:
            raise AssertionError("no ImportError")
    with contextlib.redirect_stderr(sys.stdout):
        status = main(["--url", url, "--transport", "grpc", "roll", sys.argv[2], "--shift", "1",
                       "--axes", "0"])
    print("exit status", status)
    assert "app" not in sys.modules
    """
)


@pytest.mark.parametrize(
    "missing",
    [["grpc"], ["google.protobuf"], ["grpc", "google", "google.protobuf"]],
    ids=["no-grpcio", "no-protobuf", "neither"],
)
def test_without_grpcio(server: Server, tmp_path: Path, missing: list[str]) -> None:
    source = save(tmp_path / "in.npy", np.zeros(3, np.float32))
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT, server.url, source, *missing],
        capture_output=True,
        timeout=60,
        check=False,
        cwd=ROOT / "client",  # not the checkout's root: no `app` to import by accident
    )
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 4, lines
    for line in lines[:3]:
        assert INSTALL in line
    assert lines[0].startswith("ImportError: transport='grpc' needs grpcio and protobuf: ")
    # The command line: a usage error (exit status 2), with the install hint.
    assert lines[2].startswith("tensor-ops: transport='grpc' needs grpcio")
    assert lines[3] == "exit status 2"


def test_grpc_is_imported_only_when_used() -> None:
    code = (
        "import sys, tensor_ops_client, tensor_ops_client.cli\n"
        "assert 'grpc' not in sys.modules, 'grpc'\n"
        "assert 'google.protobuf' not in sys.modules, 'protobuf'\n"
        "tensor_ops_client.TensorOpsClient(transport='grpc', grpc_target='localhost:1').close()\n"
        "assert 'grpc' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        timeout=60,
        check=False,
        cwd=ROOT / "client",
    )
    assert done.returncode == 0, done.stderr.decode()
