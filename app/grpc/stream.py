"""Triton's ``ModelStreamInfer``: each message of a stream served as ``ModelInfer`` serves its
one, read while those before it run, and their answers written in order within a bound."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

from app.errors import (
    ServiceError,
    internal_error,
    logged_fault,
    release_frames,
)
from app.grpc.exchange import GrpcExchange
from app.grpc.receive import RECEIVE_COPIES, CallNotes
from app.grpc.send import disarm
from app.grpc.service import InferenceService
from app.grpc.status import CODES, REQUEST_ID_KEY, fault_tags
from app.grpc.stream_turns import StreamOrder, StreamReads
from app.observability import Observation
from app.pipeline.admission import Reservation
from app.pipeline.heap import TRIM_FROM_BYTES
from app.pipeline.run import Body
from app.v2.shared_memory import (
    new_request,
)
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb


class Streams:
    """The messages of the service's streams, each served as ``ModelInfer`` serves its one,
    within the service's budget, limits and counts; their reads take turns (``StreamReads``)."""

    def __init__(self, service: InferenceService) -> None:
        self.service = service
        receiver = service.receiver
        #: The reads streams keep posted for their next message.
        self.reads = StreamReads(
            service.pipeline.budget.capacity,
            RECEIVE_COPIES * receiver.limit,
            service.pipeline.settings.admission_timeout,
        )

    async def stream_message(  # noqa: PLR0915 - one message's life in order, read to answer
        self,
        context: Any,
        route: str,
        given: str | None,
        key: str | None,
        arrived: Callable[[], None],
        order: StreamOrder,
        index: int,
    ) -> StreamOutcome | None:
        """Serve the next message of a ``ModelStreamInfer`` stream as ``ModelInfer`` serves its
        one (read within the budget and the limits, through the pipeline, logged and counted);
        ``arrived`` is called as soon as the message is in hand (not when it will not come),
        so that the next one can be read while this one runs. Returns the answer to write (a
        refusal is answered as ``error_message`` and the stream goes on), with the reservation
        that holds it until it is written; None once the client has sent its last message. A
        refusal before the message was read (no memory came free, it did not arrive in time)
        is returned to end the stream with its status: no request of the client's can carry
        it."""
        call = Observation(given, "UNKNOWN")
        notes = CallNotes()
        # Tensors in shared memory as ``ModelInfer`` takes them.
        exchange = GrpcExchange(new_request(self.service.regions, key), stream=True)
        reservation: Reservation | None = None
        status: str | None = "UNKNOWN"
        sent, counted = 0, False
        #: This message's bytes counted in the stream's bound (``StreamOrder.unwritten``).
        charged = 0
        #: Whether the next message's read has been handed on (``arrived``), once.
        handed_on = False

        async def read(held: Reservation) -> Body:
            nonlocal reservation, counted
            reservation = notes.reservation = held
            message = await self._next_message(context, held, notes, order, index)
            if message is None:
                raise _EndOfStreamError
            self.service.calls_in_flight += 1
            counted = True
            return message

        def reserved() -> None:
            # All this message will hold is reserved now: it is counted in the stream's bound
            # before the next message is read, so the bound holds whatever the timing (a
            # message counted when its answer was made let every message that arrived while
            # the others ran past the bound).
            nonlocal charged, handed_on
            assert reservation is not None
            charged = reservation.held
            order.unwritten += charged
            handed_on = True
            arrived()

        try:
            try:
                answer, reservation = await self.service.pipeline.run(read, exchange, reserved)
                message = answer.buffers[0]
            except _EndOfStreamError:
                status = None
                return None
            except ServiceError as caught:
                release_frames(caught)
                error = caught
            except Exception as caught:
                error = internal_error(caught)
                release_frames(caught)
            else:
                status, sent = "OK", len(message)
                held, reservation = reservation, None  # the writer gives it back once written
                outcome = StreamOutcome(message, held, call.request_id, order, charged)
                charged = 0  # the outcome's now
                return outcome
            status = CODES[error.kind].name
            call.fault, call.field = logged_fault(error.problems[0])
            # Nothing came (``counted`` is set once a message is in hand: an empty one has no
            # bytes but came, and is answered as any other).
            if not notes.received and not counted:
                return StreamOutcome(b"", None, call.request_id, end=error)
            if not handed_on:  # refused before its memory was all reserved: the stream goes on
                handed_on = True
                arrived()
            refusal = _stream_refusal(exchange.request, error)
            # The error's traceback holds this frame, which holds the error and the exchange
            # (the message's bytes): a cycle only the collector would break, and a stream that
            # goes on is sent more before it runs. Broken here, as the call wrapper does.
            del error
            sent = len(refusal)
            return StreamOutcome(refusal, None, call.request_id)
        except asyncio.CancelledError:
            status = "CANCELLED"
            raise
        finally:
            exchange.let_go()
            if charged:
                order.unwritten -= charged
            if notes.reserved >= TRIM_FROM_BYTES:
                order.large = True
                # The slices gRPC received this message in, freed in its arenas, go back to
                # the system once this message is done, answered or refused, as a call's do:
                # a long stream must not keep every large message it was sent.
                self.service.receiver.heap.after_call(notes.reserved)
            if reservation is not None:
                await reservation.release()
            if counted:
                self.service.ended(None)
            if status is not None:
                call.status, call.key, call.bytes_out, call.bytes_in, call.reserved = (
                    status,
                    key,
                    sent,
                    notes.received,
                    notes.reserved,
                )
                call.finish("gRPC", route, route)

    async def _next_message(
        self, context: Any, held: Reservation, notes: CallNotes, order: StreamOrder, index: int
    ) -> Body | None:
        """A stream's next message (``Receiver.next_message``), read in its turn."""
        await self._room_to_read(held, order, index)
        try:
            return await self.service.receiver.next_message(context, held, notes)
        finally:
            self.reads.leave()

    async def _room_to_read(self, held: Reservation, order: StreamOrder, index: int) -> None:
        """A turn among the streams' reads (``StreamReads``) and, while messages before this
        one are in hand, the read's worst case too. Those messages may still need memory
        (their outputs): a read that waited in line for the budget would hold them back behind
        it, waiting for memory they hold. So it goes ahead of them only into room free now;
        else it waits until they have been answered and have given back what they held, and
        then for its turn and its memory as a call waits for its message's."""
        reads = self.reads
        if order.written < index:
            if reads.try_enter():
                if held.try_grow_to(RECEIVE_COPIES * self.service.receiver.limit):
                    return
                reads.leave()
            await order.written_up_to(index)
        await reads.enter()


class StreamOutcome:
    """A stream message's answer, in the order it must be written: its bytes and the
    reservation that holds them until then, or the refusal that ends the stream."""

    __slots__ = ("charged", "end", "message", "order", "request_id", "reservation")

    def __init__(
        self,
        message: bytes,
        reservation: Reservation | None,
        request_id: str,
        order: StreamOrder | None = None,
        charged: int = 0,
        end: ServiceError | None = None,
    ) -> None:
        self.message = message
        self.reservation = reservation
        self.request_id = request_id
        self.end = end
        #: The stream's count of unwritten bytes (``order``), of which ``charged`` are this
        #: answer's until given back.
        self.order = order
        self.charged = charged

    async def release(self) -> None:
        self.release_now()

    def release_now(self) -> None:
        # The answer's bytes let go too: a task or a traceback that outlives the stream (the
        # error that ended it holds its frames) must not keep them.
        self.message = b""
        held, self.reservation = self.reservation, None
        if self.order is not None and self.charged:
            self.order.unwritten -= self.charged
            self.charged = 0
        if held is not None:
            held.release_now()


def _release_outcome(task: asyncio.Task[StreamOutcome | None]) -> None:
    """What a stream message's task made and nobody will write, given back (once it is done:
    a done callback, so that it runs however the stream ended)."""
    if not task.cancelled() and task.exception() is None:
        outcome = task.result()
        if outcome is not None:
            outcome.release_now()


#: The messages of one stream served at once: each is read while those before it run and
#: their answers are written, in order.
STREAM_WINDOW = 32
#: The messages of one stream in hand and their answers not yet taken by its client hold at
#: most this share of the budget, and the one message being admitted beside it: a message is
#: counted once all it will hold is reserved, and only then is the next one read. Past it, no
#: next message is read until the client takes some.
STREAM_UNWRITTEN_SHARE = 4


async def serve_stream(
    streams: Streams, context: Any, route: str, given: str | None, key: str | None
) -> None:
    """The messages of a stream, each read as soon as the one before it is in hand (at most
    ``STREAM_WINDOW`` at once), and their answers written here in the order they came.
    Cancelled (the client went, the server stops), every message in hand is cancelled and what
    it holds given back.

    Each message is a task that reads it and serves it; the task that has its message in hand
    posts the next one's itself, so that a message costs its task and nothing more on the way
    in (no future, no wait on several things): the writer is this coroutine, and whatever ends
    it (a refusal that ends the stream, a write that fails, a cancellation) ends the stream."""
    order = StreamOrder()
    #: The messages posted whose answers have not been taken yet, oldest first: one read
    #: pending at the end, unless the window is full.
    posted: collections.deque[asyncio.Task[StreamOutcome | None]] = collections.deque()
    #: A message arrived with the window full: the next read waits for room.
    stalled = False
    service = streams.service
    unwritten_limit = service.pipeline.budget.capacity // STREAM_UNWRITTEN_SHARE

    def room() -> bool:
        return len(posted) < STREAM_WINDOW and order.unwritten < unwritten_limit

    def post() -> None:
        posted.append(
            asyncio.ensure_future(
                streams.stream_message(context, route, given, key, arrived, order, order.posted)
            )
        )
        order.posted += 1

    def arrived() -> None:
        nonlocal stalled
        if room():
            post()
        else:
            stalled = True

    post()
    try:
        while True:
            # Never empty here: the last message posted either arrived (and posted the next,
            # or stalled, which the previous answer below posts again) or ends the stream.
            outcome = await posted[0]
            posted.popleft()
            if stalled and room():
                stalled = False
                post()
            if outcome is None:
                return  # the client's last message: every answer before it written
            try:
                if outcome.end is not None:
                    await _end_stream(context, outcome.end, outcome.request_id)
                await _write(service, context, outcome.message)
            finally:
                await outcome.release()
            order.wrote()
            if stalled and room():
                stalled = False
                post()
    finally:
        await _give_back(posted, order, service, context)


async def _give_back(
    posted: collections.deque[asyncio.Task[StreamOutcome | None]],
    order: StreamOrder,
    service: InferenceService,
    context: Any,
) -> None:
    """What a stream's messages in hand hold, given back once the stream has ended, however it
    ended (``serve_stream``'s last step)."""
    # Answers made but never written (the stream ended first) give back what they hold:
    # those done now at once, the others as they finish (their own ``finally`` gives back
    # what a message in hand holds). Nothing here waits before that: a second cancellation
    # (gRPC's for a client gone, after a write that failed) would cut the wait short.
    unfinished = []
    for item in posted:
        if item.done():
            _release_outcome(item)
        else:
            item.add_done_callback(_release_outcome)
            item.cancel()
            unfinished.append(item)
    if order.large:
        # Its buffers, freed as gRPC tears the stream down (after this returns), go back
        # to the system.
        service.receiver.heap.after_call(TRIM_FROM_BYTES)
        context.add_done_callback(lambda _: service.receiver.heap.after_call(TRIM_FROM_BYTES))
    # A message whose work is in a thread ends when the thread does: the stream's end waits
    # for them, so that the stop sees the memory back.
    try:
        await asyncio.gather(*unfinished, return_exceptions=True)
    finally:
        # A message's task ended by an exception keeps it, and its traceback the task's
        # frames, whose ``arrived`` reaches ``posted``, which holds the task: a cycle only the
        # collector would break, holding whatever those frames hold (an answer made as the
        # stream was cancelled). Broken here, however the wait above ended.
        posted.clear()
        unfinished.clear()


async def _write(service: InferenceService, context: Any, message: bytes) -> None:
    """A stream's answer written, taken at the minimum rate or the connection is shut
    (app/grpc/send.py)."""
    sending = service.send_watch.arm(context, len(message))
    try:
        await context.write(message)
    finally:
        disarm(sending)


async def _end_stream(context: Any, error: ServiceError, request_id: str) -> None:
    """A stream ended by a refusal no request of the client's can carry (the message not yet
    read): its status, as a call's."""
    tags = [(REQUEST_ID_KEY, request_id), *fault_tags(error)]
    await context.abort(CODES[error.kind], error.message, tuple(tags))


def _stream_refusal(request: Any, error: ServiceError) -> bytes:
    """A stream's answer to a refused message: its error, and the message's model and id."""
    refusal = pb.ModelStreamInferResponse(
        error_message=error.message,
        infer_response=pb.ModelInferResponse(
            model_name=request.model_name, model_version=request.model_version, id=request.id
        ),
    )
    return bytes(refusal.SerializeToString())


class _EndOfStreamError(Exception):
    """The client has sent the last message of its stream."""
