"""``transport="grpc"``: KServe V2 ``ModelInfer`` over gRPC, for the sync and async clients.

Everything but the call itself is here once: the target, the channel (plaintext or TLS, and the
API key's metadata), the request's bytes, the answer's array and a gRPC status as
``TensorOpsError``. grpcio and protobuf (the client's
``grpc`` extra) are imported only when a client first uses this transport: without them the
package imports and its other transports work as ever.

No tensor passes through protobuf. The request's head (model, inputs' names, datatypes and
shapes, the op's attributes as parameters) is written by protobuf and each tensor's bytes appended
to it as a ``raw_input_contents`` entry, in one copy (``join_raw``); the answer's
``raw_output_contents`` are split out of the received bytes (``split_raw``) and the output is a
read-only view of them.
"""

import os
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import numpy.typing as npt

from tensor_ops_client._errors import TensorOpsError
from tensor_ops_client._raw import fits, raw_input, raw_output, seconds
from tensor_ops_wire.dtypes import UnknownDTypeError, dtype_from_name
from tensor_ops_wire.errors import FAULT_STATUS
from tensor_ops_wire.grpc_v2.framing import (
    RAW_INPUT_FIELD,
    RAW_OUTPUT_FIELD,
    FramingError,
    join_raw,
    split_raw,
)
from tensor_ops_wire.ops import AttributeValue, parameter_value

if TYPE_CHECKING:
    import grpc
    import grpc.aio

INSTALL_HINT = "transport='grpc' needs grpcio and protobuf: pip install 'tensor-ops-client[grpc]'"
#: The service's default gRPC port (its ``TENSOR_OPS_GRPC_PORT``).
DEFAULT_GRPC_PORT = 8001
#: The service's default HTTP port (its ``TENSOR_OPS_PORT``).
DEFAULT_HTTP_PORT = 8000
#: What a client that called the other of the service's two ports is told to do.
WHICH_PORT = (
    f"the service's HTTP port is {DEFAULT_HTTP_PORT} by default (TENSOR_OPS_PORT) and its gRPC "
    f"port {DEFAULT_GRPC_PORT} (TENSOR_OPS_GRPC_PORT); give the HTTP URL as url= (--url) and "
    "the gRPC address as grpc_target= (--grpc-target)"
)
#: What gRPC's message says when the target answered in HTTP/1.x (the service's HTTP port).
_HTTP1_ANSWER = "trying to connect an http1.x server"
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
#: No message size limit on the client's side: the service has its own (its body and output
#: limits), and a 64 MiB tensor is well past gRPC's default of 4 MiB.
CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
)
#: Trailing metadata of the service's refusals.
FAULT_KEY = "tensor-ops-fault"
REQUEST_ID_KEY = "x-request-id"
FIELD_KEY = "tensor-ops-field"
RETRY_AFTER_KEY = "retry-after"

#: A status without the service's fault kind (gRPC's own refusal, a message over the service's
#: size limit say, or a proxy's): the HTTP status nearest the code. RESOURCE_EXHAUSTED is 413,
#: or 503 when it comes with ``retry-after``; any code not listed is 500.
CODE_STATUS: dict[str, int] = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "ABORTED": 409,
    "RESOURCE_EXHAUSTED": 413,
    "UNIMPLEMENTED": 501,
}
#: Codes that, without the service's fault kind, mean no answer came: status 0, as the HTTP
#: transports give when the service cannot be reached or does not answer in time.
NO_ANSWER: dict[str, str] = {
    "UNAVAILABLE": "cannot reach the service",
    "DEADLINE_EXCEEDED": "no answer within the timeout",
    "CANCELLED": "the call was cancelled",
}


def require_grpc() -> None:
    """Nothing, when grpcio and protobuf import; else ``ImportError`` saying how to get them."""
    try:
        import grpc  # noqa: PLC0415
        import grpc.aio  # noqa: PLC0415, F401

        from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2  # noqa: PLC0415, F401
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT} ({error})", name=error.name) from error


def default_target(base_url: httpx.URL) -> str | None:
    """``host:port`` of the HTTP base URL's host and the default gRPC port (None: no host)."""
    host = base_url.host
    if not host:
        return None
    return f"[{host}]:{DEFAULT_GRPC_PORT}" if ":" in host else f"{host}:{DEFAULT_GRPC_PORT}"


def check_target(target: str | None) -> str:
    """``target`` as gRPC is to dial it; refuses none at all, and a URL given for ``host:port``."""
    if target is None:
        raise ValueError(
            "transport='grpc' needs grpc_target='host:port': the HTTP client has no base URL "
            "to take the host from"
        )
    scheme, found, _ = target.partition("://")
    if found and scheme.lower() in ("http", "https", "grpc", "grpcs"):
        raise ValueError(f"grpc_target is host:port, not a URL: got {target!r}")
    return target


class ChannelSecurity:
    """How the channel is dialled and each call made: TLS (with the PEM bytes of the CA bundle
    and of the client certificate and key, read once) or plaintext, and the API key's metadata.

    Over TLS, ``verify`` is True (gRPC's own root certificates, or the file named by
    ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``) or a CA bundle's path; gRPC can neither take an
    ``ssl.SSLContext`` nor skip the check, so those are refused here.
    """

    def __init__(
        self,
        tls: bool,
        verify: "bool | str | os.PathLike[str] | ssl.SSLContext" = True,
        cert: "tuple[str | os.PathLike[str], str | os.PathLike[str]] | None" = None,
        api_key: str | None = None,
    ) -> None:
        self.tls = tls
        self.root_certificates: bytes | None = None
        self.private_key: bytes | None = None
        self.certificate_chain: bytes | None = None
        if tls:
            if isinstance(verify, ssl.SSLContext):
                raise ValueError(
                    "transport='grpc' takes verify= as a CA bundle's path (or True), not an "
                    "ssl.SSLContext: gRPC reads the certificates itself"
                )
            if verify is False:
                raise ValueError(
                    "transport='grpc' cannot skip the server's certificate check: give verify= "
                    "the path of the CA certificate that signed it"
                )
            if verify is not True:
                with open(verify, "rb") as file:
                    self.root_certificates = file.read()
            if cert is not None:
                with open(cert[0], "rb") as file:
                    self.certificate_chain = file.read()
                with open(cert[1], "rb") as file:
                    self.private_key = file.read()
        #: Each call's metadata: the key as ``authorization: Bearer <key>``, or none.
        self.metadata: tuple[tuple[str, str], ...] | None = (
            (("authorization", f"Bearer {api_key}"),) if api_key else None
        )

    def credentials(self) -> "grpc.ChannelCredentials":
        import grpc  # noqa: PLC0415

        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )


def _detail(
    code: str | None,
    fault: str | None,
    request_id: str | None = None,
    retry_after: str | None = None,
) -> dict[str, str | None]:
    return {
        "grpc_code": code,
        "fault": fault,
        "request_id": request_id,
        "retry_after": retry_after,
    }


def infer_request(
    op: str,
    arrays: Mapping[str, npt.ArrayLike],
    attributes: Mapping[str, AttributeValue],
    version: str | None = None,
) -> bytes:
    """The bytes of the ``ModelInferRequest`` of one op call, each tensor as raw contents and
    each attribute an ``int64_param`` of the request's parameters.

    An element type the protocol has no datatype for is refused here (422, ``tensor_type``, as
    the service refuses it), before anything is sent.
    """
    from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb  # noqa: PLC0415

    request = pb.ModelInferRequest(model_name=op, model_version=version or "")
    for name, given in attributes.items():
        number = parameter_value(given)
        if isinstance(number, str):
            request.parameters[name].string_param = number
            continue
        if isinstance(number, bool):
            request.parameters[name].bool_param = number
            continue
        try:
            request.parameters[name].int64_param = number  # type: ignore[assignment]
        except (TypeError, ValueError):
            raise TensorOpsError(
                422,
                f"parameters.{name}: must be an int64 integer, got {number!r:.64}",
                _detail(None, "invalid_field"),
                kind="invalid_field",
                field=f"parameters.{name}",
            ) from None
    raw: list[npt.NDArray[np.uint8]] = []
    for name, value in arrays.items():
        tensor = np.asarray(value)
        element, contents = raw_input(name, tensor, _detail(None, "tensor_type"))
        request.inputs.add(name=name, datatype=element.kserve, shape=tensor.shape)
        raw.append(contents)
    return join_raw(request.SerializeToString(), RAW_INPUT_FIELD, raw)


def _unreadable(reason: str) -> TensorOpsError:
    return TensorOpsError(0, f"the service's answer cannot be read: {reason}", _detail("OK", None))


def infer_output(answer: bytes) -> Any:
    """The output of a ``ModelInferResponse`` (a read-only view of its raw contents), or for an
    op of several outputs (``output_0``, ``output_1``...) the list of them, in order."""
    from google.protobuf.message import DecodeError  # noqa: PLC0415

    from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb  # noqa: PLC0415

    try:
        head, raw = split_raw(answer, RAW_OUTPUT_FIELD)
        response = pb.ModelInferResponse.FromString(head)
    except (FramingError, DecodeError) as error:
        raise _unreadable(f"not a ModelInferResponse ({error})") from None
    if not response.outputs or len(raw) != len(response.outputs):
        raise _unreadable(
            f"{len(response.outputs)} outputs and {len(raw)} raw_output_contents entries, "
            "where each output in raw contents was expected"
        )
    arrays = []
    for output, contents in zip(response.outputs, raw, strict=True):
        try:
            dtype = dtype_from_name(output.datatype)
        except UnknownDTypeError as error:
            raise _unreadable(str(error)) from None
        shape = tuple(output.shape)
        if not fits(len(contents), dtype, shape):
            raise _unreadable(
                f"{len(contents)} bytes of raw contents for an output of shape "
                f"{list(shape)[:64]} and datatype {output.datatype}"
            )
        arrays.append(raw_output(contents, dtype, shape))
    if len(arrays) == 1 and response.outputs[0].name == "output":
        return arrays[0]
    return arrays


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def wrong_port(target: str | None, detail: Any) -> TensorOpsError:
    """The gRPC target answered in HTTP/1.x: the service's HTTP port, most likely. Not
    retryable: a repeat gets the same answer. (gRPC's own words are the error's cause.)"""
    where = target or "the gRPC target"
    return TensorOpsError(
        0,
        f"{where} speaks HTTP/1.1, not gRPC (HTTP/2), as the service's HTTP port does: "
        f"{WHICH_PORT}",
        detail,
    )


def rpc_failure(
    error: "grpc.RpcError", timeout: float | None, target: str | None = None
) -> TensorOpsError:
    """A failed call as ``TensorOpsError``: the HTTP status the service gives the same refusal,
    its message, its fault kind, field, request id and ``retry-after``, and in ``detail`` the
    gRPC code's name and the service's trailing metadata. ``target``, the address called, is
    named when no answer came."""
    code = error.code()
    code_name = code.name if code is not None else "UNKNOWN"
    details = error.details() or code_name
    metadata: dict[str, str] = {}
    # (key, value) pairs: the sync call's metadata and grpc.aio's Metadata alike.
    pairs: Iterable[Any] = error.trailing_metadata() or ()
    for key, value in pairs:
        metadata.setdefault(key.lower(), _text(value))
    fault = metadata.get(FAULT_KEY)
    retry_after = metadata.get(RETRY_AFTER_KEY)
    request_id = metadata.get(REQUEST_ID_KEY)
    detail = _detail(code_name, fault, request_id, retry_after)
    status = FAULT_STATUS.get(fault) if fault is not None else None
    if status is None:
        fault = None
        if code_name == "UNAVAILABLE" and _HTTP1_ANSWER in details.lower():
            return wrong_port(target, detail)
        if code_name in NO_ANSWER:
            reason = NO_ANSWER[code_name]
            if code_name == "DEADLINE_EXCEEDED" and timeout is not None:
                reason = f"no answer within the timeout of {timeout:g} s"
            elif code_name == "UNAVAILABLE" and target is not None:
                reason = f"{reason} at {target}"
            # UNAVAILABLE: the channel could not connect, or the connection broke: a repeat
            # is safe (the ops are pure). A deadline passed or a cancel is not repeated.
            return TensorOpsError(
                0,
                f"{reason}: {details}",
                detail,
                request_id=request_id,
                retryable=code_name == "UNAVAILABLE",
            )
        if code_name == "RESOURCE_EXHAUSTED" and retry_after is not None:
            status = 503
        else:
            status = CODE_STATUS.get(code_name, 500)
    return TensorOpsError(
        status,
        details,
        detail,
        kind=fault,
        field=metadata.get(FIELD_KEY) or None,
        request_id=request_id,
        retry_after=seconds(retry_after),
        retryable=status == 503,
    )


class GrpcModelInfer:
    """``ModelInfer`` on a channel of its own, bytes in and bytes out (sync)."""

    def __init__(self, target: str | None, security: ChannelSecurity) -> None:
        require_grpc()
        import grpc  # noqa: PLC0415

        self.metadata = security.metadata
        self.target = check_target(target)
        if security.tls:
            self.channel = grpc.secure_channel(
                self.target, security.credentials(), options=CHANNEL_OPTIONS
            )
        else:
            self.channel = grpc.insecure_channel(self.target, options=CHANNEL_OPTIONS)
        self.method: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(
            MODEL_INFER
        )

    def send(self, message: bytes, timeout: float | None) -> bytes:
        """One ``ModelInfer`` call: the answer's bytes, or ``TensorOpsError``."""
        import grpc  # noqa: PLC0415

        try:
            return self.method(message, timeout=timeout, metadata=self.metadata)
        except grpc.RpcError as error:
            raise rpc_failure(error, timeout, self.target) from error

    def close(self) -> None:
        self.channel.close()


class AsyncGrpcModelInfer:
    """``ModelInfer`` on a ``grpc.aio`` channel of its own: made in the event loop it is first
    called from, as ``grpc.aio`` wants."""

    def __init__(self, target: str | None, security: ChannelSecurity) -> None:
        require_grpc()
        self.target = check_target(target)
        self.security = security
        self._channel: grpc.aio.Channel | None = None
        self._method: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] | None = None

    def _ready(self) -> "grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]":
        if self._method is None:
            import grpc.aio  # noqa: PLC0415

            if self.security.tls:
                self._channel = grpc.aio.secure_channel(
                    self.target, self.security.credentials(), options=CHANNEL_OPTIONS
                )
            else:
                self._channel = grpc.aio.insecure_channel(self.target, options=CHANNEL_OPTIONS)
            self._method = self._channel.unary_unary(MODEL_INFER)
        return self._method

    async def send(self, message: bytes, timeout: float | None) -> bytes:
        """One ``ModelInfer`` call: the answer's bytes, or ``TensorOpsError``."""
        import grpc  # noqa: PLC0415

        method = self._ready()
        try:
            return await method(message, timeout=timeout, metadata=self.security.metadata)
        except grpc.RpcError as error:
            raise rpc_failure(error, timeout, self.target) from error

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._method = None


class SyncSlot:
    """The sync client's ``GrpcModelInfer``, made once on first use (from any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.infer: GrpcModelInfer | None = None

    def get(self, target: str | None, security: Callable[[], ChannelSecurity]) -> GrpcModelInfer:
        with self._lock:
            if self.infer is None:
                self.infer = GrpcModelInfer(target, security())
            return self.infer

    def close(self) -> None:
        with self._lock:
            if self.infer is not None:
                self.infer.close()
                self.infer = None
