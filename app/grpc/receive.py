"""Reading a call's message within the memory budget and the time limits (``Receiver``), and the
notes a call keeps for its log line (``CallNotes``)."""

from __future__ import annotations

import asyncio
import math
import zlib
from typing import Any, Literal, overload

import grpc
import grpc.aio

from app.errors import (
    Fault,
    ServiceError,
)
from app.grpc.status import LARGEST_MESSAGE
from app.pipeline.admission import MemoryBudget, Reservation
from app.pipeline.deadlines import Deadline
from app.pipeline.heap import TRIM_FROM_BYTES, HeapTrimmer
from app.pipeline.inflate import inflate
from app.pipeline.run import Body
from app.settings import Settings


class CallNotes:
    """What a call leaves for its log line: its reservation, whose peak is its memory
    estimate (refused or cancelled calls included), the bytes its message took, and its
    answer's way out when it is watched (``SendWatch``)."""

    __slots__ = ("cut_after", "key", "received", "reservation")

    def __init__(self) -> None:
        self.reservation: Reservation | None = None
        self.received = 0
        #: The label of the API key the call was admitted with (whose regions it sees).
        self.key: str | None = None
        #: Seconds after which the answer's connection was shut, not taken in time.
        self.cut_after: float | None = None

    def was_cut(self, seconds: float) -> None:
        self.cut_after = seconds

    @property
    def reserved(self) -> int:
        return self.reservation.peak if self.reservation is not None else 0


#: What a message holds while it arrives: gRPC's buffer of it, and the bytes handed over.
RECEIVE_COPIES = 2


def message_limit(settings: Settings, budget_bytes: int) -> int:
    """The largest message the service receives: the body limit, gRPC's 2 GiB, and half a
    worker's budget (a message is held twice while it arrives, all of it reserved)."""
    return max(1, min(settings.max_body_bytes, LARGEST_MESSAGE, budget_bytes // RECEIVE_COPIES))


def receive_time_limit(settings: Settings, limit: int) -> float:
    """How long a message may take to arrive. gRPC hands over a message whole, so its progress
    cannot be watched: the time the largest message takes at the minimum rate, after one rate
    window, and never more than the body's time limit."""
    rate = settings.min_transfer_rate
    if rate <= 0:
        return settings.body_timeout
    return min(settings.body_timeout, settings.rate_window + limit / rate)


def message_coding(message: Body) -> str | None:
    """How a message was compressed, read from its first bytes: gRPC's own decompression is
    off (so that inflating is bounded and reserved here), and the call's ``grpc-encoding``
    does not reach the application. A V2 request never starts with either header: its fields
    are all length-delimited (a tag's low three bits are 2), gzip's magic has 7 there and a
    zlib header 0."""
    if len(message) < 2:
        return None
    first, second = message[0], message[1]
    if first == 0x1F and second == 0x8B:
        return "gzip"
    if first & 0x0F == 8 and first >> 4 <= 7 and (first << 8 | second) % 31 == 0:
        return "deflate"
    return None


#: The largest message a probe, a metadata call, or a call of the health and reflection
#: services takes (names, versions, a symbol): past it, 413.
SMALL_MESSAGE = 64 * 1024


class Receiver:
    """Reads a call's one message inside the memory budget and the time limits: the worst
    case reserved before the read is posted (gRPC takes a message's bytes off the wire only
    while a read is pending), a deadline on its arrival, then the reservation brought down
    to its size and a compressed message inflated piece by piece, each piece reserved."""

    def __init__(self, settings: Settings, budget: MemoryBudget) -> None:
        self.settings = settings
        self.budget = budget
        self.limit = message_limit(settings, budget.capacity)
        self.time_limit = receive_time_limit(settings, self.limit)
        #: The one read of a small message a worker makes outside the budget at a time.
        self.unreserved = asyncio.Lock()
        self.heap = HeapTrimmer()

    async def next_message(
        self, context: Any, reservation: Reservation, notes: CallNotes, end_allowed: bool = True
    ) -> Body | None:
        """A call's next message (a call's one, ``end_allowed`` False; a stream's next): the
        worst case reserved before the read is posted, read within the time limit, the
        reservation brought down to what came, inflated if it is compressed. None: the client
        has sent its last."""
        worst = RECEIVE_COPIES * self.limit
        if not reservation.grow_now(worst):
            await reservation.grow_to(worst)
        try:
            message = await self._read(context, notes, end_allowed=end_allowed)
        except ServiceError as error:
            if not end_allowed or error.kind is not Fault.TIMEOUT:
                raise
            # A stream between messages is idle, not slow: say which wait ran out.
            raise ServiceError(
                Fault.TIMEOUT,
                ("body",),
                f"the stream's next message did not come within {self.time_limit:g} s: a stream "
                f"waits that long for each message (the time the largest message takes at "
                f"TENSOR_OPS_MIN_TRANSFER_RATE after TENSOR_OPS_RATE_WINDOW, at most "
                f"TENSOR_OPS_BODY_TIMEOUT); start a new stream when there is more to send",
            ) from None
        if message is None:
            return None
        reservation.shrink_now(RECEIVE_COPIES * len(message))
        coding = message_coding(message)
        if coding is None:
            return message
        return await inflate(
            message, coding, self.settings, reservation, limit=self.limit, what="message"
        )

    async def small(self, context: Any, notes: CallNotes) -> bytes | None:
        """A message that should be small (a probe's, a metadata call's, the health and
        reflection services'), read without waiting for memory: a probe must answer while the
        budget is busy. Its worst case is reserved if the budget has room now; if not, it is
        read in the one slot each worker keeps for an unreserved read (legitimate ones take
        microseconds), so what is held outside the budget is one message at most. Refused past
        ``SMALL_MESSAGE``; a compressed one inflated within it. None: the client sent no more
        messages (a stream's end)."""
        reservation = self.budget.reserve()
        try:
            if reservation.try_grow_to(RECEIVE_COPIES * self.limit):
                message = await self._read(context, notes, end_allowed=True)
            else:
                # Waiting for the slot is bounded as waiting for memory is.
                try:
                    await asyncio.wait_for(
                        self.unreserved.acquire(), self.settings.admission_timeout
                    )
                except TimeoutError:
                    raise _busy(self.settings.admission_timeout) from None
                try:
                    message = await self._read(context, notes, end_allowed=True)
                finally:
                    self.unreserved.release()
        finally:
            await reservation.release()
        if message is None:
            return None
        # gRPC's slices of a large message go back to the system (see ``HeapTrimmer``).
        self.heap.after_call(len(message))
        if len(message) > SMALL_MESSAGE:
            raise _small_too_large()
        coding = message_coding(message)
        if coding is None:
            return message
        # Inflated at once within the limit: a few KiB at most.
        inflater = zlib.decompressobj(zlib.MAX_WBITS | (16 if coding == "gzip" else 0))
        try:
            inflated = inflater.decompress(message, SMALL_MESSAGE + 1)
        except zlib.error:
            raise ServiceError(
                Fault.BAD_ENCODING, ("body",), f"the message is not valid {coding} data"
            ) from None
        if len(inflated) > SMALL_MESSAGE:
            raise _small_too_large()
        return inflated

    @overload
    async def _read(
        self, context: Any, notes: CallNotes, end_allowed: Literal[False] = False
    ) -> bytes: ...

    @overload
    async def _read(self, context: Any, notes: CallNotes, end_allowed: bool) -> bytes | None: ...

    async def _read(
        self, context: Any, notes: CallNotes, end_allowed: bool = False
    ) -> bytes | None:
        try:
            # In the call's own task (wait_for would make a task and a timer for each read).
            with Deadline(self.time_limit):
                message = await context.read()
        except TimeoutError:
            # What arrived of the message is freed when the call is torn down: given back to
            # the system then.
            context.add_done_callback(lambda _: self.heap.after_call(TRIM_FROM_BYTES))
            raise ServiceError(
                Fault.TIMEOUT,
                ("body",),
                f"the message did not arrive within {self.time_limit:g} s (the largest message "
                f"at TENSOR_OPS_MIN_TRANSFER_RATE after TENSOR_OPS_RATE_WINDOW, at most "
                f"TENSOR_OPS_BODY_TIMEOUT)",
            ) from None
        if message is grpc.aio.EOF and end_allowed:
            return None
        if message is grpc.aio.EOF or not isinstance(message, bytes):
            raise ServiceError(Fault.TENSOR_DECODE, ("body",), "the call has no message")
        notes.received += len(message)
        return message


def _busy(seconds: float) -> ServiceError:
    return ServiceError(
        Fault.BUSY,
        (),
        f"the service is busy: no memory came free for this message within {seconds:g} s "
        "(TENSOR_OPS_ADMISSION_TIMEOUT); retry later",
        headers={"Retry-After": str(max(1, math.ceil(seconds / 4)))},
    )


def _small_too_large() -> ServiceError:
    return ServiceError(
        Fault.TOO_LARGE,
        ("body",),
        f"this method's message holds names and versions: at most {SMALL_MESSAGE} bytes",
    )
