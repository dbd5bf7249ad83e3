"""The one exception the wire codecs raise, with the kind of fault it is (no HTTP in here)."""

from enum import StrEnum


class WireFault(StrEnum):
    """What is wrong with a tensor on the wire."""

    #: The bytes are not a tensor at all (bad base64, not an .npy, ragged, truncated).
    UNDECODABLE = "tensor_decode"
    #: A tensor that decodes, but of a type or form the contract refuses.
    UNACCEPTABLE = "tensor_type"
    #: A tensor beyond a size the codec can hold.
    TOO_LARGE = "too_large"
    #: A container (an .npz archive) lacks a tensor it must hold.
    MISSING = "missing"
    #: A container holds a tensor that is not one of the expected ones.
    UNEXPECTED = "unexpected"


class TensorError(ValueError):
    """A tensor on the wire cannot be read, or is of a form that is refused."""

    def __init__(
        self, message: str, kind: WireFault = WireFault.UNDECODABLE, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        #: The input the fault is in, when the codec knows it (an .npz member, say).
        self.field = field


def undecodable(message: str) -> TensorError:
    """The bytes are not a tensor at all."""
    return TensorError(message, WireFault.UNDECODABLE)


def unacceptable(message: str) -> TensorError:
    """A tensor that decodes but whose type or values the contract refuses."""
    return TensorError(message, WireFault.UNACCEPTABLE)


def too_large(message: str) -> TensorError:
    """A tensor beyond a size limit."""
    return TensorError(message, WireFault.TOO_LARGE)


#: Every kind of fault the service names (``type`` in an HTTP error, the trailing metadata
#: ``tensor-ops-fault`` of a gRPC one) and its HTTP status: the server's ``Fault`` kinds take
#: their statuses from here, and the client reads a gRPC refusal's status here.
FAULT_STATUS: dict[str, int] = {
    "json_invalid": 400,
    "tensor_decode": 400,
    "bad_header": 400,
    "bad_encoding": 400,
    "bad_length": 400,
    "disconnected": 400,
    "bad_parameter": 400,
    "not_offered": 400,
    "unauthenticated": 401,
    "not_found": 404,
    "method_not_allowed": 405,
    "timeout": 408,
    "too_large": 413,
    "unsupported_media_type": 415,
    "unsupported_encoding": 415,
    "missing": 422,
    "extra_forbidden": 422,
    "invalid_field": 422,
    "tensor_type": 422,
    "spec_violation": 422,
    "not_json": 422,
    "busy": 503,
    "shutting_down": 503,
    "internal": 500,
}
