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
``gpu-box:8001``.

API keys and TLS (the service's ``TENSOR_OPS_API_KEYS_FILE`` and ``TENSOR_OPS_TLS_*``):

- ``api_key``: sent as ``Authorization: Bearer <key>`` (gRPC: the ``authorization`` metadata)
  with every call; by default the ``TENSOR_OPS_API_KEY`` environment variable, when set. The
  key is kept out of the client's repr and of every error message.
- An ``https://`` URL is TLS for HTTP and for gRPC alike, as the service serves both from one
  certificate or neither; an ``http://`` URL is plaintext for both. The server's certificate is
  checked: ``verify=True`` (the default) against httpx's roots (certifi's bundle, or
  ``SSL_CERT_FILE``) and gRPC's own, ``verify="ca.pem"`` against that CA bundle, or
  ``verify=`` an ``ssl.SSLContext`` of your own (HTTP only). ``cert=("client.pem",
  "client.key")`` presents a client certificate (mutual TLS, the service's
  ``TENSOR_OPS_TLS_CLIENT_CA_FILE``). Given with an ``http://`` URL, ``verify`` or ``cert`` is
  refused (ValueError) rather than ignored: the calls would not be encrypted. An httpx client
  given as ``http=`` keeps its own TLS settings; ``verify`` and ``cert`` then serve gRPC alone.

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
import os
import ssl
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal, Self

import httpx
import numpy as np
import numpy.typing as npt

from tensor_ops_client._errors import TensorOpsError
from tensor_ops_client._grpc import (
    AsyncGrpcModelInfer,
    ChannelSecurity,
    SyncSlot,
    default_target,
)
from tensor_ops_wire.b64 import b64encode
from tensor_ops_wire.dtypes import BFLOAT16
from tensor_ops_wire.npy import decode_npy, encode_npy
from tensor_ops_wire.npz import encode_npz

Transport = Literal["npz", "json", "grpc"]
DEFAULT_URL = "http://127.0.0.1:8000"
#: The environment variable an API key is read from when none is given.
API_KEY_VARIABLE = "TENSOR_OPS_API_KEY"
#: How the server's certificate is checked: True (the default roots), False (not at all; HTTP
#: only), a CA bundle's path, or an ``ssl.SSLContext`` (HTTP only).
Verify = bool | str | os.PathLike[str] | ssl.SSLContext
#: A client certificate (chain) and its private key, two PEM files.
ClientCert = tuple[str | os.PathLike[str], str | os.PathLike[str]]

__all__ = [
    "API_KEY_VARIABLE",
    "DEFAULT_URL",
    "AsyncTensorOpsClient",
    "ClientCert",
    "TensorOpsClient",
    "TensorOpsError",
    "Transport",
    "Verify",
]


def _api_key(given: str | None) -> str | None:
    """The key to send: the one given, else ``TENSOR_OPS_API_KEY``'s; None for none or ``""``."""
    key = (os.environ.get(API_KEY_VARIABLE, "") if given is None else given).strip()
    # A header value with a space or a control character would be refused by httpx or gRPC
    # with the value quoted in the message: refused here, unquoted.
    if any(not "!" <= character <= "~" for character in key):
        raise ValueError(
            f"api_key (or {API_KEY_VARIABLE}) must be printable ASCII without spaces; "
            "the value is not shown"
        )
    return key or None


def _tls_check(url: httpx.URL, verify: Verify, cert: ClientCert | None) -> bool:
    """Whether the calls go over TLS (an https:// URL); ``verify`` or ``cert`` given for a
    plaintext URL is refused rather than ignored."""
    tls = url.scheme == "https"
    if not tls and (cert is not None or verify is not True):
        raise ValueError(
            f"verify= and cert= are for TLS, but the URL is {url.scheme}:// (plaintext, for "
            "gRPC too): give the service's https:// URL"
        )
    return tls


def _http_verify(verify: Verify, cert: ClientCert | None) -> ssl.SSLContext | bool:
    """httpx's ``verify``: as given, or a context with the CA bundle and client certificate."""
    if isinstance(verify, ssl.SSLContext):
        if cert is not None:
            raise ValueError(
                "cert= goes with verify= True or a CA bundle's path; with an ssl.SSLContext, "
                "load the client certificate into it (load_cert_chain)"
            )
        return verify
    if isinstance(verify, bool):
        if cert is None:
            return verify
        context = httpx.create_ssl_context(verify=verify)
    else:
        context = ssl.create_default_context(cafile=os.fspath(verify))
    if cert is not None:
        context.load_cert_chain(os.fspath(cert[0]), os.fspath(cert[1]))
    return context


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
    op: str,
    arrays: Mapping[str, npt.ArrayLike],
    batch_dims: int | None,
    transport: Transport,
    api_key: str | None,
) -> dict[str, Any]:
    """Method, path, body, headers and query of one op call."""
    tensors = {name: np.asarray(value) for name, value in arrays.items()}
    bfloat16 = tensors["data"].dtype == BFLOAT16
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    if transport == "npz":
        params: dict[str, Any] = {}
        if batch_dims is not None:
            params["batch_dims"] = batch_dims
        if bfloat16:
            params["dtype"] = "bfloat16"
        return {
            "url": f"/{op}",
            "content": encode_npz(tensors),
            "headers": {
                "content-type": "application/x-npz",
                "accept": "application/x-npy",
                **headers,
            },
            "params": params,
        }
    return {
        "url": f"/{op}",
        "content": _json_body(tensors, batch_dims, bfloat16),
        "headers": {"content-type": "application/json", "accept": "application/x-npy", **headers},
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

    ``api_key`` (default: ``TENSOR_OPS_API_KEY``), ``verify`` and ``cert``: see the module's
    documentation. An ``https://`` URL is TLS for gRPC too.

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
        api_key: str | None = None,
        verify: Verify = True,
        cert: ClientCert | None = None,
    ) -> None:
        self.transport = transport
        self.timeout = timeout
        base_url = httpx.URL(url) if http is None else http.base_url
        #: Where ``transport="grpc"`` calls (None: no host to default to; give grpc_target).
        self.grpc_target = grpc_target or default_target(base_url)
        self._api_key = _api_key(api_key)
        tls = _tls_check(base_url, verify, cert)
        self._grpc = SyncSlot()
        self._tls_options = (tls, verify, cert)
        if transport == "grpc":
            # grpcio missing, no target, or TLS files that cannot be read: said now.
            self._grpc.get(self.grpc_target, self._grpc_security)
        self._http = http or httpx.Client(
            base_url=url, timeout=timeout, verify=_http_verify(verify, cert) if tls else True
        )

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
            infer = self._grpc.get(self.grpc_target, self._grpc_security)
            return infer(op, arrays, batch_dims, self.timeout)
        request = _request(op, arrays, batch_dims, self.transport, self._api_key)
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

    def _grpc_security(self) -> ChannelSecurity:
        return ChannelSecurity(*self._tls_options, self._api_key)

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

    Same arguments (``api_key``, ``verify`` and ``cert`` too), same gRPC target rule
    (``grpc_target``, else the host of ``url`` with port 8001); the ``grpc.aio`` channel is made
    on the first call, in the event loop of that call.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        transport: Transport = "npz",
        timeout: float = 120.0,
        http: httpx.AsyncClient | None = None,
        grpc_target: str | None = None,
        api_key: str | None = None,
        verify: Verify = True,
        cert: ClientCert | None = None,
    ) -> None:
        self.transport = transport
        self.timeout = timeout
        base_url = httpx.URL(url) if http is None else http.base_url
        #: Where ``transport="grpc"`` calls (None: no host to default to; give grpc_target).
        self.grpc_target = grpc_target or default_target(base_url)
        self._api_key = _api_key(api_key)
        tls = _tls_check(base_url, verify, cert)
        self._grpc: AsyncGrpcModelInfer | None = None
        self._tls_options = (tls, verify, cert)
        if transport == "grpc":
            self._grpc_infer()  # grpcio missing, no target, or unreadable TLS files: said now
        self._http = http or httpx.AsyncClient(
            base_url=url, timeout=timeout, verify=_http_verify(verify, cert) if tls else True
        )

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
        request = _request(op, arrays, batch_dims, self.transport, self._api_key)
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
            self._grpc = AsyncGrpcModelInfer(
                self.grpc_target, ChannelSecurity(*self._tls_options, self._api_key)
            )
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
