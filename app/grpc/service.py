"""KServe V2 / Open Inference Protocol over gRPC: an adapter of the request pipeline.

``inference.GRPCInferenceService`` as KServe and Triton declare it. What differs from ``/v2``
over HTTP is only where things are: inputs and parameters in a protobuf message, tensors as raw
contents (split out of the received bytes without a copy) or typed contents, the answer's raw
contents joined in once, and an error as a status code with the message HTTP would give.

Long (some 1,400 lines) because it is the one place that holds what a V2 call over gRPC is:
the exchange, receiving a message within the budget, the unary and stream handlers (which share
their reservations, watches and observation), the status mapping and the handler table; split
them and each would need the others' internals. The send watch (``send.py``), the server
(``server.py``) and shared memory's calls (``shared_memory.py``) are apart.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import math
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, overload

import grpc
import grpc.aio
import numpy as np
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from app import tracing
from app.access import AccessControl
from app.codecs.grpc_tensors import (
    ARENA_BYTES_PER_ELEMENT,
    can_be_typed,
    decode_contents,
    encode_typed,
    encode_typed_several,
    typed_bytes,
    typed_wire_bytes,
)
from app.codecs.v2_tensors import decode_v2_binary, v2_datatype, v2_output_buffer, wire_dtype
from app.errors import (
    Fault,
    ServiceError,
    fault_headers,
    from_wire,
    internal_error,
    logged_fault,
    release_frames,
)
from app.grpc.send import SendWatch, disarm
from app.grpc.shared_memory import grpc_answer, grpc_calls, raw_positions
from app.observability import Observation
from app.pipeline.admission import MemoryBudget, Reservation
from app.pipeline.deadlines import Deadline
from app.pipeline.heap import TRIM_FROM_BYTES, HeapTrimmer
from app.pipeline.inflate import inflate
from app.pipeline.jobs import Job, Limits, make_job
from app.pipeline.run import Answer, Body, Pipeline
from app.registry import Op, version_of
from app.settings import Settings
from app.v2.rules import (
    EXTENSIONS,
    INPUT_EXTENSIONS,
    OUTPUT_EXTENSIONS,
    OUTPUT_NAME,
    SERVER_NAME,
    model,
    model_config,
    model_metadata,
    model_version,
    op_attributes,
    read_inputs,
    refuse_extensions,
    refuse_model_control,
    repository_index,
    requested_outputs,
    statistics_models,
    wants_binary,
)
from app.v2.shared_memory import (
    INPUT_EXTENSIONS_ON,
    OUTPUT_EXTENSIONS_ON,
    Regions,
    SharedTensors,
    decoded_checked,
    new_request,
    server_extensions,
)
from app.version import VERSION
from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2.framing import (
    RAW_INPUT_FIELD,
    RAW_OUTPUT_FIELD,
    FramingError,
    entry,
    join_raw,
    nested,
    split_raw,
    split_raw_counted,
)

LOG = logging.getLogger("tensor_ops.grpc")

SERVICE_NAME = "inference.GRPCInferenceService"
#: The gRPC code of each HTTP status, as api.md's table maps them.
_CODE_OF_STATUS: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    405: grpc.StatusCode.UNIMPLEMENTED,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    415: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    500: grpc.StatusCode.INTERNAL,
    503: grpc.StatusCode.RESOURCE_EXHAUSTED,
}
#: The kinds whose code says more than their status does.
_OWN_CODES: dict[Fault, grpc.StatusCode] = {
    Fault.NOT_OFFERED: grpc.StatusCode.UNIMPLEMENTED,
    Fault.UNSUPPORTED_ENCODING: grpc.StatusCode.UNIMPLEMENTED,
    Fault.DISCONNECTED: grpc.StatusCode.CANCELLED,
    Fault.SHUTTING_DOWN: grpc.StatusCode.UNAVAILABLE,
}
#: The gRPC status of each fault kind.
CODES: dict[Fault, grpc.StatusCode] = {
    kind: _OWN_CODES.get(kind, _CODE_OF_STATUS[kind.status]) for kind in Fault
}
#: Trailing metadata of a refusal: the fault's kind, machine-readable (as ``type`` on HTTP).
FAULT_KEY = "tensor-ops-fault"
REQUEST_ID_KEY = "x-request-id"
#: The API key's metadata (``Bearer <key>``), as HTTP's header.
AUTHORIZATION_KEY = "authorization"
INPUTS_NUMBER = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["inputs"].number
#: Room beside the output for an answer's names, shape, id and framing; no message may pass
#: 2 GiB - 1 (gRPC's and protobuf's limit).
ANSWER_HEAD_ROOM = 1 << 20
LARGEST_MESSAGE = 2**31 - 1


def answer_limit(max_output_bytes: int) -> int:
    """The largest answer the service sends: the output limit and room for a head."""
    return min(max_output_bytes + ANSWER_HEAD_ROOM, LARGEST_MESSAGE)


#: Messages up to this size are parsed by protobuf whole (their raw contents copied, a few
#: bytes); larger ones have their raw contents split out as views first.
_PARSED_WHOLE = 64 * 1024
#: A typed message's arena and the arrays made from it, per byte of the message (see prepare).
_TYPED_BYTES_PER_WIRE_BYTE = 2 * ARENA_BYTES_PER_ELEMENT + 1
#: An entry at the top of a message (an input, an output, a parameter) parsed and read, as
#: measured: an empty input tensor some 80 bytes in the arena and 380 as a Python object.
_ENTRY_BYTES = 512


def parameter_values(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A protobuf map of ``InferParameter`` as plain values (bool, int, str or float; None for
    an unset one), for the protocol's rules to read as they read JSON's."""
    values: dict[str, Any] = {}
    if not parameters:
        return values
    for name, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        values[name] = None if choice is None else getattr(parameter, choice)
    return values


class GrpcExchange:
    """One ``ModelInfer`` call: its message's raw contents split out, the rest parsed."""

    def __init__(self, shared: SharedTensors | None = None, stream: bool = False) -> None:
        #: A message of a ``ModelStreamInfer`` stream: its answer is written wrapped in a
        #: ``ModelStreamInferResponse``, in the same single copy as the output's.
        self.stream = stream
        self.head = b""
        #: The raw contents as views of the message; None: left in the parsed message.
        self.raw: list[memoryview] | None = None
        self.request = pb.ModelInferRequest()
        self.raw_output = True
        #: Tensors in shared memory (None: the extension is off).
        self.shared = shared
        self.shared_output = False
        #: The outputs the message names, of an op of several (None: all of them).
        self.requested: frozenset[str] | None = None

    @property
    def op(self) -> Op | None:
        """The model the message names, once it has been parsed and if it is served (for the
        statistics of a request refused after that)."""
        request = self.request
        return version_of(request.model_name, request.model_version)

    def prepare(self, body: Body) -> int:
        entries = 0
        if len(body) <= _PARSED_WHOLE:
            # Small: protobuf parses it all, faster than the split's walk in Python (its
            # entries cost at most the model's slack: 32 Ki of two bytes, 16 MiB).
            self.head = bytes(body)
        else:
            try:
                self.head, self.raw, entries = split_raw_counted(body, RAW_INPUT_FIELD)
            except FramingError as error:
                raise _unreadable(str(error)) from None
        # The head holds names, shapes and parameters, and typed contents when there are any:
        # parsed, each element takes up to 8 bytes of protobuf's arena for each byte (at least)
        # on the wire, and as much again as an array. Each top-level entry (an input, an
        # output, a parameter) is a message of its own, and a Python object when read.
        return _TYPED_BYTES_PER_WIRE_BYTE * len(self.head) + _ENTRY_BYTES * entries

    def decode(self, limits: Limits) -> Job:
        return decoded_checked(self.shared, lambda: self._decode(limits))

    def _decode(self, limits: Limits) -> Job:
        try:
            request = pb.ModelInferRequest.FromString(self.head)
        except DecodeError as error:
            reason = str(error)
            try:  # the framing's own words, when that is what is wrong
                split_raw(self.head, RAW_INPUT_FIELD)
            except FramingError as framing:
                reason = str(framing)
            raise _unreadable(reason) from None
        if self.raw is None:
            self.raw = [memoryview(item) for item in request.raw_input_contents]
        self.request = request
        op = model(request.model_name, request.model_version or None)
        parameters = parameter_values(request.parameters)
        # Lazily: a message may name an output a million times, each read and let go.
        outputs = ((item.name, parameter_values(item.parameters)) for item in request.outputs)
        shared = self.shared
        extensions = OUTPUT_EXTENSIONS if shared is None else OUTPUT_EXTENSIONS_ON
        self.raw_output = wants_binary(
            parameters, outputs, default=True, extensions=extensions, op=op
        )
        arrays = self._inputs(request, op, limits)
        job = make_job(op, arrays, op_attributes(op, parameters), limits)
        self.requested = requested_outputs(job, (item.name for item in request.outputs))
        if shared is not None and shared.place_output(
            ((item.name, parameter_values(item.parameters)) for item in request.outputs), job
        ):
            self.shared_output = True  # written into the client's region, not sent
        else:
            self._refuse_what_cannot_be_sent(job, limits)
        return job

    def _inputs(self, request: Any, op: Op, limits: Limits) -> dict[str, Any]:
        raw = self.raw or []
        shared = self.shared
        # Inputs in shared memory have no raw contents: the others' entries, in order.
        positions = None if shared is None else raw_positions(request.inputs)
        carried = (
            len(request.inputs) if positions is None else len(positions) - positions.count(None)
        )
        if raw and len(raw) != carried:
            raise ServiceError(
                Fault.TENSOR_DECODE,
                ("body", "raw_input_contents"),
                f"raw_input_contents has {len(raw)} entries for {carried} inputs"
                f"{'' if positions is None else ' not in shared memory'}: "
                "give one for every input, in order, or none and each input's contents",
            )
        head = self.head
        extensions = INPUT_EXTENSIONS if shared is None else INPUT_EXTENSIONS_ON

        def check(item: Any) -> None:
            refuse_extensions(
                parameter_values(item.parameters),
                extensions,
                ("body", item.name, "parameters"),
                "send the tensor in the request, in raw_input_contents or in contents",
            )
            if min(item.shape, default=0) < 0:
                raise ServiceError(
                    Fault.INVALID_FIELD,
                    ("body", item.name, "shape"),
                    f"dimensions must be non-negative integers, got {min(item.shape)}",
                )

        def decode(index: int, item: Any) -> Any:
            shape = list(item.shape)
            if positions is not None:
                position = positions[index]
                if position is None:
                    assert shared is not None
                    in_contents = "contents" if item.contents.ByteSize() else None
                    return shared.input(
                        item.name,
                        parameter_values(item.parameters),
                        shape,
                        item.datatype,
                        in_contents,
                    )
                index = position
            try:
                if raw:
                    if item.contents.ByteSize():
                        raise ServiceError(
                            Fault.TENSOR_DECODE,
                            ("body", item.name),
                            "has both contents and an entry in raw_input_contents; give one",
                        )
                    return decode_v2_binary(raw[index], shape, item.datatype, "its raw contents")
                wire = entry(head, INPUTS_NUMBER, index)
                return decode_contents(item.contents, shape, item.datatype, wire)
            except TensorError as error:
                raise from_wire(error, item.name) from None

        return read_inputs(
            op,
            request.inputs,
            limits,
            check=check,
            decode=decode,
        )

    def encoding_bytes(self, job: Job) -> int:
        # The inputs and output in shared memory are the client's: only copies count.
        copied = 0 if self.shared is None else self.shared.copied_bytes
        if self.shared_output:
            return copied
        if self._raw_output(job):
            # The output array, then the message it is joined into (one copy, wrapped or not).
            return 2 * job.output_bytes + copied
        typed = typed_bytes(job.sizing_dtype, job.output_count)
        # A stream's typed answer is copied once more into its wrapper.
        return job.output_bytes + (2 if self.stream else 1) * typed + copied

    def _refuse_what_cannot_be_sent(self, job: Job, limits: Limits) -> None:
        """413 before any work for an answer over the send limit: typed contents take up to
        ten bytes an element (a negative INT8 too), and the request's id is echoed."""
        raw = self._raw_output(job)
        output = job.output_bytes if raw else typed_wire_bytes(job.sizing_dtype, job.output_count)
        # Names, datatype, a shape of up to 64 dimensions and framing: under 4 KiB, and the id.
        answer = output + len(self.request.id.encode()) + 4096
        limit = answer_limit(limits.max_output_bytes)
        if answer <= limit:
            return
        form = "raw contents" if raw else "typed contents (up to 10 bytes an element)"
        advice = "" if raw else "; ask for raw contents (the parameter binary_data_output true)"
        raise ServiceError(
            Fault.TOO_LARGE,
            ("body",),
            f"the answer would take up to {answer} bytes as {form}, above the {limit} bytes a "
            f"gRPC answer may take here (TENSOR_OPS_MAX_OUTPUT_BYTES and 1 MiB for its head, "
            f"at most 2 GiB){advice}",
        )

    def _raw_output(self, job: Job) -> bool:
        return self.raw_output or not can_be_typed(job.output_dtype)

    def encode(self, job: Job) -> Answer:
        answer = self._encode(job)
        if self.shared is not None:
            self.shared.verify()  # no object of the request cut short while it ran
        return answer

    def _encode(self, job: Job) -> Answer:
        if self.shared_output:
            assert self.shared is not None
            return self._wrapped(grpc_answer(job, self.request.id, self.shared))
        datatype = v2_datatype(job.output_dtype)
        if job.split is not None:
            return self._wrapped(self._several(job, datatype))
        if self._raw_output(job):
            output = job.output(v2_output_buffer(job.output_shape, job.output_dtype))
            raw = np.ascontiguousarray(output).reshape(-1).view(np.uint8)
            request_id = self.request.id
            version = model_version(job.op)
            head = (
                _raw_answer_head(job.op.name, version, datatype, job.output_shape, request_id)
                if len(request_id) <= _CACHED_ID
                else _answer_head(job.op.name, version, datatype, job.output_shape, request_id)
            )
            if not self.stream:
                return Answer([join_raw(head, RAW_OUTPUT_FIELD, [raw])], "application/grpc")
            # Wrapped as a stream's answer in the same single copy of the output.
            pieces = nested(STREAM_RESPONSE_FIELD, [head, *nested(RAW_OUTPUT_FIELD, [raw])])
            return Answer([b"".join(pieces)], "application/grpc")
        response = pb.ModelInferResponse(
            model_name=job.op.name, model_version=model_version(job.op), id=self.request.id
        )
        tensor = pb.ModelInferResponse.InferOutputTensor(
            name=OUTPUT_NAME, datatype=datatype, shape=job.output_shape
        )
        message = encode_typed(response, tensor, job.output())
        return self._wrapped(Answer([message], "application/grpc"))

    def _several(self, job: Job, datatype: str) -> Answer:
        """The answer of an op of several outputs (Split-1): every output in order, as raw
        contents (one entry each) or typed contents."""
        response = pb.ModelInferResponse(
            model_name=job.op.name, model_version=model_version(job.op), id=self.request.id
        )
        named = [
            (name, output)
            for name, output in zip(job.output_names, job.outputs(), strict=True)
            if self.requested is None or name in self.requested
        ]
        outputs = [output for _, output in named]
        if self._raw_output(job):
            for name, output in named:
                response.outputs.add(
                    name=name, datatype=v2_datatype(output.dtype), shape=output.shape
                )
            raws = [
                np.ascontiguousarray(output.astype(wire_dtype(output.dtype), copy=False))
                .reshape(-1)
                .view(np.uint8)
                for output in outputs
            ]
            return Answer(
                [join_raw(response.SerializeToString(), RAW_OUTPUT_FIELD, raws)],
                "application/grpc",
            )
        tensors = [
            (
                pb.ModelInferResponse.InferOutputTensor(
                    name=name, datatype=v2_datatype(output.dtype), shape=output.shape
                ),
                output,
            )
            for name, output in named
        ]
        return Answer([encode_typed_several(response, tensors)], "application/grpc")

    def _wrapped(self, answer: Answer) -> Answer:
        """A stream's answer: the ``ModelInferResponse`` as the ``infer_response`` of a
        ``ModelStreamInferResponse``."""
        if not self.stream:
            return answer
        return Answer([join_raw(b"", STREAM_RESPONSE_FIELD, answer.buffers)], answer.media_type)


# Answers' heads are kept for ids up to this long: a client's fixed id, or none.
_CACHED_ID = 64


def _answer_head(
    op: str, version: str, datatype: str, shape: tuple[int, ...], request_id: str
) -> bytes:
    """An answer with raw contents, without them: model, version, id and the output's name,
    datatype and shape."""
    response = pb.ModelInferResponse(model_name=op, model_version=version, id=request_id)
    response.outputs.append(
        pb.ModelInferResponse.InferOutputTensor(name=OUTPUT_NAME, datatype=datatype, shape=shape)
    )
    return bytes(response.SerializeToString())


# Most calls of a client repeat their op, type and shape: their heads are made once.
_raw_answer_head = functools.lru_cache(maxsize=512)(_answer_head)


def _release_when_done(context: grpc.aio.ServicerContext[Any, Any], held: Reservation) -> None:
    # The answer's bytes stay with gRPC until the call ends (sent, cancelled or timed out):
    # the reservation is held until then, as HTTP holds it until its answer is sent.
    context.add_done_callback(lambda _: held.release_now())  # type: ignore[arg-type]  # the stubs want a class


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


#: A V2 method: reads its message itself (``receive``), once its key has been checked.
Call = Callable[[Any, CallNotes], Awaitable[Any]]


def _unreadable(reason: object, message: str = "ModelInferRequest") -> ServiceError:
    return ServiceError(Fault.TENSOR_DECODE, ("body",), f"the message is not a {message}: {reason}")


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

    async def message(self, context: Any, reservation: Reservation, notes: CallNotes) -> Body:
        """A call's one message: the worst case reserved before the read is posted, read
        within the time limit, the reservation brought down to what came, inflated if it is
        compressed."""
        message = await self.next_message(context, reservation, notes, end_allowed=False)
        assert message is not None  # a call without its message is refused by the read
        return message

    async def next_message(
        self, context: Any, reservation: Reservation, notes: CallNotes, end_allowed: bool = True
    ) -> Body | None:
        """A stream's next message, read as ``message`` reads a call's one; None: the client
        has sent its last."""
        await reservation.grow_to(RECEIVE_COPIES * self.limit)
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
        await reservation.shrink_to(RECEIVE_COPIES * len(message))
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


class InferenceService:
    """The V2 service's calls, each an ``async`` function of the context and the call's notes,
    reading its message through the receiver."""

    def __init__(
        self,
        pipeline: Pipeline,
        ready: Callable[[], bool],
        access: AccessControl | None = None,
        regions: Regions | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.ready = ready
        #: The worker's shared memory regions, the app's (``create_app``) so that ``/v2`` and
        #: gRPC see the same ones; a service made without them has its own.
        self.regions = Regions(pipeline.settings) if regions is None else regions
        #: API keys, when they are on: every call but the probes needs the metadata's key.
        self.access = access
        self.receiver = Receiver(pipeline.settings, pipeline.budget)
        #: The reads streams keep posted for their next message.
        self.stream_reads = StreamReads(
            pipeline.budget.capacity,
            RECEIVE_COPIES * self.receiver.limit,
            pipeline.settings.admission_timeout,
        )
        #: Inference calls begun and not yet ended (their answers sent, or given up): the
        #: stop waits for none.
        self.calls_in_flight = 0
        #: When the last of them ended (``time.monotonic()``; never: minus infinity).
        self.last_ended = -math.inf
        #: The minimum send rate of answers (its port set by the server once bound).
        self.send_watch = SendWatch(pipeline.settings)

    async def parsed(self, request_type: Any, context: Any, notes: CallNotes) -> Any:
        """A small call's message (``Receiver.small``), parsed."""
        message = await self.receiver.small(context, notes)
        if message is None:
            raise ServiceError(Fault.TENSOR_DECODE, ("body",), "the call has no message")
        try:
            return request_type.FromString(message)
        except DecodeError as error:
            raise _unreadable(error, request_type.DESCRIPTOR.name) from None

    async def server_live(self, context: Any, notes: CallNotes) -> Any:
        await self.parsed(pb.ServerLiveRequest, context, notes)
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, context: Any, notes: CallNotes) -> Any:
        await self.parsed(pb.ServerReadyRequest, context, notes)
        return pb.ServerReadyResponse(ready=self.ready())

    async def model_ready(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.ModelReadyRequest, context, notes)
        model(request.name, request.version or None)
        return pb.ModelReadyResponse(ready=self.ready())

    async def server_metadata(self, context: Any, notes: CallNotes) -> Any:
        await self.parsed(pb.ServerMetadataRequest, context, notes)
        extensions = EXTENSIONS + server_extensions(self.regions)
        return pb.ServerMetadataResponse(name=SERVER_NAME, version=VERSION, extensions=extensions)

    async def model_metadata(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.ModelMetadataRequest, context, notes)
        metadata = model_metadata(model(request.name, request.version or None))
        return pb.ModelMetadataResponse(
            name=metadata["name"],
            versions=metadata["versions"],
            platform=metadata["platform"],
            inputs=[_tensor_metadata(item) for item in metadata["inputs"]],
            outputs=[_tensor_metadata(item) for item in metadata["outputs"]],
        )

    async def model_infer(self, context: Any, notes: CallNotes) -> bytes:
        # No readiness check here: once the service stops, new calls are refused UNAVAILABLE
        # before they get here (GrpcServer.stop), and a call already taken (its message
        # perhaps still arriving when the stop began) is served to the end.
        self.calls_in_flight += 1
        context.add_done_callback(self._ended)
        # A large message's slices freed in gRPC's arenas go back to the system once the call
        # has been torn down, served or refused (a stalled upload cut off too).
        context.add_done_callback(lambda _: self.receiver.heap.after_call(notes.reserved))
        receiver = self.receiver

        async def read(reservation: Reservation) -> Body:
            notes.reservation = reservation
            return await receiver.message(context, reservation, notes)

        exchange = GrpcExchange(new_request(self.regions, notes.key))
        answer, reservation = await self.pipeline.run(read, exchange)
        if reservation.held:
            _release_when_done(context, reservation)
        return bytes(answer.buffers[0])

    def _ended(self, _: Any) -> None:
        self.calls_in_flight -= 1
        self.last_ended = time.monotonic()

    # Triton's extensions (docs/triton.md).

    async def model_config(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.ModelConfigRequest, context, notes)
        config = model_config(model(request.name, request.version or None))
        return pb.ModelConfigResponse(config=json_format.ParseDict(config, pb.ModelConfig()))

    async def model_statistics(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.ModelStatisticsRequest, context, notes)
        ops = statistics_models(request.name or None, request.version or None)
        response = pb.ModelStatisticsResponse()
        for item in self.pipeline.statistics.read(ops):
            # Empty, and not declared in the service's proto: absent on the wire is empty.
            for empty in ("response_stats", "batch_stats", "memory_usage"):
                item.pop(empty)
            json_format.ParseDict(item, response.model_stats.add())
        return response

    async def repository_index(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.RepositoryIndexRequest, context, notes)
        models = repository_index(request.ready)
        return pb.RepositoryIndexResponse(
            models=[pb.RepositoryIndexResponse.ModelIndex(**item) for item in models]
        )

    async def repository_model_load(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.RepositoryModelLoadRequest, context, notes)
        raise refuse_model_control(request.model_name, "load")

    async def repository_model_unload(self, context: Any, notes: CallNotes) -> Any:
        request = await self.parsed(pb.RepositoryModelUnloadRequest, context, notes)
        raise refuse_model_control(request.model_name, "unload")

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
        exchange = GrpcExchange(new_request(self.regions, key), stream=True)
        reservation: Reservation | None = None
        status: str | None = "UNKNOWN"
        sent, counted = 0, False

        async def read(held: Reservation) -> Body:
            nonlocal reservation, counted
            reservation = notes.reservation = held
            message = await self._next_message(context, held, notes, order, index)
            if message is None:
                raise _EndOfStreamError
            arrived()
            self.calls_in_flight += 1
            counted = True
            return message

        try:
            try:
                answer, reservation = await self.pipeline.run(read, exchange)
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
                return StreamOutcome(message, held, call.request_id, order=order)
            status = CODES[error.kind].name
            call.fault, call.field = logged_fault(error.problems[0])
            # Nothing came (``counted`` is set once a message is in hand: an empty one has no
            # bytes but came, and is answered as any other).
            if not notes.received and not counted:
                return StreamOutcome(b"", None, call.request_id, end=error)
            refusal = _stream_refusal(exchange.request, error)
            sent = len(refusal)
            return StreamOutcome(refusal, None, call.request_id)
        except asyncio.CancelledError:
            status = "CANCELLED"
            raise
        finally:
            if notes.reserved >= TRIM_FROM_BYTES:
                order.large = True
            if reservation is not None:
                await reservation.release()
            if counted:
                self._ended(None)
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
            return await self.receiver.next_message(context, held, notes)
        finally:
            self.stream_reads.leave()

    async def _room_to_read(self, held: Reservation, order: StreamOrder, index: int) -> None:
        """A turn among the streams' reads (``StreamReads``) and, while messages before this
        one are in hand, the read's worst case too. Those messages may still need memory
        (their outputs): a read that waited in line for the budget would hold them back behind
        it, waiting for memory they hold. So it goes ahead of them only into room free now;
        else it waits until they have been answered and have given back what they held, and
        then for its turn and its memory as a call waits for its message's."""
        reads = self.stream_reads
        if order.written < index:
            if reads.try_enter():
                if held.try_grow_to(RECEIVE_COPIES * self.receiver.limit):
                    return
                reads.leave()
            await order.written_up_to(index)
        await reads.enter()


class StreamReads:
    """The reads streams keep posted for their next message. Each holds the worst case of a
    message (``Receiver``) for as long as the client takes to send one, an idle stream's
    until the receive time limit: together they may hold at most half the budget (one read at
    least), so that streams kept open cannot take the memory other calls need. A stream past
    that share waits for a turn, first come first, up to the admission timeout (then busy,
    which ends the stream as a busy budget does)."""

    def __init__(self, capacity: int, worst_case: int, timeout: float) -> None:
        self.slots = max(1, capacity // 2 // max(1, worst_case))
        self.free = self.slots
        self.timeout = timeout
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    def try_enter(self) -> bool:
        """Take a turn now if one is free and nobody waits for one; whether it was taken."""
        if self._waiting or not self.free:
            return False
        self.free -= 1
        return True

    async def enter(self) -> None:
        """Take a turn, waiting for one in line (busy past the timeout)."""
        if self.try_enter():
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            await asyncio.wait_for(asyncio.shield(turn), self.timeout)
        except TimeoutError:
            if turn.done():  # handed over as the time ran out: taken after all
                return
            self._waiting.remove(turn)
            raise self._busy() from None
        except asyncio.CancelledError:
            if turn.done():
                self.leave()  # handed over, but its stream is gone
            else:
                self._waiting.remove(turn)
            raise

    def leave(self) -> None:
        """Give a turn back: to the first stream waiting for one, if any."""
        if self._waiting:
            self._waiting.popleft().set_result(None)
        else:
            self.free += 1

    def _busy(self) -> ServiceError:
        return ServiceError(
            Fault.BUSY,
            (),
            f"the service is busy: the {self.slots} stream reads this worker keeps posted "
            f"(half its memory budget) all wait for a message, and no turn came free within "
            f"{self.timeout:g} s (TENSOR_OPS_ADMISSION_TIMEOUT); retry later",
            headers={"Retry-After": str(max(1, math.ceil(self.timeout / 4)))},
        )


class StreamOrder:
    """How many of a stream's messages have been answered and given back what they held (in
    order, by its writer), for a read that must wait for those before it."""

    __slots__ = ("_waiter", "large", "posted", "unwritten", "written")

    def __init__(self) -> None:
        #: Messages whose reads have been posted (the next one's index).
        self.posted = 0
        self.written = 0
        #: The bytes held by answers made and not yet written (taken by the client).
        self.unwritten = 0
        #: A message of the stream held ``TRIM_FROM_BYTES`` or more (its end trims the heap).
        self.large = False
        #: The one read waiting (a stream reads one message at a time).
        self._waiter: asyncio.Future[None] | None = None

    def wrote(self) -> None:
        self.written += 1
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def written_up_to(self, count: int) -> None:
        """Once the first ``count`` messages have been written."""
        while self.written < count:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


class StreamOutcome:
    """A stream message's answer, in the order it must be written: its bytes and the
    reservation that holds them until then, or the refusal that ends the stream."""

    __slots__ = ("end", "message", "order", "request_id", "reservation")

    def __init__(
        self,
        message: bytes,
        reservation: Reservation | None,
        request_id: str,
        end: ServiceError | None = None,
        order: StreamOrder | None = None,
    ) -> None:
        self.message = message
        self.reservation = reservation
        self.request_id = request_id
        self.end = end
        #: The stream's count of unwritten bytes, which this answer's are part of until given
        #: back.
        self.order = order
        if order is not None and reservation is not None:
            order.unwritten += reservation.held

    async def release(self) -> None:
        self.release_now()

    def release_now(self) -> None:
        # The answer's bytes let go too: a task or a traceback that outlives the stream (the
        # error that ended it holds its frames) must not keep them.
        self.message = b""
        held, self.reservation = self.reservation, None
        if held is not None:
            if self.order is not None:
                self.order.unwritten -= held.held
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
#: The answers of one stream made and not yet taken by its client hold at most this share of
#: the budget (with the messages already in hand): past it, no next message is read until the
#: client takes some.
STREAM_UNWRITTEN_SHARE = 4


async def serve_stream(
    service: InferenceService, context: Any, route: str, given: str | None, key: str | None
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
    unwritten_limit = service.pipeline.budget.capacity // STREAM_UNWRITTEN_SHARE

    def room() -> bool:
        return len(posted) < STREAM_WINDOW and order.unwritten < unwritten_limit

    def post() -> None:
        posted.append(
            asyncio.ensure_future(
                service.stream_message(context, route, given, key, arrived, order, order.posted)
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
            # Its buffers, freed as gRPC tears the stream down, go back to the system.
            service.receiver.heap.after_call(TRIM_FROM_BYTES)
        # A message whose work is in a thread ends when the thread does: the stream's end waits
        # for them, so that the stop sees the memory back.
        await asyncio.gather(*unfinished, return_exceptions=True)


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
    tags = [(REQUEST_ID_KEY, request_id), *_fault_tags(error)]
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


#: ModelStreamInferResponse.infer_response.
STREAM_RESPONSE_FIELD = pb.ModelStreamInferResponse.DESCRIPTOR.fields_by_name[
    "infer_response"
].number
STREAM_METHOD = "ModelStreamInfer"


def _fault_tags(error: ServiceError) -> list[tuple[str, str]]:
    """A refusal's trailing metadata: its fault's kind and its own headers."""
    tags = [(name.lower(), value) for name, value in fault_headers(error).items()]
    tags.extend((name.lower(), value) for name, value in error.headers.items())
    return tags


def observed_stream(
    service: InferenceService,
) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]:
    """``ModelStreamInfer``: the key checked once, from the stream's metadata, before any
    message is read (a refusal ends the stream UNAUTHENTICATED, logged); then each message
    served in turn (``InferenceService.stream_message``), each with its own log line, metrics,
    statistics and reservation. A cancelled stream gives back what its message in hand holds."""
    route = f"/{SERVICE_NAME}/{STREAM_METHOD}"
    access = service.access
    keys = access.keys if access is not None and access.grpc_needs_key(route) else None

    async def handle(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        metadata = context.invocation_metadata() or ()
        given, _ = metadata_value(metadata, REQUEST_ID_KEY)
        key = None
        if keys is not None:
            value, count = metadata_value(metadata, AUTHORIZATION_KEY)
            try:
                key = keys.admit_value(value, count)
            except ServiceError as error:
                refused = Observation(given, CODES[error.kind].name)
                refused.fault, refused.field = logged_fault(error.problems[0])
                refused.finish("gRPC", route, route)
                tags = [(REQUEST_ID_KEY, refused.request_id), *_fault_tags(error)]
                await context.abort(CODES[error.kind], error.message, tuple(tags))
        await serve_stream(service, context, route, given, key)

    if tracing.TRACER is None:
        return handle
    return tracing.grpc_spans(route, handle, FAULT_KEY)  # the stream in one span


def _tensor_metadata(item: dict[str, Any]) -> Any:
    return pb.ModelMetadataResponse.TensorMetadata(
        name=item["name"], datatype=item["datatype"], shape=item["shape"]
    )


def _size(message: Any) -> int:
    return len(message) if isinstance(message, bytes) else int(message.ByteSize())


def metadata_value(metadata: Any, key: str) -> tuple[str | None, int]:
    """The value of ``key`` in a call's metadata (the first one) and how many entries name it."""
    value: str | None = None
    count = 0
    for name, item in metadata or ():
        if name == key:
            count += 1
            if value is None and isinstance(item, str):
                value = item
    return value, count


def observed(
    method: str, call: Call, access: AccessControl | None = None, send: SendWatch | None = None
) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]:
    """``call`` with its request id, metrics and log line, its key checked (with ``access``)
    before its message is read, and its refusals as gRPC statuses (the message HTTP's
    ``{"error"}`` would hold, the fault's kind in trailing metadata).

    With ``send``, the answer is written here (the method served as a stream of one answer:
    the same frames on the wire), held to the minimum send rate, and the log line says how its
    way out ended: taken (OK), the client gone first (CANCELLED), or not taken at the rate
    (DEADLINE_EXCEEDED, its connection shut)."""
    route = f"/{SERVICE_NAME}/{method}"
    keys = access.keys if access is not None and access.grpc_needs_key(route) else None

    async def handle(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        metadata = context.invocation_metadata() or ()
        given, _ = metadata_value(metadata, REQUEST_ID_KEY)
        seen = Observation(given, "UNKNOWN")
        tags: list[tuple[str, str]] = [(REQUEST_ID_KEY, seen.request_id)]
        notes = CallNotes()
        error: ServiceError | None = None
        try:
            try:
                if keys is not None:
                    value, count = metadata_value(metadata, AUTHORIZATION_KEY)
                    seen.key = notes.key = keys.admit_value(value, count)
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
                    context.set_trailing_metadata(tags)
                if send is not None:
                    await _send_answer(send, context, response, notes, seen)
                    return None
                return response
            code = CODES[error.kind]
            seen.status = code.name
            seen.fault, seen.field = logged_fault(error.problems[0])
            message = error.message
            tags.extend((name.lower(), value) for name, value in fault_headers(error).items())
            tags.extend((name.lower(), value) for name, value in error.headers.items())
            error = None
            await context.abort(code, message, tuple(tags))
        finally:
            seen.bytes_in, seen.reserved = notes.received, notes.reserved
            seen.finish("gRPC", route, route)

    if tracing.TRACER is None:
        return handle
    return tracing.grpc_spans(route, handle, FAULT_KEY)  # each call in a server span


async def _send_answer(
    send: SendWatch, context: Any, message: bytes, notes: CallNotes, seen: Observation
) -> None:
    """A call's one answer written, watched on its way out (``SendWatch``). A write that
    fails (gRPC's ``ExecuteBatchError``: the call was ended under it) ends the call as a
    cancellation: it is the client's doing or its connection's, not a server error."""
    watch = send.arm(context, len(message), notes.was_cut)
    try:
        await context.write(message)
    except asyncio.CancelledError:
        seen.status = "CANCELLED" if notes.cut_after is None else "DEADLINE_EXCEEDED"
        raise
    except Exception:
        seen.status = "CANCELLED" if notes.cut_after is None else "DEADLINE_EXCEEDED"
        raise asyncio.CancelledError from None
    finally:
        disarm(watch)


def inference_handler(service: InferenceService) -> grpc.GenericRpcHandler:
    """The service's methods for a ``grpc.aio`` server. Each is served as a client-streaming
    method, so that nothing of its message is read (nor inflated) before its key has been
    checked and its memory reserved: each call reads its one message itself. A message gRPC
    parsed itself would fail as UNKNOWN, unlogged; here it is INVALID_ARGUMENT and logged.
    ``ModelInfer`` is framed by ``GrpcExchange``, and answers bytes."""

    def method(call: Call, name: str, answers_bytes: bool = False) -> Any:
        if answers_bytes:
            # Served as a stream of one answer, written by the handler itself: its way out
            # is watched (``observed``'s ``send``). On the wire, a unary call's frames.
            return grpc.stream_stream_rpc_method_handler(
                observed(name, call, service.access, service.send_watch)
            )
        return grpc.stream_unary_rpc_method_handler(
            observed(name, call, service.access), response_serializer=_serialized
        )

    return grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {
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
            "RepositoryModelUnload": method(
                service.repository_model_unload, "RepositoryModelUnload"
            ),
            # Triton's shared memory extension (app/v2/shared_memory.py)
            **{name: method(call, name) for name, call in grpc_calls(service).items()},
        },
    )


def _serialized(message: Any) -> bytes:
    return bytes(message.SerializeToString())
