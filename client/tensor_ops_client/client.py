"""The sync and async clients of tensor-ops: NumPy arrays in, NumPy arrays out.

Three transports, chosen by ``transport=``:

- ``"npz"`` (the default): an ``.npz`` body to ``POST /roll`` or ``/gather`` over HTTP, the
  output back as raw ``.npy``;
- ``"json"``: the same routes, each tensor a base64 ``.npy`` string in a JSON body;
- ``"grpc"``: KServe V2 ``ModelInfer`` over gRPC (``inference.GRPCInferenceService``), each
  tensor as raw contents. Needs the ``grpc`` extra: ``pip install 'tensor-ops-client[grpc]'``.

The gRPC target: ``grpc_target="host:port"`` when given; else the host of the HTTP URL (``url``,
or the base URL of the ``http`` client given) with port 8001, the service's default
``TENSOR_OPS_GRPC_PORT``. So ``TensorOpsClient("http://gpu-box:8000", transport="grpc")`` calls
``gpu-box:8001``. The channel is plaintext, as the service serves it.

Every failure raises ``TensorOpsError``; its ``status`` is an HTTP status whatever the
transport. Over gRPC it is the status the service gives the same refusal over HTTP, read from
the fault kind the service puts in the trailing metadata (``tensor-ops-fault``: 422 for
``spec_violation``, 400 for ``tensor_decode``...). A status without it (gRPC's own refusal, or
a proxy's) is mapped from its code: INVALID_ARGUMENT, FAILED_PRECONDITION and OUT_OF_RANGE 400,
UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404, ALREADY_EXISTS and ABORTED 409,
RESOURCE_EXHAUSTED 413 (503 with ``retry-after``), UNIMPLEMENTED 501, any other 500. ``detail``
is then ``{"grpc_code", "fault", "request_id", "retry_after"}`` (``grpc_code`` None: refused by
the client before any call, an element type with no V2 datatype say).

Status 0 means no answer came, on any transport: the service could not be reached (over gRPC:
UNAVAILABLE without the service's fault kind) or did not answer within ``timeout`` (over gRPC:
DEADLINE_EXCEEDED; ``timeout`` is each call's deadline).
"""

import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal, Self

import httpx
import numpy as np
import numpy.typing as npt

from tensor_ops_client._errors import TensorOpsError
from tensor_ops_client._grpc import (
    AsyncGrpcModelInfer,
    SyncSlot,
    default_target,
)
from tensor_ops_wire.b64 import b64encode
from tensor_ops_wire.dtypes import BFLOAT16
from tensor_ops_wire.npy import decode_npy, encode_npy
from tensor_ops_wire.npz import encode_npz

Transport = Literal["npz", "json", "grpc"]
DEFAULT_URL = "http://127.0.0.1:8000"

__all__ = ["DEFAULT_URL", "AsyncTensorOpsClient", "TensorOpsClient", "TensorOpsError", "Transport"]


def _json_body(
    tensors: Mapping[str, npt.NDArray[Any]], batch_dims: int | None, bfloat16: bool
) -> bytes:
    """The JSON request with every tensor as a base64 ``.npy`` string.

    The base64 alphabet (A-Z a-z 0-9 + / =) needs no escaping in a JSON string, so the encoded
    files go in as they are: one join, with no JSON encoder passing over them (the standard
    library's takes half a second on a 64 MiB tensor).
    """
    parts: list[bytes] = []
    for name, tensor in tensors.items():
        parts += [b",", json.dumps(name).encode(), b':"', b64encode(encode_npy(tensor).data), b'"']
    if batch_dims is not None:
        parts += [b',"batch_dims":', json.dumps(batch_dims).encode()]
    if bfloat16:
        parts.append(b',"dtype":"bfloat16"')
    parts[0] = b"{"  # the first member's comma (there is always a data member)
    parts.append(b"}")
    return b"".join(parts)


def _request(
    op: str, arrays: Mapping[str, npt.ArrayLike], batch_dims: int | None, transport: Transport
) -> dict[str, Any]:
    """Method, path, body, headers and query of one op call."""
    tensors = {name: np.asarray(value) for name, value in arrays.items()}
    bfloat16 = tensors["data"].dtype == BFLOAT16
    if transport == "npz":
        params: dict[str, Any] = {}
        if batch_dims is not None:
            params["batch_dims"] = batch_dims
        if bfloat16:
            params["dtype"] = "bfloat16"
        return {
            "url": f"/{op}",
            "content": encode_npz(tensors),
            "headers": {"content-type": "application/x-npz", "accept": "application/x-npy"},
            "params": params,
        }
    return {
        "url": f"/{op}",
        "content": _json_body(tensors, batch_dims, bfloat16),
        "headers": {"content-type": "application/json", "accept": "application/x-npy"},
    }


def _failure(status: int, body: bytes) -> TensorOpsError:
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested beyond reason
        return TensorOpsError(status, body[:500].decode("utf-8", "replace") or "no message")
    detail = payload.get("detail") if isinstance(payload, dict) else None
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        messages = []
        for item in detail:
            where = ".".join(str(part) for part in item.get("loc", []) if part != "body")
            messages.append(f"{where}: {item.get('msg')}" if where else str(item.get("msg")))
        return TensorOpsError(status, "; ".join(messages), detail)
    if isinstance(payload, dict) and "error" in payload:
        return TensorOpsError(status, str(payload["error"]), payload)
    return TensorOpsError(status, str(detail if detail is not None else payload), payload)


def _output(body: bytearray, data_dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    array = decode_npy(body)
    # Both ops keep the element type of data; bfloat16 comes back as 2-byte elements.
    return array.view(BFLOAT16) if data_dtype == BFLOAT16 else array


class TensorOpsClient:
    """Calls a tensor-ops service: ``TensorOpsClient(url).roll(data, shift, axes)``.

    Tensors go as an ``.npz`` body and come back as raw ``.npy`` by default (no JSON, no
    base64); ``transport="json"`` sends base64 ``.npy`` in JSON instead, ``transport="grpc"``
    calls KServe V2 ``ModelInfer`` over gRPC. Every failure raises ``TensorOpsError`` with the
    service's status and message.

    ``url`` is the service's HTTP address. ``grpc_target`` is its gRPC address, ``"host:port"``
    (or any target gRPC dials, ``"unix:/path"`` say), for ``transport="grpc"``; by default the
    host of ``url`` (of the base URL of ``http``, when one is given) with port 8001. ``timeout``
    is in seconds: httpx's timeout, and each gRPC call's deadline.

    With ``transport="grpc"`` the output is a read-only view of the received message (no copy);
    ``.copy()`` it to write into it. Without grpcio the constructor raises ``ImportError``
    saying ``pip install 'tensor-ops-client[grpc]'``.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        transport: Transport = "npz",
        timeout: float = 120.0,
        http: httpx.Client | None = None,
        grpc_target: str | None = None,
    ) -> None:
        self.transport = transport
        self.timeout = timeout
        #: Where ``transport="grpc"`` calls (None: no host to default to; give grpc_target).
        self.grpc_target = grpc_target or default_target(
            httpx.URL(url) if http is None else http.base_url
        )
        self._grpc = SyncSlot()
        if transport == "grpc":
            self._grpc.get(self.grpc_target)  # grpcio missing, or no target: said now
        self._http = http or httpx.Client(base_url=url, timeout=timeout)

    def roll(
        self, data: npt.ArrayLike, shift: npt.ArrayLike, axes: npt.ArrayLike
    ) -> npt.NDArray[Any]:
        """Roll-7: ``data`` shifted by ``shift`` along ``axes``."""
        return self._call("roll", {"data": data, "shift": shift, "axes": axes}, None)

    def gather(
        self,
        data: npt.ArrayLike,
        indices: npt.ArrayLike,
        axis: npt.ArrayLike,
        batch_dims: int = 0,
    ) -> npt.NDArray[Any]:
        """Gather-8: the slices of ``data`` along ``axis`` at ``indices``."""
        arrays = {"data": data, "indices": indices, "axis": axis}
        return self._call("gather", arrays, batch_dims)

    def _call(
        self, op: str, arrays: Mapping[str, npt.ArrayLike], batch_dims: int | None
    ) -> npt.NDArray[Any]:
        if self.transport == "grpc":
            infer = self._grpc.get(self.grpc_target)
            return infer(op, arrays, batch_dims, self.timeout)
        request = _request(op, arrays, batch_dims, self.transport)
        try:
            with self._http.stream("POST", **request) as response:
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
        except httpx.HTTPError as error:
            raise TensorOpsError(0, f"cannot reach the service: {error}") from error
        if response.status_code != 200:
            raise _failure(response.status_code, bytes(body))
        return _output(body, np.asarray(arrays["data"]).dtype)

    def close(self) -> None:
        self._http.close()
        self._grpc.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


class AsyncTensorOpsClient:
    """The asynchronous twin of ``TensorOpsClient``: ``await client.roll(...)``.

    Same arguments, same gRPC target rule (``grpc_target``, else the host of ``url`` with port
    8001); the ``grpc.aio`` channel is made on the first call, in the event loop of that call.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        transport: Transport = "npz",
        timeout: float = 120.0,
        http: httpx.AsyncClient | None = None,
        grpc_target: str | None = None,
    ) -> None:
        self.transport = transport
        self.timeout = timeout
        #: Where ``transport="grpc"`` calls (None: no host to default to; give grpc_target).
        self.grpc_target = grpc_target or default_target(
            httpx.URL(url) if http is None else http.base_url
        )
        self._grpc: AsyncGrpcModelInfer | None = None
        if transport == "grpc":
            self._grpc_infer()  # grpcio missing, or no target: said now
        self._http = http or httpx.AsyncClient(base_url=url, timeout=timeout)

    async def roll(
        self, data: npt.ArrayLike, shift: npt.ArrayLike, axes: npt.ArrayLike
    ) -> npt.NDArray[Any]:
        """Roll-7: ``data`` shifted by ``shift`` along ``axes``."""
        return await self._call("roll", {"data": data, "shift": shift, "axes": axes}, None)

    async def gather(
        self,
        data: npt.ArrayLike,
        indices: npt.ArrayLike,
        axis: npt.ArrayLike,
        batch_dims: int = 0,
    ) -> npt.NDArray[Any]:
        """Gather-8: the slices of ``data`` along ``axis`` at ``indices``."""
        arrays = {"data": data, "indices": indices, "axis": axis}
        return await self._call("gather", arrays, batch_dims)

    async def _call(
        self, op: str, arrays: Mapping[str, npt.ArrayLike], batch_dims: int | None
    ) -> npt.NDArray[Any]:
        if self.transport == "grpc":
            return await self._grpc_infer()(op, arrays, batch_dims, self.timeout)
        request = _request(op, arrays, batch_dims, self.transport)
        try:
            async with self._http.stream("POST", **request) as response:
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
        except httpx.HTTPError as error:
            raise TensorOpsError(0, f"cannot reach the service: {error}") from error
        if response.status_code != 200:
            raise _failure(response.status_code, bytes(body))
        return _output(body, np.asarray(arrays["data"]).dtype)

    def _grpc_infer(self) -> AsyncGrpcModelInfer:
        if self._grpc is None:
            self._grpc = AsyncGrpcModelInfer(self.grpc_target)
        return self._grpc

    async def aclose(self) -> None:
        await self._http.aclose()
        if self._grpc is not None:
            await self._grpc.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()
