"""What a gRPC call says besides its message: the status code of each fault, the metadata keys
the service reads and writes, and the limits gRPC itself puts on a message."""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio

from app.errors import (
    Fault,
    ServiceError,
    fault_headers,
)

SERVICE_NAME = "inference.GRPCInferenceService"
#: The gRPC code of each HTTP status, as api.md's table maps them.
_CODE_OF_STATUS: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    405: grpc.StatusCode.UNIMPLEMENTED,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    415: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    500: grpc.StatusCode.INTERNAL,
    503: grpc.StatusCode.RESOURCE_EXHAUSTED,
}
#: The kinds whose code says more than their status does.
_OWN_CODES: dict[Fault, grpc.StatusCode] = {
    Fault.NOT_OFFERED: grpc.StatusCode.UNIMPLEMENTED,
    Fault.UNSUPPORTED_ENCODING: grpc.StatusCode.UNIMPLEMENTED,
    Fault.DISCONNECTED: grpc.StatusCode.CANCELLED,
    Fault.SHUTTING_DOWN: grpc.StatusCode.UNAVAILABLE,
}
#: The gRPC status of each fault kind.
CODES: dict[Fault, grpc.StatusCode] = {
    kind: _OWN_CODES.get(kind, _CODE_OF_STATUS[kind.status]) for kind in Fault
}
#: Trailing metadata of a refusal: the fault's kind, machine-readable (as ``type`` on HTTP).
FAULT_KEY = "tensor-ops-fault"
REQUEST_ID_KEY = "x-request-id"
#: The API key's metadata (``Bearer <key>``), as HTTP's header.
AUTHORIZATION_KEY = "authorization"
LARGEST_MESSAGE = 2**31 - 1

STREAM_METHOD = "ModelStreamInfer"


def unreadable(reason: object, message: str = "ModelInferRequest") -> ServiceError:
    """A message that does not parse as the method's: 400, with protobuf's or the framing's
    reason."""
    return ServiceError(Fault.TENSOR_DECODE, ("body",), f"the message is not a {message}: {reason}")


def fault_tags(error: ServiceError) -> list[tuple[str, str]]:
    """A refusal's trailing metadata: its fault's kind and its own headers."""
    tags = [(name.lower(), value) for name, value in fault_headers(error).items()]
    tags.extend((name.lower(), value) for name, value in error.headers.items())
    return tags


def metadata_value(metadata: Any, key: str) -> tuple[str | None, int]:
    """The value of ``key`` in a call's metadata (the first one) and how many entries name it."""
    value: str | None = None
    count = 0
    for name, item in metadata or ():
        if name == key:
            count += 1
            if value is None and isinstance(item, str):
                value = item
    return value, count
