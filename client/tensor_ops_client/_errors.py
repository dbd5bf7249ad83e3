"""The one exception of the client, apart so that every transport's module can raise it."""

from typing import Any


class TensorOpsError(Exception):
    """Any refusal or failure of the service: its HTTP status and its message.

    Over gRPC the status is the one the service gives the same refusal over HTTP (see
    ``tensor_ops_client.client``); ``detail`` then holds the gRPC status code's name and the
    service's trailing metadata.
    """

    def __init__(self, status: int, message: str, detail: Any = None) -> None:
        super().__init__(f"[{status}] {message}")
        self.status = status
        self.message = message
        self.detail = detail
