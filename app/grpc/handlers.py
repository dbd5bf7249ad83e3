"""The V2 service's handler table for a ``grpc.aio`` server, and the wrappers that give every call
its request id, key check, log line and metrics, and its refusals as gRPC statuses."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio

from app import tracing
from app.access import AccessControl
from app.errors import (
    ServiceError,
    internal_error,
    logged_fault,
    release_frames,
)
from app.grpc.keys import admitted_key, route_keys
from app.grpc.receive import CallNotes
from app.grpc.send import SendWatch
from app.grpc.service import InferenceService
from app.grpc.shared_memory import grpc_calls
from app.grpc.status import (
    CODES,
    FAULT_KEY,
    REQUEST_ID_KEY,
    SERVICE_NAME,
    STREAM_METHOD,
    fault_tags,
    metadata_value,
)
from app.grpc.stream import Streams, serve_stream
from app.observability import ANSWER_ON_ITS_WAY, Observation

#: A V2 method: reads its message itself (``receive``), once its key has been checked.
Call = Callable[[Any, CallNotes], Awaitable[Any]]


def observed_stream(
    service: InferenceService,
) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]:
    """``ModelStreamInfer``: the key checked once, from the stream's metadata, before any
    message is read (a refusal ends the stream UNAUTHENTICATED, logged); then each message
    served in turn (``Streams.stream_message``), each with its own log line, metrics,
    statistics and reservation. A cancelled stream gives back what its message in hand holds."""
    route = f"/{SERVICE_NAME}/{STREAM_METHOD}"
    keys = route_keys(service.access, route)
    streams = Streams(service)

    async def handle(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        metadata = context.invocation_metadata() or ()
        given, _ = metadata_value(metadata, REQUEST_ID_KEY)
        key = None
        try:
            key = admitted_key(keys, metadata)
        except ServiceError as error:
            refused = Observation(given, CODES[error.kind].name)
            refused.fault, refused.field = logged_fault(error.problems[0])
            refused.finish("gRPC", route, route)
            tags = [(REQUEST_ID_KEY, refused.request_id), *fault_tags(error)]
            await context.abort(CODES[error.kind], error.message, tuple(tags))
        await serve_stream(streams, context, route, given, key)

    if tracing.TRACER is None:
        return handle
    return tracing.grpc_spans(route, handle, FAULT_KEY)  # the stream in one span


def _size(message: Any) -> int:
    return len(message) if isinstance(message, bytes) else int(message.ByteSize())


def observed(
    method: str, call: Call, access: AccessControl | None = None, send: SendWatch | None = None
) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]:
    """``call`` with its request id, metrics and log line, its key checked (with ``access``)
    before its message is read, and its refusals as gRPC statuses (the message HTTP's
    ``{"error"}`` would hold, the fault's kind in trailing metadata).

    With ``send``, the answer goes out with the call's status (one batch of gRPC's: the method
    is served client-streaming, its answer unary), is held to the minimum send rate from its
    hand-over, and the log line, written once the call has ended (``_watch_answer``), says how
    its way out ended: taken (OK), the client gone first (CANCELLED), or not taken at the rate
    (DEADLINE_EXCEEDED, its connection shut)."""
    route = f"/{SERVICE_NAME}/{method}"
    keys = route_keys(access, route)

    async def handle(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        metadata = context.invocation_metadata() or ()
        given, _ = metadata_value(metadata, REQUEST_ID_KEY)
        seen = Observation(given, "UNKNOWN")
        notes = CallNotes()
        error: ServiceError | None = None
        logged_at_the_end = False
        try:
            try:
                if keys is not None:
                    seen.key = notes.key = admitted_key(keys, metadata)
                response = await call(context, notes)
            except ServiceError as caught:
                release_frames(caught)
                error = caught
            except asyncio.CancelledError:
                seen.status = "CANCELLED"
                raise
            except Exception as caught:
                error = internal_error(caught)
                release_frames(caught)
            else:
                seen.status = "OK"
                seen.bytes_out = _size(response)
                if seen.request_id == given:
                    # The client's own id, sent back. An id made here goes back only with a
                    # refusal (to find its log line): sending it costs a small call a tenth of
                    # its time, for an id the client never asked about.
                    context.set_trailing_metadata([(REQUEST_ID_KEY, given)])
                if send is not None:
                    _watch_answer(send, context, response, notes, seen, route)
                    logged_at_the_end = True
                return response
            code = CODES[error.kind]
            seen.status = code.name
            seen.fault, seen.field = logged_fault(error.problems[0])
            message = error.message
            tags = [(REQUEST_ID_KEY, seen.request_id), *fault_tags(error)]
            error = None
            await context.abort(code, message, tuple(tags))
        finally:
            if not logged_at_the_end:
                seen.bytes_in, seen.reserved = notes.received, notes.reserved
                seen.finish("gRPC", route, route)

    if tracing.TRACER is None:
        return handle
    return tracing.grpc_spans(route, handle, FAULT_KEY)  # each call in a server span


#: Answers longer than this (bytes) outgrow a connection's first flow-control window (64 KiB):
#: gRPC sends them as the client takes them, so the bytes written to the connection are counted
#: from their hand-over, to tell a call ended under its answer (``_watch_answer``).
COUNTED_FROM = 64 * 1024


def _watch_answer(
    send: SendWatch,
    context: Any,
    message: bytes,
    notes: CallNotes,
    seen: Observation,
    route: str,
) -> None:
    """A call's one answer, returned to gRPC (which sends it with the call's status), watched
    on its way out (``SendWatch``); once the call has ended, the watch stopped and the log line
    written, saying how the answer's way out ended:

    - DEADLINE_EXCEEDED: the watch shut its connection (not taken at the minimum rate);
    - CANCELLED: the call ended under it, its client or connection gone: gRPC said so (its
      record of the failed send, ``CallEndedByPeer``, marks ``ANSWER_ON_ITS_WAY``), or, for an
      answer longer than ``COUNTED_FROM``, fewer bytes than the answer's went to its connection
      and the count stood still (gRPC stops sending a call's message once it has ended;
      ``Watch.settle`` waits out the last bytes gRPC has yet to write);
    - OK: otherwise, taken."""
    nbytes = len(message)
    watch = send.arm(context, nbytes, notes.was_cut, counted=nbytes > COUNTED_FROM)
    ANSWER_ON_ITS_WAY.set(seen)
    # With tracing on, the line is written in the call's context (its span current: the
    # line's trace ids); off, nothing the line reads is in a context.
    traced = tracing.TRACER is not None
    call_context = contextvars.copy_context() if traced else None
    # The span ends after the line: it puts the call's status on the span.
    end_span = tracing.end_later() if traced else None

    def ended(_: Any) -> None:
        if watch is None:
            finish(None)
        else:
            watch.settle(finish)

    def finish(written: bool | None) -> None:
        if notes.cut_after is not None:
            seen.status = "DEADLINE_EXCEEDED"
        elif written is False:
            seen.status = "CANCELLED"
        seen.bytes_in, seen.reserved = notes.received, notes.reserved
        if call_context is None:
            seen.finish("gRPC", route, route)
        else:
            call_context.run(seen.finish, "gRPC", route, route)
        if end_span is not None:
            end_span()

    context.add_done_callback(ended)


def inference_handlers(service: InferenceService) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
    """The service's methods for a ``grpc.aio`` server, by path. Each is served as a
    client-streaming method, so that nothing of its message is read (nor inflated) before its
    key has been checked and its memory reserved: each call reads its one message itself. A
    message gRPC parsed itself would fail as UNKNOWN, unlogged; here it is INVALID_ARGUMENT
    and logged. ``ModelInfer`` is framed by ``GrpcExchange``, and answers bytes."""

    def method(call: Call, name: str, answers_bytes: bool = False) -> Any:
        if answers_bytes:
            # Its answer is bytes already (no serialiser), sent by gRPC with the call's status
            # in one batch and watched on its way out (``observed``'s ``send``). An answer the
            # handler wrote itself (a stream of one answer) took gRPC one batch more a call,
            # and a small call half its rate (docs/benchmarks.md, gRPC).
            return grpc.stream_unary_rpc_method_handler(
                observed(name, call, service.access, service.send_watch)
            )
        return grpc.stream_unary_rpc_method_handler(
            observed(name, call, service.access), response_serializer=_serialized
        )

    methods = {
        "ServerLive": method(service.server_live, "ServerLive"),
        "ServerReady": method(service.server_ready, "ServerReady"),
        "ModelReady": method(service.model_ready, "ModelReady"),
        "ServerMetadata": method(service.server_metadata, "ServerMetadata"),
        "ModelMetadata": method(service.model_metadata, "ModelMetadata"),
        "ModelInfer": method(service.model_infer, "ModelInfer", answers_bytes=True),
        # Triton's extensions.
        STREAM_METHOD: grpc.stream_stream_rpc_method_handler(observed_stream(service)),
        "ModelConfig": method(service.model_config, "ModelConfig"),
        "ModelStatistics": method(service.model_statistics, "ModelStatistics"),
        "RepositoryIndex": method(service.repository_index, "RepositoryIndex"),
        "RepositoryModelLoad": method(service.repository_model_load, "RepositoryModelLoad"),
        "RepositoryModelUnload": method(service.repository_model_unload, "RepositoryModelUnload"),
        # Triton's shared memory extension (app/v2/shared_memory.py)
        **{name: method(call, name) for name, call in grpc_calls(service).items()},
    }
    return {f"/{SERVICE_NAME}/{name}": handler for name, handler in methods.items()}


def _serialized(message: Any) -> bytes:
    return bytes(message.SerializeToString())
