"""HTTP answers from the pipeline: buffers sent as they are (no joining, no copy), errors rendered
once by the transport that owns the route."""

import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence

import anyio
import numpy as np
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app import tracing
from app.errors import ServiceError, internal_error, release_frames
from app.http.body import read_body
from app.observability import answer_cut_off
from app.pipeline.admission import Reservation
from app.pipeline.run import Body, Buffer, Exchange, Pipeline
from tensor_ops_wire.npy import Base64Stream

LOG = logging.getLogger("tensor_ops.responses")
# Answers go out in pieces of at most this size, so that a reader's progress shows.
_SEND_PIECE = 1 << 20


def _as_bytes(buffer: Buffer) -> memoryview:
    if isinstance(buffer, np.ndarray):
        # Arrays of ml_dtypes' types cannot export a buffer themselves; their bytes can.
        return np.ascontiguousarray(buffer).reshape(-1).view(np.uint8).data
    return memoryview(buffer).cast("B")


class BuffersResponse(Response):
    """A response whose body is ``buffers`` one after the other (a JSON prefix, a base64 tensor
    and a suffix, say), sent without joining them; the request's memory reservation is given
    back once they are sent, or abandoned.

    A client must read at ``min_rate`` bytes a second over every ``window`` seconds: one that
    stops reading is cut off at the end of its window, and its memory comes back.
    """

    def __init__(
        self,
        buffers: Sequence[Buffer],
        reservation: Reservation,
        media_type: str,
        headers: Mapping[str, str] | None = None,
        *,
        min_rate: int = 0,
        window: float = 10.0,
    ) -> None:
        self.buffers = [
            # A small bytes object as it is (sent whole, never sliced); else a view of its bytes.
            buffer
            if isinstance(buffer, Base64Stream)
            or (type(buffer) is bytes and len(buffer) <= _SEND_PIECE)
            else _as_bytes(buffer)
            for buffer in buffers
        ]
        self.reservation = reservation
        self.min_rate = min_rate
        self.window = window
        self.status_code = 200
        self.media_type = media_type
        self.background = None
        self.body = b""
        self.length = sum(len(buffer) for buffer in self.buffers)
        # The headers written as the server takes them (Response's own pass costs more).
        self.raw_headers = [
            (b"content-length", str(self.length).encode()),
            (b"content-type", media_type.encode("latin-1")),
        ]
        if headers:
            self.raw_headers += [
                (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
            ]

    async def _send_all(self, send: Send, sent: Callable[[int], None]) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        for piece in self._pieces():
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            sent(len(piece))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _pieces(self) -> Iterator[memoryview | bytes]:
        for buffer in self.buffers:
            if isinstance(buffer, Base64Stream):
                yield from buffer
            else:
                for start in range(0, len(buffer), _SEND_PIECE):
                    yield buffer[start : start + _SEND_PIECE]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if self.length <= _SEND_PIECE:
                # One piece: the server takes it whole, read or not, and it holds no
                # reservation worth a deadline.
                await send(
                    {
                        "type": "http.response.start",
                        "status": self.status_code,
                        "headers": self.raw_headers,
                    }
                )
                buffers = self.buffers
                if len(buffers) == 1 and type(buffers[0]) is bytes:
                    body = buffers[0]  # the commonest small answer: one orjson text
                else:
                    body = b"".join(self._pieces())
                await send({"type": "http.response.body", "body": body, "more_body": False})
                return
            quota = self.min_rate * self.window
            unread = 0

            def progressed(size: int) -> None:
                nonlocal unread
                unread += size
                if unread >= quota:  # the window's quota is read: a new window starts
                    unread = 0
                    pacing.deadline = anyio.current_time() + self.window

            with anyio.CancelScope(deadline=anyio.current_time() + self.window) as pacing:
                await self._send_all(send, progressed)
            if pacing.cancelled_caught:
                # The answer is left incomplete: the server closes the connection.
                LOG.warning(
                    "client stopped reading its answer",
                    extra={"min_rate": self.min_rate, "window": self.window},
                )
                answer_cut_off()  # uvicorn's error record of it is dropped
        finally:
            self.buffers = []
            await self.reservation.release()


class SendSpanResponse(BuffersResponse):
    """A ``BuffersResponse`` sent inside a "send" span (tracing on)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with tracing.send_span():
            await super().__call__(scope, receive, send)


async def serve_http(
    pipeline: Pipeline,
    request: Request,
    exchange: Callable[[], Exchange],
    render: Callable[[ServiceError], Response],
) -> Response:
    """Run one HTTP request through the pipeline; any refusal is rendered by ``render``.

    ``exchange`` makes the transport's view of the request (checking what it can from the
    headers alone, before a byte of the body is read).
    """

    def read(reservation: Reservation) -> Awaitable[Body]:
        # The access log reports what the request reserved at its peak (its memory estimate).
        request.state.reservation = reservation
        return read_body(request, pipeline.settings, reservation)

    try:
        answer, reservation = await pipeline.run(read, exchange())
    except ServiceError as error:
        release_frames(error)
        if tracing.TRACER is not None:
            tracing.note_fault(error)
        return render(error)
    except Exception as error:
        failure = internal_error(error)
        release_frames(error)
        if tracing.TRACER is not None:
            tracing.note_fault(failure)
        return render(failure)
    settings = pipeline.settings
    traced = tracing.TRACER is not None and tracing.recording()
    response = SendSpanResponse if traced else BuffersResponse
    return response(
        answer.buffers,
        reservation,
        answer.media_type,
        answer.headers,
        min_rate=settings.min_transfer_rate,
        window=settings.rate_window,
    )
