"""The one exception of the client, apart so that every transport's module can raise it."""

from typing import Any


class TensorOpsError(Exception):
    """A refusal of the service, or a call that got no answer.

    The service's one error model, on every transport:

    - ``status``: the HTTP status (over gRPC, the status the service gives the same refusal
      over HTTP); 0 when no answer came (the service could not be reached, the connection
      broke, or the timeout passed).
    - ``kind``: the fault's kind as the service names it (``"spec_violation"``,
      ``"tensor_decode"``, ``"too_large"``, ``"busy"``...; the ``type`` of an HTTP error
      item, the ``Tensor-Ops-Fault`` header of ``/v2``, the ``tensor-ops-fault`` metadata of
      gRPC); None when the answer does not say (a proxy's, or no answer at all).
    - ``field``: where the fault is, dotted (``"shift"``, ``"body.axes"``), when the service
      says; None otherwise.
    - ``message``: the service's words (or the client's, for no answer).
    - ``request_id``: the service's id of the request, to find its log line.
    - ``retry_after``: seconds the service asked to wait before a retry (503), or None.
    - ``attempts``: how many calls were made before giving up (retries included).
    - ``detail``: the raw error (the HTTP body's JSON, or gRPC's code and metadata).

    ``str(error)`` is ``"[status] message"`` for an answer of the service, and the message
    alone when no answer came (status 0): that message names the address that was called.

    >>> error = TensorOpsError(422, "axes: 3 is out of range", kind="spec_violation",
    ...                        field="axes")
    >>> (error.status, error.kind, error.field, str(error))
    (422, 'spec_violation', 'axes', '[422] axes: 3 is out of range')
    >>> str(TensorOpsError(0, "cannot reach the service at http://127.0.0.1:9: connection refused"))
    'cannot reach the service at http://127.0.0.1:9: connection refused'
    """

    def __init__(
        self,
        status: int,
        message: str,
        detail: Any = None,
        *,
        kind: str | None = None,
        field: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(f"[{status}] {message}" if status else message)
        self.status = status
        self.message = message
        self.detail = detail
        self.kind = kind
        self.field = field
        self.request_id = request_id
        self.retry_after = retry_after
        #: Whether the call may be made again: no answer came because the connection failed
        #: or broke, or the service said it was busy or shutting down (503), or a proxy found
        #: no replica (502, 504). Roll and Gather are pure functions: a repeat is safe.
        self.retryable = retryable
        self.attempts = 1

    @property
    def unreachable(self) -> bool:
        """No answer came from the service (``status == 0``)."""
        return self.status == 0

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable (multiprocessing, concurrent.futures) with every attribute.
        return (_rebuild, (self.__class__, self.status, self.message, dict(self.__dict__)))


def _rebuild(
    kind: type[TensorOpsError], status: int, message: str, state: dict[str, Any]
) -> TensorOpsError:
    error = kind(status, message)
    error.__dict__.update(state)
    return error
