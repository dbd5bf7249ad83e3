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
