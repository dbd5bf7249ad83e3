"""Reading HTTP request bodies: size limits, memory reserved as bytes arrive, a minimum transfer
rate and a total time limit, gzip and deflate (every member, ``app.pipeline.inflate``)."""

import math

import anyio
import numpy as np
from starlette.requests import ClientDisconnect, Request

from app.errors import Fault, ServiceError, quote
from app.pipeline.admission import UNCOUNTED_BYTES, Reservation
from app.pipeline.deadlines import Deadline
from app.pipeline.inflate import ENCODINGS, inflate
from app.pipeline.run import Body
from app.settings import Settings

# Bodies of a declared length from this size on are read into one preallocated buffer.
_PREALLOCATED = 1 << 20
# Bodies of a declared length up to this size are read without the pacing machinery.
_SMALL = 1 << 16
_LENGTH_DIGITS = 19
#: The most content codings a body may list (each is inflated in turn, each bounded).
_MAX_CODINGS = 4


def too_large(size: str, limit: int) -> ServiceError:
    return ServiceError(
        Fault.TOO_LARGE,
        ("body",),
        f"request body of {size} is larger than the limit of {limit} bytes "
        "(raise it with TENSOR_OPS_MAX_BODY_BYTES)",
    )


async def read_body(request: Request, settings: Settings, reservation: Reservation) -> Body:
    """The whole body, decompressed, its memory reserved as it arrives (never as announced).

    413 as soon as the body (or what it inflates to) is known to pass the limit: from
    ``Content-Length`` before reading, while reading a chunked body, while inflating. 408 when
    the client sends less than ``TENSOR_OPS_MIN_TRANSFER_RATE`` bytes a second over any
    ``TENSOR_OPS_RATE_WINDOW`` seconds, or takes longer than ``TENSOR_OPS_BODY_TIMEOUT`` in all.
    """
    limit = settings.max_body_bytes
    codings = content_codings(request.headers.getlist("content-encoding"))
    declared = _declared_length(request)
    length = None
    if declared is not None:
        # Past 19 digits a length passes any limit (and int() refuses 4300 of them): no int.
        if len(declared.lstrip("0")) > _LENGTH_DIGITS:
            raise too_large(f"{len(declared)} digits of bytes", limit)
        length = int(declared)
        if length > limit:
            raise too_large(f"{length} bytes", limit)
        # A body that could never be held is refused before its buffer is asked for.
        reservation.budget.refuse_what_never_fits(length)
    if (
        length is not None
        and length <= _SMALL
        and length < settings.min_transfer_rate * settings.rate_window
        and not codings
    ):
        await reservation.grow_to(length)
        return await _read_small(request, length, settings)
    chunks = _PacedBody(request, settings)
    # One cancel scope for the whole body, its deadline moved as the windows pass.
    with anyio.CancelScope(deadline=chunks.window_end) as chunks.pacing:
        if length is not None and length >= _PREALLOCATED:
            body: Body = await _read_declared(chunks, length, reservation)
        else:
            body = await _read_growing(chunks, limit, reservation)
    if chunks.pacing.cancelled_caught:
        raise chunks.timed_out()
    # Undone in the reverse of the order they were applied, each bounded by the limit.
    for coding in reversed(codings):
        body = await inflate(body, coding, settings, reservation)
    return body


def _declared_length(request: Request) -> str | None:
    """``Content-Length`` as its digits, None when absent; 400 when it is not a number."""
    declared = request.headers.get("content-length")
    if declared is not None and not (declared.isascii() and declared.isdigit()):
        raise ServiceError(
            Fault.BAD_HEADER, ("header", "content-length"), "Content-Length is not a number"
        )
    return declared


async def read_small_body(
    request: Request, settings: Settings, limit: int, too_large_words: str
) -> bytes:
    """The whole body of a request that holds a few fields (a shared memory registration, a
    repository index request), as it came (no coding undone): at most ``limit`` bytes (413,
    ``too_large_words``, from ``Content-Length`` before reading or as a chunked body arrives),
    all of it within the first rate window or the total time limit, when that is shorter
    (408), when ``limit`` is below a window's quota; else within the total time limit."""

    def refused() -> ServiceError:
        return ServiceError(Fault.TOO_LARGE, ("body",), too_large_words)

    declared = _declared_length(request)
    if declared is not None and (
        len(declared.lstrip("0")) > _LENGTH_DIGITS or int(declared) > limit
    ):
        raise refused()
    # Below one window's quota, the whole body must come within the first window; at a rate
    # that low (or none, 0) that the body may take several, within the total time limit.
    paced = limit < settings.min_transfer_rate * settings.rate_window
    seconds = min(settings.rate_window, settings.body_timeout) if paced else settings.body_timeout
    body = bytearray()
    try:
        with Deadline(seconds):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise refused()
    except TimeoutError:
        raise _timed_out(settings, seconds >= settings.body_timeout) from None
    except ClientDisconnect:
        raise ServiceError(Fault.DISCONNECTED, ("body",), "the client went away mid-body") from None
    return bytes(body)


def content_codings(headers: list[str]) -> list[str]:
    """The codings of ``Content-Encoding`` (every line of it), in the order they were applied
    (RFC 9110, 8.4): names compared without case, ``identity`` left out; 415 for one the
    service does not undo, or for more than ``_MAX_CODINGS``."""
    codings = [
        name.strip().lower()
        for header in headers
        for name in header.split(",")
        if name.strip().lower() not in ("", "identity")
    ]
    for name in codings:
        if name not in ENCODINGS:
            raise ServiceError(
                Fault.UNSUPPORTED_ENCODING,
                ("header", "content-encoding"),
                f"Content-Encoding {quote(name)} is not supported; use gzip, deflate or none",
            )
    if len(codings) > _MAX_CODINGS:
        raise ServiceError(
            Fault.UNSUPPORTED_ENCODING,
            ("header", "content-encoding"),
            f"Content-Encoding lists {len(codings)} codings; at most {_MAX_CODINGS} are undone",
        )
    return codings


async def _read_small(request: Request, length: int, settings: Settings) -> bytes:
    """A small body of a declared length, read straight from the server's messages.

    It is below one window's quota, so the pacing rule comes down to one deadline: the whole
    body within the first window (or the total time limit, when that is shorter).
    """
    receive = request.receive
    pieces = []
    arrived = 0
    try:
        with Deadline(min(settings.rate_window, settings.body_timeout)):
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    raise ServiceError(
                        Fault.DISCONNECTED, ("body",), "the client went away mid-body"
                    )
                piece = message.get("body", b"")
                arrived += len(piece)
                if arrived > length:
                    raise ServiceError(
                        Fault.BAD_LENGTH, ("body",), "the body is longer than its Content-Length"
                    )
                pieces.append(piece)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise _timed_out(settings, settings.body_timeout <= settings.rate_window) from None
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _timed_out(settings: Settings, in_all: bool) -> ServiceError:
    if in_all:
        message = (
            f"the body took longer than {settings.body_timeout} s in all (TENSOR_OPS_BODY_TIMEOUT)"
        )
    else:
        message = (
            f"the body came slower than {settings.min_transfer_rate} bytes/s over "
            f"{settings.rate_window} s (TENSOR_OPS_MIN_TRANSFER_RATE, TENSOR_OPS_RATE_WINDOW)"
        )
    return ServiceError(Fault.TIMEOUT, ("body",), message)


class _PacedBody:
    """The body's chunks, cut off (408) when they come too slowly or take too long in all.

    Every window of ``rate_window`` seconds must bring ``min_transfer_rate * rate_window``
    bytes: once a window's quota has arrived a new window starts, so a stalled client is cut at
    the end of its window, and one byte a minute never keeps a request alive. Time the service
    spends waiting for its own memory budget is not counted against the client.
    """

    def __init__(self, request: Request, settings: Settings) -> None:
        self._chunks = request.stream().__aiter__()
        self._settings = settings
        self._window = settings.rate_window
        self._quota = settings.min_transfer_rate * settings.rate_window
        now = anyio.current_time()
        self._last_call = now + settings.body_timeout
        #: When the current window ends: the deadline of the scope the body is read in.
        self.window_end = min(now + self._window, self._last_call)
        self.pacing = anyio.CancelScope()
        self._arrived = 0

    async def next(self) -> bytes | None:
        """The next chunk, or None at the end of the body."""
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            return None
        except ClientDisconnect:
            raise ServiceError(
                Fault.DISCONNECTED, ("body",), "the client went away mid-body"
            ) from None
        self._arrived += len(chunk)
        if self._arrived >= self._quota:
            self._arrived = 0
            self.pacing.deadline = min(anyio.current_time() + self._window, self._last_call)
        return chunk

    async def reserve(self, reservation: Reservation, arrived: int, ceiling: int) -> None:
        """Grow the reservation ahead of the bytes by a quarter of what has arrived: few waits
        on the budget's lock, and never much more held than has come."""
        if arrived <= reservation.held:
            return
        wanted = min(ceiling, arrived + arrived // 4)
        if wanted <= UNCOUNTED_BYTES:
            await reservation.grow_to(wanted)  # counted in the estimate only: it never waits
            return
        # Waiting for the budget is the service's time, not the client's: the window stops.
        deadline, started = self.pacing.deadline, anyio.current_time()
        self.pacing.deadline = math.inf
        await reservation.grow_to(wanted)
        self.pacing.deadline = deadline + anyio.current_time() - started

    def timed_out(self) -> ServiceError:
        return _timed_out(self._settings, anyio.current_time() >= self._last_call)


async def _read_declared(chunks: _PacedBody, length: int, reservation: Reservation) -> memoryview:
    # A body of known length goes into one NumPy buffer, which takes huge pages: a bytearray
    # grown chunk by chunk takes a page fault every 4 KiB (~50 ms per 64 MiB on this kind of VM).
    # Its pages are only touched as bytes arrive, and only those are reserved.
    try:
        buffer = np.empty(length, dtype=np.uint8)
    except MemoryError:  # a budget set past what the machine can map
        raise ServiceError(
            Fault.BUSY,
            ("body",),
            f"the service cannot map {length} bytes for this body now; retry later",
            headers={"Retry-After": "1"},
        ) from None
    view = buffer.data
    filled = 0
    while (chunk := await chunks.next()) is not None:
        if filled + len(chunk) > length:
            raise ServiceError(
                Fault.BAD_LENGTH, ("body",), "the body is longer than its Content-Length"
            )
        await chunks.reserve(reservation, filled + len(chunk), length)
        view[filled : filled + len(chunk)] = chunk
        filled += len(chunk)
    return view[:filled]


async def _read_growing(chunks: _PacedBody, limit: int, reservation: Reservation) -> bytearray:
    body = bytearray()
    while (chunk := await chunks.next()) is not None:
        if len(body) + len(chunk) > limit:
            raise too_large(f"more than {limit} bytes", limit)
        # A bytearray may hold an eighth more than its length, as CPython grows it.
        await chunks.reserve(reservation, (len(body) + len(chunk)) * 9 // 8, limit * 9 // 8)
        body += chunk
    return body
