"""Responses made of buffers sent as they are: no joining, no copying into one ``bytes``."""

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.api.admission import Reservation
from tensor_ops_wire.npy import Base64Stream

Buffer = bytes | bytearray | memoryview | Any  # anything with the buffer protocol


def _as_bytes(buffer: Buffer) -> memoryview:
    if isinstance(buffer, np.ndarray):
        # Arrays of ml_dtypes' types cannot export a buffer themselves; their bytes can.
        return np.ascontiguousarray(buffer).reshape(-1).view(np.uint8).data
    return memoryview(buffer).cast("B")


class BuffersResponse(Response):
    """A response whose body is ``buffers`` one after the other (a JSON prefix, a base64 tensor
    and a suffix, say), sent without joining them; the request's memory reservation is given
    back once they are sent, or abandoned."""

    def __init__(
        self,
        buffers: Sequence[Buffer],
        reservation: Reservation,
        media_type: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.buffers = [
            buffer if isinstance(buffer, Base64Stream) else _as_bytes(buffer) for buffer in buffers
        ]
        self.reservation = reservation
        super().__init__(content=b"", media_type=media_type, headers=headers)
        self.headers["content-length"] = str(sum(len(buffer) for buffer in self.buffers))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            for buffer in self.buffers:
                pieces = buffer if isinstance(buffer, Base64Stream) else (buffer,)
                for piece in pieces:
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.buffers = []
            await self.reservation.release()
