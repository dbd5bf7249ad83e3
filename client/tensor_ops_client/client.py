"""The sync and async clients of tensor-ops: NumPy arrays in, NumPy arrays out.

Four transports, chosen by ``transport=``:

- ``"npz"`` (the default): an ``.npz`` body to ``POST /roll`` or ``/gather`` over HTTP, the
  output back as raw ``.npy``;
- ``"json"``: the same routes, each tensor a base64 ``.npy`` string in a JSON body;
- ``"v2"``: KServe V2 ``POST /v2/models/{op}/infer`` with Triton's binary tensor extension;
- ``"grpc"``: KServe V2 ``ModelInfer`` over gRPC (``inference.GRPCInferenceService``), each
  tensor as raw contents. Needs the ``grpc`` extra: ``pip install 'tensor-ops-client[grpc]'``.

The gRPC target: ``grpc_target="host:port"`` when given; else the host of the HTTP URL (``url``,
or the base URL of the ``http`` client given) with port 8001, the service's default
``TENSOR_OPS_GRPC_PORT``. So ``TensorOpsClient("http://gpu-box:8000", transport="grpc")`` calls
``gpu-box:8001``.

Timeouts and retries:

- ``timeout`` (seconds, default 120; None for none) bounds each attempt. Over HTTP it is httpx's
  timeout: connecting, each read and each write may take that long (a large answer arriving
  steadily is not cut off). Over gRPC it is the call's deadline: the whole call.
- ``retry`` (a ``Retry``; default ``Retry()``: 5 attempts within 120 s; ``False``: one
  attempt) repeats a call that failed for a reason a repeat can cure: no connection or a broken
  one, the service's 503 (busy, or shutting down; its ``Retry-After`` honoured), a proxy's 502
  or 504, gRPC's ``UNAVAILABLE``, and ``RESOURCE_EXHAUSTED`` with ``retry-after``. Roll and
  Gather are pure functions, so a repeat is always safe. A call whose timeout passed is not
  repeated. Each attempt's timeout is cut to what is left of ``Retry.deadline``.

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

Every failure raises ``TensorOpsError`` with ``status``, ``kind``, ``field``, ``message`` and
``request_id`` (see its documentation); ``status`` is an HTTP status whatever the transport.
Over gRPC it is the status the service gives the same refusal over HTTP, read from the fault
kind the service puts in the trailing metadata (``tensor-ops-fault``: 422 for
``spec_violation``, 400 for ``tensor_decode``...). A status without it (gRPC's own refusal, or
a proxy's) is mapped from its code: INVALID_ARGUMENT, FAILED_PRECONDITION and OUT_OF_RANGE 400,
UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404, ALREADY_EXISTS and ABORTED 409,
RESOURCE_EXHAUSTED 413 (503 with ``retry-after``), UNIMPLEMENTED 501, any other 500.

Status 0 means no answer came, on any transport: the service could not be reached (over gRPC:
UNAVAILABLE without the service's fault kind), the connection broke, or no answer came within
``timeout`` (over gRPC: DEADLINE_EXCEEDED).
"""

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
import numpy.typing as npt

from tensor_ops_client._actions import HttpAnswer, Plan, SendGrpc, SendHttp, Wait
from tensor_ops_client._core import (
    API_KEY_VARIABLE,
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    TRANSPORTS,
    ClientBase,
    ClientCert,
    Health,
    ProgressHook,
    Transport,
    Verify,
    http_verify,
    service_url,
    transport_failure,
)
from tensor_ops_client._errors import TensorOpsError
from tensor_ops_client._grpc import AsyncGrpcModelInfer, SyncSlot
from tensor_ops_client._retry import Retry
from tensor_ops_client._verdict import OutputVerdict, Verdict
from tensor_ops_wire.npz import Pieces

__all__ = [
    "API_KEY_VARIABLE",
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "TRANSPORTS",
    "AsyncTensorOpsClient",
    "ClientCert",
    "Health",
    "OutputVerdict",
    "ProgressHook",
    "Retry",
    "TensorOpsClient",
    "TensorOpsError",
    "Transport",
    "Verdict",
    "Verify",
]

R = TypeVar("R")
#: Bytes a progress hook is called after, going out and coming in.
PROGRESS_STEP = 1 << 20


def _chunks(content: bytes | Pieces, progress: ProgressHook | None) -> Iterator[bytes]:
    # Views of the body, not copies: each is joined once with h11's framing on its way out.
    buffers = content.buffers if isinstance(content, Pieces) else [content]
    total = len(content)
    sent = told = 0
    for buffer in buffers:
        view = memoryview(buffer)
        for start in range(0, len(view), PROGRESS_STEP):
            chunk = view[start : start + PROGRESS_STEP]
            yield chunk  # type: ignore[misc]
            sent += len(chunk)
            if progress is not None and (sent - told >= PROGRESS_STEP or sent == total):
                told = sent
                progress("upload", sent, total)


async def _async_chunks(
    content: bytes | Pieces, progress: ProgressHook | None
) -> AsyncIterator[bytes]:
    for chunk in _chunks(content, progress):
        yield chunk


def _total(response: httpx.Response) -> int | None:
    length = response.headers.get("content-length")
    return int(length) if length is not None and length.isdigit() else None


class _Download:
    """The answer's body as it comes, and the progress hook told on the way."""

    def __init__(self, response: httpx.Response, progress: ProgressHook | None) -> None:
        self.body = bytearray()
        self.progress = progress
        self.total = _total(response)
        self.told = 0

    def add(self, chunk: bytes) -> None:
        self.body += chunk
        if self.progress is not None and len(self.body) - self.told >= PROGRESS_STEP:
            self.told = len(self.body)
            self.progress("download", self.told, self.total)

    def done(self, response: httpx.Response) -> HttpAnswer:
        if self.progress is not None and self.told != len(self.body):
            self.progress("download", len(self.body), self.total)
        return HttpAnswer(response.status_code, response.headers, self.body)


def _stream_arguments(action: SendHttp, progress: ProgressHook | None) -> dict[str, Any]:
    request = action.request
    arguments: dict[str, Any] = {
        "method": request.method,
        "url": request.url,
        "headers": request.headers,
        "params": request.params,
        "timeout": action.timeout,
    }
    body = request.body
    if body is not None:
        # A large body goes in pieces of a MiB (an archive's pieces as they are), its length
        # declared: httpcore's synchronous write sends a body given whole by slicing the rest
        # off after each socket send, a copy of what remains each time (its time grows with
        # the square of the size: 128 MiB took 1 s where the service read it in 0.2). The
        # pieces also tell a progress hook.
        if len(body) > PROGRESS_STEP:
            arguments["headers"] = {**request.headers, "content-length": str(len(body))}
        else:
            arguments["content"] = bytes(body)
    return arguments


class TensorOpsClient(ClientBase[npt.NDArray[Any], Health, dict[str, Any], Verdict]):
    """Calls a tensor-ops service: ``TensorOpsClient(url).roll(data, shift, axes)``.

    Tensors go as an ``.npz`` body and come back as raw ``.npy`` by default (no JSON, no
    base64); ``transport="json"`` sends base64 ``.npy`` in JSON instead, ``transport="v2"``
    KServe V2 binary tensors over HTTP, ``transport="grpc"`` KServe V2 ``ModelInfer`` over
    gRPC. Every failure raises ``TensorOpsError`` with the service's status, fault kind, field
    and message.

    - ``url``: the service's HTTP address.
    - ``transport``: ``"npz"``, ``"json"``, ``"v2"`` or ``"grpc"``.
    - ``timeout``: seconds each attempt may take (None: no limit); see the module's
      documentation for what it bounds on each transport.
    - ``retry``: a ``Retry`` (``True``: the default policy; ``False``: no retry; an int: that
      many attempts).
    - ``progress``: called as a request's body goes out and an answer's comes in (HTTP
      transports), ``progress("upload" | "download", done, total)``, every MiB.
    - ``http``: an ``httpx.Client`` of your own (its base URL is the service's).
    - ``grpc_target``: the gRPC address, ``"host:port"`` (or any target gRPC dials,
      ``"unix:/path"`` say); by default the host of ``url`` with port 8001.
    - ``api_key`` (default: ``TENSOR_OPS_API_KEY``), ``verify`` and ``cert``: see the module's
      documentation. An ``https://`` URL is TLS for gRPC too.
    - ``shared_memory``: with ``transport="v2"`` or ``"grpc"``, on the service's host only
      (the same ``/dev/shm``): each call passes its tensors through a POSIX shared memory
      region it creates, registers, then unregisters and removes (docs/shared-memory.md).

    With ``transport="grpc"`` the output is a read-only view of the received message (no copy);
    ``.copy()`` it to write into it. Without grpcio the constructor raises ``ImportError``
    saying ``pip install 'tensor-ops-client[grpc]'``.

    >>> with TensorOpsClient("http://127.0.0.1:8000") as client:
    ...     client.roll(np.arange(6).reshape(2, 3), shift=1, axes=1)
    array([[2, 0, 1],
           [5, 3, 4]])
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        transport: Transport = "npz",
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: Retry | bool | int | None = True,
        progress: ProgressHook | None = None,
        http: httpx.Client | None = None,
        grpc_target: str | None = None,
        api_key: str | None = None,
        verify: Verify = True,
        cert: ClientCert | None = None,
        shared_memory: bool = False,
    ) -> None:
        base_url = httpx.URL(url) if http is None else http.base_url
        super().__init__(
            url,
            base_url,
            transport=transport,
            timeout=timeout,
            retry=retry,
            progress=progress,
            grpc_target=grpc_target,
            api_key=api_key,
            verify=verify,
            cert=cert,
            shared_memory=shared_memory,
        )
        self._grpc = SyncSlot()
        if transport == "grpc":
            # grpcio missing, no target, or TLS files that cannot be read: said now.
            self._grpc.get(self.grpc_target, self._grpc_security)
        self._http = http or httpx.Client(
            base_url=url,
            timeout=timeout,
            verify=http_verify(verify, cert) if self._tls else True,
        )

    def _run(self, plan: Plan[R]) -> R:
        try:
            action = next(plan)
            while True:
                try:
                    result = self._perform(action)
                except TensorOpsError as error:
                    action = plan.throw(error)
                else:
                    action = plan.send(result)
        except StopIteration as stop:
            value: R = stop.value
            return value

    def _perform(self, action: SendHttp | SendGrpc | Wait) -> Any:
        if isinstance(action, Wait):
            time.sleep(action.seconds)
            return None
        if isinstance(action, SendGrpc):
            infer = self._grpc.get(self.grpc_target, self._grpc_security)
            return infer.send(action.message, action.timeout)
        progress = self.progress
        arguments = _stream_arguments(action, progress)
        if "content" not in arguments and action.request.body is not None:
            arguments["content"] = _chunks(action.request.body, progress)
        try:
            with self._http.stream(**arguments) as response:
                download = _Download(response, progress)
                for chunk in response.iter_bytes():
                    download.add(chunk)
        except httpx.HTTPError as error:
            raise transport_failure(
                error, action.timeout, service_url(self._http.base_url)
            ) from error
        return download.done(response)

    def close(self) -> None:
        """Close the HTTP connections and the gRPC channel."""
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


class AsyncTensorOpsClient(
    ClientBase[
        Awaitable[npt.NDArray[Any]],
        Awaitable[Health],
        Awaitable[dict[str, Any]],
        Awaitable[Verdict],
    ]
):
    """The asynchronous twin of ``TensorOpsClient``: ``await client.roll(...)``.

    Same arguments (``http`` is then an ``httpx.AsyncClient``), same methods, same retry
    policy (its waits are ``asyncio.sleep``); the ``grpc.aio`` channel is made on the first
    call, in the event loop of that call.

    >>> import asyncio
    >>> async def main():
    ...     async with AsyncTensorOpsClient("http://127.0.0.1:8000") as client:
    ...         return await client.gather([10, 20, 30], indices=[2, 0], axis=0)
    >>> asyncio.run(main())
    array([30, 10])
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        transport: Transport = "npz",
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: Retry | bool | int | None = True,
        progress: ProgressHook | None = None,
        http: httpx.AsyncClient | None = None,
        grpc_target: str | None = None,
        api_key: str | None = None,
        verify: Verify = True,
        cert: ClientCert | None = None,
        shared_memory: bool = False,
    ) -> None:
        base_url = httpx.URL(url) if http is None else http.base_url
        super().__init__(
            url,
            base_url,
            transport=transport,
            timeout=timeout,
            retry=retry,
            progress=progress,
            grpc_target=grpc_target,
            api_key=api_key,
            verify=verify,
            cert=cert,
            shared_memory=shared_memory,
        )
        self._grpc: AsyncGrpcModelInfer | None = None
        if transport == "grpc":
            self._grpc_infer()  # grpcio missing, no target, or unreadable TLS files: said now
        self._http = http or httpx.AsyncClient(
            base_url=url,
            timeout=timeout,
            verify=http_verify(verify, cert) if self._tls else True,
        )

    async def _run(self, plan: Plan[R]) -> R:
        try:
            action = next(plan)
            while True:
                try:
                    result = await self._perform(action)
                except TensorOpsError as error:
                    action = plan.throw(error)
                else:
                    action = plan.send(result)
        except StopIteration as stop:
            value: R = stop.value
            return value

    async def _perform(self, action: SendHttp | SendGrpc | Wait) -> Any:
        if isinstance(action, Wait):
            await asyncio.sleep(action.seconds)
            return None
        if isinstance(action, SendGrpc):
            return await self._grpc_infer().send(action.message, action.timeout)
        progress = self.progress
        arguments = _stream_arguments(action, progress)
        if "content" not in arguments and action.request.body is not None:
            arguments["content"] = _async_chunks(action.request.body, progress)
        try:
            async with self._http.stream(**arguments) as response:
                download = _Download(response, progress)
                async for chunk in response.aiter_bytes():
                    download.add(chunk)
        except httpx.HTTPError as error:
            raise transport_failure(
                error, action.timeout, service_url(self._http.base_url)
            ) from error
        return download.done(response)

    def _grpc_infer(self) -> AsyncGrpcModelInfer:
        if self._grpc is None:
            self._grpc = AsyncGrpcModelInfer(self.grpc_target, self._grpc_security())
        return self._grpc

    async def aclose(self) -> None:
        """Close the HTTP connections and the gRPC channel."""
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
