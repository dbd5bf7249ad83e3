"""tensor_ops_client against a real server: sync and async clients, both transports, and the CLI."""

import asyncio
import math
import re
from collections.abc import Iterator
from typing import Any

import httpx
import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from app.ops import gather, roll
from tensor_ops_client import AsyncTensorOpsClient, TensorOpsClient, TensorOpsError, Transport
from tests.support import (
    SPEC_VIOLATIONS,
    assert_same_bits,
    free_port,
    launch_server,
    refused_call,
    stop_server,
)

pytestmark = pytest.mark.e2e

Array = npt.NDArray[Any]
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
TRANSPORTS: list[Transport] = ["npz", "json", "v2"]

#: Every element type the service takes.
DTYPES = [
    np.dtype(np.bool_),
    np.dtype(np.int8),
    np.dtype(np.int16),
    np.dtype(np.int32),
    np.dtype(np.int64),
    np.dtype(np.uint8),
    np.dtype(np.uint16),
    np.dtype(np.uint32),
    np.dtype(np.uint64),
    np.dtype(np.float16),
    BFLOAT16,
    np.dtype(np.float32),
    np.dtype(np.float64),
]
DTYPE_IDS = [dtype.name for dtype in DTYPES]
INTEGER_TYPES = [dtype for dtype in DTYPES if dtype.kind in "iu"]

# Float bit patterns set at the start of every float sample, on top of random bits (which hold
# NaNs with all kinds of payloads already): -0.0, a quiet NaN with payload 1, a negative
# signalling NaN with payload 1, +inf.
FLOAT_SPECIALS: dict[str, tuple[int, ...]] = {
    "float16": (0x8000, 0x7E01, 0xFC01, 0x7C00),
    "bfloat16": (0x8000, 0x7FC1, 0xFF81, 0x7F80),
    "float32": (0x8000_0000, 0x7FC0_0001, 0xFF80_0001, 0x7F80_0000),
    "float64": (1 << 63, 0x7FF8_0000_0000_0001, 0xFFF0_0000_0000_0001, 0x7FF0 << 48),
}


def random_tensor(dtype: np.dtype[Any], shape: tuple[int, ...], seed: int = 0) -> Array:
    """Random bits of ``dtype`` (0 or 1 for bool), float specials first."""
    rng = np.random.default_rng(seed)
    size = math.prod(shape)
    flat: Array
    if dtype.kind == "b":
        flat = rng.integers(0, 2, size).astype(np.bool_)
    else:
        flat = rng.integers(0, 256, size * dtype.itemsize, dtype=np.uint8).view(dtype)
        specials = FLOAT_SPECIALS.get(dtype.name, ())[:size]
        flat.view(f"u{dtype.itemsize}")[: len(specials)] = specials
    return flat.reshape(shape)


def roll_case(dtype: np.dtype[Any]) -> tuple[Array, Array, Array]:
    return (
        random_tensor(dtype, (3, 4, 5), seed=1),
        np.array([2, -1, 7], dtype=np.int64),
        np.array([0, 2, -2], dtype=np.int32),
    )


def gather_case(dtype: np.dtype[Any]) -> tuple[Array, Array, Array]:
    # Axis 1 has length 6: -6..5 pick a column, 6 and -7 are out of range and give zeros.
    return (
        random_tensor(dtype, (4, 6), seed=2),
        np.array([[5, -1], [-7, 6], [0, -6]], dtype=np.int32),
        np.array(1, dtype=np.int64),
    )


@pytest.fixture(scope="module", params=TRANSPORTS)
def tops(request: pytest.FixtureRequest, live_url: str) -> Iterator[TensorOpsClient]:
    """A sync client of the live server, once per transport."""
    with TensorOpsClient(live_url, transport=request.param) as client:
        assert client.transport == request.param
        yield client


@pytest.fixture(scope="module")
def small_server() -> Iterator[str]:
    """A server that takes bodies and produces outputs of at most 4 KiB."""
    url, process = launch_server(
        {"TENSOR_OPS_MAX_BODY_BYTES": "4096", "TENSOR_OPS_MAX_OUTPUT_BYTES": "4096"}
    )
    yield url
    stop_server(process)


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


# --- The sync client ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_roll_every_type(tops: TensorOpsClient, dtype: np.dtype[Any]) -> None:
    data, shift, axes = roll_case(dtype)
    output = tops.roll(data, shift, axes)
    assert output.dtype == dtype
    assert_same_bits(output, roll(data, shift, axes))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gather_every_type(tops: TensorOpsClient, dtype: np.dtype[Any]) -> None:
    data, indices, axis = gather_case(dtype)
    output = tops.gather(data, indices, axis)
    assert output.dtype == dtype
    assert_same_bits(output, gather(data, indices, axis))
    assert not output[:, 1].any()  # indices -7 and 6: zeros


def test_values_not_just_bits(tops: TensorOpsClient) -> None:
    data = np.array([[1.5, -0.0, np.inf], [np.nan, 2.0, -3.25]], dtype=np.float32)
    rolled = tops.roll(data, [1, -1], [0, 1])
    assert rolled[0, :2].tolist() == [2.0, -3.25]
    assert np.isnan(rolled[0, 2])
    assert rolled[1].tolist() == [0.0, np.inf, 1.5]
    assert np.signbit(rolled[1, 0])
    gathered = tops.gather(data, [2, -1, 3], 1)
    assert gathered[0].tolist() == [np.inf, np.inf, 0.0]
    bf16 = np.array([1, 2.5, -0.0], dtype=BFLOAT16)
    output = tops.roll(bf16, 1, 0)
    assert output.dtype == BFLOAT16
    assert output.astype(np.float32).tolist() == [0.0, 1.0, 2.5]
    assert np.signbit(output[0])


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
                "data": random_tensor(np.dtype(np.uint16), (3, 2)),
                "shift": np.array([], np.int32),
                "axes": np.array([], np.int32),
            },
            0,
            id="roll-no-axes",
        ),
        pytest.param(
            "gather",
            {"data": random_tensor(np.dtype(np.int8), (3, 4)), "indices": -1, "axis": 1},
            0,
            id="gather-scalar-index",
        ),
        pytest.param(
            "gather",
            {
                "data": random_tensor(np.dtype(np.float64), (3, 4)),
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
                "data": random_tensor(np.dtype(np.int64), (2, 5)),
                "indices": [[0, -1, 4], [5, -5, -6]],
                "axis": 1,
            },
            1,
            id="batch-dims-1",
        ),
        pytest.param(
            "gather",
            {
                "data": random_tensor(BFLOAT16, (2, 3, 4)),
                "indices": [[3, -4, 0], [4, -5, -1]],
                "axis": -1,
            },
            -1,
            id="batch-dims-negative",
        ),
        pytest.param(
            "gather",
            {
                "data": random_tensor(np.dtype(np.float32), (2, 3, 4)),
                "indices": [[[1], [-1], [2]], [[0], [9], [-4]]],
                "axis": 2,
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


def test_gather_empty_axis_gives_zeros(tops: TensorOpsClient) -> None:
    output = tops.gather(np.zeros((2, 0), np.uint32), [0, -1, 3], 1)
    assert output.tolist() == [[0, 0, 0], [0, 0, 0]]


@pytest.mark.parametrize("index_type", INTEGER_TYPES, ids=lambda d: d.name)
def test_indices_and_axis_of_every_integer_type(
    tops: TensorOpsClient, index_type: np.dtype[Any]
) -> None:
    info = np.iinfo(index_type)
    values = [0, 3, int(info.max)] + ([-1, -4, int(info.min)] if info.min else [2**8 - 1])
    if index_type == np.uint64:
        values.append(2**63)  # out of range: a zero slice, not index -2**63
    indices = np.array(values, dtype=index_type)
    data = random_tensor(np.dtype(np.float32), (4, 3), seed=3)
    axis = np.array([0], dtype=index_type)
    output = tops.gather(data, indices, axis)
    assert_same_bits(output, gather(data, indices, axis))


@pytest.mark.parametrize(
    ("shift", "axes"),
    [
        (np.array(1, np.int32), np.array(0, np.int32)),
        (np.array([-2, 5], np.int32), np.array([1, -1], np.int64)),
        (np.array(2**62 + 3, np.int64), np.array([0, 1, 1], np.int32)),
        ([1, 1, 1], [0, 0, 0]),
    ],
    ids=["i32-scalars", "i32-shift-i64-axes", "scalar-shift-repeated-axes", "python-lists"],
)
def test_roll_shift_and_axes_types(tops: TensorOpsClient, shift: Any, axes: Any) -> None:
    data = random_tensor(np.dtype(np.int32), (5, 7), seed=4)
    assert_same_bits(tops.roll(data, shift, axes), roll(data, shift, axes))


def test_inputs_in_any_layout(tops: TensorOpsClient) -> None:
    big_endian = np.arange(12, dtype=">f8").reshape(3, 4)
    output = tops.roll(big_endian, 1, 1)
    assert output.tolist() == np.roll(big_endian, 1, 1).tolist()
    assert_same_bits(output, roll(big_endian, 1, 1))
    transposed = random_tensor(np.dtype(np.int16), (4, 6), seed=5).T[::2]
    assert_same_bits(tops.roll(transposed, -1, 0), roll(transposed, -1, 0))
    assert_same_bits(tops.gather(transposed, [1, 0], 1), gather(transposed, [1, 0], 1))
    nested = [[1, 2, 3], [4, 5, 6]]
    assert tops.gather(nested, [[1, 1]], 0).tolist() == [[[4, 5, 6], [4, 5, 6]]]


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
    # The one error model: the same kind and field whatever the transport.
    assert error.kind in ("spec_violation", "tensor_type")
    assert error.field == field
    if tops.transport != "v2":
        assert error.detail[0]["loc"] == ["body", field]


@pytest.mark.parametrize("field", ["data", "indices", "axis"])
def test_unsupported_element_type_names_the_input(tops: TensorOpsClient, field: str) -> None:
    arrays: dict[str, Any] = {"data": np.zeros(2), "indices": [0], "axis": 0}
    arrays[field] = np.zeros(1, np.complex64)
    with pytest.raises(TensorOpsError) as caught:
        tops.gather(arrays["data"], arrays["indices"], arrays["axis"])
    assert caught.value.status == 422
    # V2 has no datatype for it: the client refuses it before sending, as the service would.
    assert re.search(r"element type '<c8'( \(complex64\))? is not supported", caught.value.message)
    assert caught.value.message.startswith(f"{field}: ")
    assert (caught.value.kind, caught.value.field) == ("tensor_type", field)


def test_an_httpx_client_may_be_given(live_url: str) -> None:
    with httpx.Client(base_url=live_url) as http:
        client = TensorOpsClient(transport="json", http=http)
        assert client.roll(np.arange(4, dtype=np.uint8), 1, 0).tolist() == [3, 0, 1, 2]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_limits_give_413(small_server: str, transport: Transport) -> None:
    with TensorOpsClient(small_server, transport=transport) as client:
        # Within both limits: fine.
        assert client.roll(np.arange(100, dtype=np.int64), 1, 0)[0] == 99
        with pytest.raises(TensorOpsError) as caught:
            client.roll(np.zeros(8192, np.uint8), 1, 0)
        assert caught.value.status == 413
        assert "request body of " in caught.value.message
        assert "TENSOR_OPS_MAX_BODY_BYTES" in caught.value.message
        # A small body whose output is 100 x 100 float64 = 80,000 bytes.
        with pytest.raises(TensorOpsError) as caught:
            client.gather(np.zeros((1, 100)), np.zeros(100, np.int8), 0)
        assert caught.value.status == 413
        assert "the output would be 80000 bytes" in caught.value.message
        assert "TENSOR_OPS_MAX_OUTPUT_BYTES" in caught.value.message


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_unreachable_service_is_status_0(transport: Transport) -> None:
    with (
        TensorOpsClient(closed_port_url(), transport=transport, timeout=5) as client,
        pytest.raises(TensorOpsError) as caught,
    ):
        client.roll([1, 2], 1, 0)
    assert caught.value.status == 0
    assert caught.value.message.startswith("cannot reach the service at http://127.0.0.1:")
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (502, b"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        (503, b"", "no message"),
        (404, b'{"detail": "Not Found"}', "Not Found"),
        (400, b'{"error": "bad header"}', "bad header"),
        (
            422,
            b'{"detail": [{"loc": ["body", "axes"], "msg": "m1"}, {"loc": [], "msg": "m2"}]}',
            "axes: m1; m2",
        ),
    ],
)
def test_failure_bodies_become_messages(status: int, body: bytes, message: str) -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body)

    http = httpx.Client(transport=httpx.MockTransport(reply), base_url="http://service")
    with TensorOpsClient(http=http) as client, pytest.raises(TensorOpsError) as caught:
        client.roll([1], 0, 0)
    assert caught.value.status == status
    assert caught.value.message == message


# --- The async client --------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
async def test_async_every_type(live_url: str, transport: Transport, dtype: np.dtype[Any]) -> None:
    async with AsyncTensorOpsClient(live_url, transport=transport) as client:
        assert client.transport == transport
        data, shift, axes = roll_case(dtype)
        assert_same_bits(await client.roll(data, shift, axes), roll(data, shift, axes))
        data, indices, axis = gather_case(dtype)
        assert_same_bits(await client.gather(data, indices, axis), gather(data, indices, axis))


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_async_concurrent_calls(live_url: str, transport: Transport) -> None:
    data = random_tensor(np.dtype(np.float64), (2, 3, 4), seed=6)
    indices = np.array([[-1, 3, 0], [4, -4, 2]], dtype=np.int64)
    async with AsyncTensorOpsClient(live_url, transport=transport) as client:
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
    live_url: str, op: str, arrays: dict[str, Any], batch_dims: int, field: str, words: str
) -> None:
    async with AsyncTensorOpsClient(live_url, transport="json") as client:
        with pytest.raises(TensorOpsError) as caught:
            if op == "roll":
                await client.roll(arrays["data"], arrays["shift"], arrays["axes"])
            else:
                await client.gather(arrays["data"], arrays["indices"], arrays["axis"], batch_dims)
    assert caught.value.status == 422
    assert caught.value.message.startswith(f"{field}: ")
    assert words in caught.value.message


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_async_limits_and_unreachable(small_server: str, transport: Transport) -> None:
    async with AsyncTensorOpsClient(small_server, transport=transport) as client:
        with pytest.raises(TensorOpsError) as caught:
            await client.gather(np.zeros(8192, np.int8), [0], 0)
        assert caught.value.status == 413
        assert "TENSOR_OPS_MAX_BODY_BYTES" in caught.value.message
    async with AsyncTensorOpsClient(closed_port_url(), transport=transport) as client:
        with pytest.raises(TensorOpsError) as caught:
            await client.roll([1, 2], 1, 0)
        assert caught.value.status == 0
        assert "cannot reach the service" in caught.value.message


# --- Progress ------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_progress_hook_sees_every_mebibyte_both_ways(live_url: str, transport: Transport) -> None:
    events: list[tuple[str, int, int | None]] = []
    data = np.zeros((1024, 1024), np.float32)  # 4 MiB
    with TensorOpsClient(live_url, transport=transport, progress=lambda *e: events.append(e)) as c:
        assert_same_bits(c.roll(data, 1, 0), data)
    for direction in ("upload", "download"):
        seen = [(done, total) for name, done, total in events if name == direction]
        assert len(seen) >= 4, (direction, seen)
        done = [count for count, _ in seen]
        assert done == sorted(done)  # it only grows
        assert seen[-1][0] == seen[-1][1]  # and ends at the whole
        assert seen[-1][0] >= 4 << 20


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_large_body_goes_in_pieces_its_length_declared(
    live_url: str, transport: Transport
) -> None:
    """A body over a MiB is sent in pieces (a view of the array's memory among them) with its
    Content-Length, never chunked: httpcore's write of one large body copies what is left of
    it after every socket send. The service reads the same bytes either way."""
    sent: list[httpx.Request] = []
    hooks = {"request": [sent.append]}
    data = np.arange(3 << 20, dtype=np.float32).reshape(-1, 1024)  # 12 MiB
    http = httpx.Client(base_url=live_url, event_hooks=hooks, timeout=60)
    with TensorOpsClient(http=http, transport=transport) as client:
        assert_same_bits(client.roll(data, 5, 0), np.roll(data, 5, 0))
        verdict = client.verify(
            "roll", {"data": data, "shift": 5, "axes": 0}, {"output": np.roll(data, 5, 0)}
        )
        assert verdict.equal
        wrong = np.roll(data, 5, 0)
        wrong[7, 9] += 1
        verdict = client.verify("roll", {"data": data, "shift": 5, "axes": 0}, {"output": wrong})
        assert not verdict.equal and verdict["output"].mismatches == 1
    assert len(sent) == 3
    for request in sent:
        assert int(request.headers["content-length"]) > 12 << 20
        assert "transfer-encoding" not in request.headers
        assert not isinstance(request.stream, httpx.ByteStream)  # not one bytes object


@pytest.mark.anyio
async def test_async_progress_hook(live_url: str) -> None:
    events: list[tuple[str, int, int | None]] = []
    data = np.ones((512, 1024), np.float64)  # 4 MiB
    async with AsyncTensorOpsClient(live_url, progress=lambda *e: events.append(e)) as client:
        assert_same_bits(await client.roll(data, 1, 1), data)
    assert {name for name, _, _ in events} == {"upload", "download"}
    ends = [(done, total) for _, done, total in events if done == total]
    assert len(ends) == 2 and all(done >= 4 << 20 for done, _ in ends)
