"""The one exception the wire codecs raise, with the HTTP status its kind of fault calls for."""


class TensorError(ValueError):
    """A tensor on the wire cannot be read (400) or is of a form the service refuses (413, 422)."""

    def __init__(
        self, message: str, status: int = 400, kind: str = "tensor_decode", field: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind = kind
        #: The input the fault is in, when the codec knows it (an .npz member, say).
        self.field = field


def undecodable(message: str) -> TensorError:
    """400: the bytes are not a tensor at all."""
    return TensorError(message, 400, "tensor_decode")


def unacceptable(message: str) -> TensorError:
    """422: a tensor that decodes but whose type or values the contract refuses."""
    return TensorError(message, 422, "tensor_type")


def too_large(message: str) -> TensorError:
    """413: a tensor beyond a configured size limit."""
    return TensorError(message, 413, "too_large")
