"""The client's generic call, ``call(op, inputs, attributes)``, against a real server on every
transport (npz, json, v2, grpc), sync and async: Roll-7 and Gather-8 bit for bit as NumPy
computes them (``np.roll``; ``np.take`` with zeros for the indices out of range, as Gather-8
says), an op the service does not have refused with the service's 404, and names no transport
could carry refused before anything is sent."""

import asyncio
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from app.registry import REGISTRY
from tensor_ops_client import TRANSPORTS, AsyncTensorOpsClient, TensorOpsClient, TensorOpsError
from tensor_ops_client import Transport as TransportName
from tests.support import assert_same_bits, free_port, launch_server, stop_server

pytestmark = pytest.mark.e2e

Array = npt.NDArray[Any]
DTYPES = [
    np.dtype(np.bool_),
    np.dtype(np.int8),
    np.dtype(np.uint16),
    np.dtype(np.int64),
    np.dtype(np.float16),
    np.dtype(ml_dtypes.bfloat16),
    np.dtype(np.float32),
    np.dtype(np.float64),
]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, str]]:
    """A server with gRPC on: its URL and its gRPC target."""
    port = free_port()
    url, process = launch_server(env={"TENSOR_OPS_GRPC_PORT": str(port)})
    yield url, f"127.0.0.1:{port}"
    stop_server(process)


def client(server: tuple[str, str], transport: TransportName) -> TensorOpsClient:
    url, target = server
    return TensorOpsClient(url, transport=transport, grpc_target=target, retry=False)


def random_bits(dtype: np.dtype[Any], shape: tuple[int, ...], seed: int) -> Array:
    """Random bits of ``dtype`` (NaNs with payloads, -0.0 and all), 0 or 1 for bool."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    if dtype.kind == "b":
        return rng.integers(0, 2, size).astype(np.bool_).reshape(shape)
    raw = rng.integers(0, 256, size * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def take_or_zero(data: Array, indices: Array, axis: int, batch_dims: int = 0) -> Array:
    """Gather-8 by NumPy: ``np.take`` along ``axis``, batch by batch, with a slice of zeros for
    each index outside ``[-data.shape[axis], data.shape[axis] - 1]``."""
    if batch_dims:
        batches = [
            take_or_zero(data[batch], indices[batch], axis - batch_dims)
            for batch in np.ndindex(data.shape[:batch_dims])
        ]
        shape = data.shape[:batch_dims] + batches[0].shape
        return np.stack(batches).reshape(shape) if batches else np.zeros(shape, data.dtype)
    size = data.shape[axis]
    wide = indices.astype(np.int64)
    valid = (wide >= -size) & (wide < size)
    taken = np.take(data, np.where(valid, wide, 0), axis=axis)
    mask = valid.reshape((1,) * axis + valid.shape + (1,) * (data.ndim - axis - 1))
    taken[np.broadcast_to(~mask, taken.shape)] = 0
    return taken


# --- Values, every transport -------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=[dtype.name for dtype in DTYPES])
def test_both_ops_bit_exact(
    server: tuple[str, str], transport: TransportName, dtype: np.dtype[Any]
) -> None:
    data = random_bits(dtype, (3, 4, 5), seed=dtype.num)
    with client(server, transport) as tops:
        shift, axes = np.array([2, -1, 7]), np.array([0, 2, -3], dtype=np.int32)
        rolled = tops.call("roll", {"data": data, "shift": shift, "axes": axes})
        assert_same_bits(rolled, np.roll(data, tuple(shift), tuple(axes)))
        # Axis 1 has length 4: -4..3 pick a row, 4 and -5 and 100 are out of range (zeros).
        indices = np.array([[3, -1, 4], [-5, 0, 100]], dtype=np.int16)
        gathered = tops.call("gather", {"data": data, "indices": indices, "axis": 1})
        assert_same_bits(gathered, take_or_zero(data, indices, 1))
        for row, column in ((0, 2), (1, 0), (1, 2)):  # 4, -5, 100: slices of zeros
            assert not gathered[:, row, column].any()
        # An attribute, given by name: three batches, each its own indices.
        batched = np.array([[0, 3], [-1, 9], [2, 2]], dtype=np.int64)
        inputs = {"data": data, "indices": batched, "axis": np.array([1])}
        gathered = tops.call("gather", inputs, {"batch_dims": 1})
        assert_same_bits(gathered, take_or_zero(data, batched, 1, batch_dims=1))
        # The typed methods are the same call.
        assert_same_bits(tops.gather(data, batched, [1], batch_dims=1), gathered)
        assert_same_bits(tops.roll(data, shift, axes), rolled)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_attributes_left_out_take_the_defaults(
    server: tuple[str, str], transport: TransportName
) -> None:
    data = np.arange(10, dtype=np.int32).reshape(2, 5)
    indices = np.array([[4, 0], [1, -1]])
    with client(server, transport) as tops:
        default = tops.call("gather", {"data": data, "indices": indices, "axis": 1})
        assert_same_bits(default, take_or_zero(data, indices, 1))
        assert_same_bits(default, tops.call("gather", {"data": data, "indices": indices,
                                                       "axis": 1}, {"batch_dims": 0}))  # fmt: skip


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_async_both_ops(server: tuple[str, str], transport: TransportName) -> None:
    url, target = server
    data = random_bits(np.dtype(np.float32), (4, 6), seed=3)
    indices = np.array([5, -6, 6, -7, 0])

    async def main() -> tuple[Array, Array]:
        async with AsyncTensorOpsClient(url, transport=transport, grpc_target=target) as tops:
            return await asyncio.gather(
                tops.call("roll", {"data": data, "shift": [1, -2], "axes": [0, 1]}),
                tops.call("gather", {"data": data, "indices": indices, "axis": -1}),
            )

    rolled, gathered = asyncio.run(main())
    assert_same_bits(rolled, np.roll(data, (1, -2), (0, 1)))
    assert_same_bits(gathered, take_or_zero(data, indices, 1))


# --- Refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_unknown_op_gets_the_services_404(
    server: tuple[str, str], transport: TransportName
) -> None:
    with client(server, transport) as tops, pytest.raises(TensorOpsError) as raised:
        tops.call("frobnicate", {"data": np.zeros(3, np.float32)})
    error = raised.value
    assert (error.status, error.kind) == (404, "not_found"), error
    if transport in ("v2", "grpc"):  # the V2 protocols name the models served
        models = ", ".join(REGISTRY)
        assert f"'frobnicate' is not served here; models: {models}" in error.message
    else:  # the plain routes name the routes there are (tests/http/test_route_hints.py)
        assert error.message.startswith("Not Found: no route POST '/frobnicate'.")
        assert "The routes: POST /roll, POST /gather," in error.message


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_service_checks_inputs_and_attributes(
    server: tuple[str, str], transport: TransportName
) -> None:
    with client(server, transport) as tops:
        with pytest.raises(TensorOpsError) as raised:
            tops.call("gather", {"data": [1, 2], "indices": [0]})
        assert (raised.value.status, raised.value.kind, raised.value.field) == (
            422,
            "missing",
            "axis",
        )
        with pytest.raises(TensorOpsError) as raised:
            tops.call("roll", {"data": [1, 2], "shift": 1, "axes": 0}, {"batch_dims": 0})
        assert (raised.value.status, raised.value.kind, raised.value.field) == (
            422,
            "extra_forbidden",
            "batch_dims",
        )


@pytest.mark.parametrize(
    ("op", "inputs", "attributes", "message"),
    [
        ("../health", {"data": [1]}, {}, "op must be an op's name"),
        ("", {"data": [1]}, {}, "op must be an op's name"),
        ("roll", {"da ta": [1]}, {}, "input names are"),
        ("gather", {"data": [1]}, {"a/b": 1}, "attribute names are"),
        ("gather", {"data": [1]}, {"data": 1}, "is an input's name"),
        ("gather", {"data": [1]}, {"dtype": 1}, "is an input's name"),
    ],
)
def test_names_no_transport_carries_are_refused_before_sending(
    op: str, inputs: dict[str, Any], attributes: dict[str, int], message: str
) -> None:
    # Nothing listens there: a request sent would be status 0.
    for transport in TRANSPORTS:
        with (
            TensorOpsClient(
                f"http://127.0.0.1:{free_port()}", transport=transport, retry=False
            ) as tops,
            pytest.raises(ValueError, match=message),
        ):
            tops.call(op, inputs, attributes)
