"""One ``ModelInfer`` message through the request pipeline (``GrpcExchange``): its raw contents
split out of the received bytes without a copy, the rest parsed and decoded into a job, and
the answer's bytes made (``answer.py``)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from google.protobuf.message import DecodeError

from app.codecs.grpc_tensors import (
    ARENA_BYTES_PER_ELEMENT,
    can_be_typed,
    decode_contents,
    typed_bytes,
    typed_wire_bytes,
)
from app.codecs.v2_tensors import decode_v2_binary, v2_datatype
from app.errors import (
    Fault,
    ServiceError,
    from_wire,
)
from app.grpc.answer import (
    answer_limit,
    raw_answer,
    several_answer,
    typed_answer,
    wrapped,
)
from app.grpc.heads import (
    HEADS,
    LARGEST_HEAD,
    MOST_TENSORS,
    Head,
    HeadCache,
    HeadKey,
    InputHead,
    head_key,
)
from app.grpc.shared_memory import grpc_answer, raw_positions
from app.grpc.status import unreadable
from app.pipeline.jobs import Job, Limits, make_job
from app.pipeline.run import Answer, Body
from app.registry import Op, version_of
from app.v2.rules import (
    INPUT_EXTENSIONS,
    OUTPUT_EXTENSIONS,
    model,
    op_attributes,
    read_inputs,
    refuse_extensions,
    requested_outputs,
    wants_binary,
)
from app.v2.shared_memory import (
    INPUT_EXTENSIONS_ON,
    OUTPUT_EXTENSIONS_ON,
    SharedTensors,
    decoded_checked,
)
from tensor_ops_wire.errors import TensorError
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2.framing import (
    RAW_INPUT_FIELD,
    FramingError,
    entry,
    split_raw,
    split_raw_counted,
)

INPUTS_NUMBER = pb.ModelInferRequest.DESCRIPTOR.fields_by_name["inputs"].number
#: An output's V2 datatype, worked out once per element type (a dtype's lookup makes a dtype
#: of native byte order each time: a few microseconds of a small answer). Bounded by the
#: element types served: an unsupported one raises, and nothing is kept for it.
_output_datatype = functools.cache(v2_datatype)


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


#: An exchange's request until its message is parsed (one empty message, never changed:
#: read only, for its empty model name and id).
_NO_REQUEST = pb.ModelInferRequest()


class GrpcExchange:
    """One ``ModelInfer`` call: its message's raw contents split out, the rest parsed."""

    def __init__(
        self, shared: SharedTensors | None = None, stream: bool = False, heads: HeadCache = HEADS
    ) -> None:
        #: A message of a ``ModelStreamInfer`` stream: its answer is written wrapped in a
        #: ``ModelStreamInferResponse``, in the same single copy as the output's.
        self.stream = stream
        self.head = b""
        #: The raw contents as views of the message (or, of a message protobuf parsed whole,
        #: its copies of them); None: not yet split out.
        self.raw: list[memoryview] | list[bytes] | None = None
        self.request = _NO_REQUEST
        self.raw_output = True
        #: Tensors in shared memory (None: the extension is off).
        self.shared = shared
        self.shared_output = False
        #: The outputs the message names, of an op of several (None: all of them).
        self.requested: frozenset[str] | None = None
        #: Heads that passed their checks before (the worker's, unless a test gives its own).
        self.heads = heads

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
                raise unreadable(str(error)) from None
        # The head holds names, shapes and parameters, and typed contents when there are any:
        # parsed, each element takes up to 8 bytes of protobuf's arena for each byte (at least)
        # on the wire, and as much again as an array. Each top-level entry (an input, an
        # output, a parameter) is a message of its own, and a Python object when read.
        return _TYPED_BYTES_PER_WIRE_BYTE * len(self.head) + _ENTRY_BYTES * entries

    def decode(self, limits: Limits) -> Job:
        if self.shared is None:  # no region to verify: a refusal is the request's own
            return self._decode(limits)
        return decoded_checked(self.shared, lambda: self._decode(limits))

    def _decode(self, limits: Limits) -> Job:
        small = self.raw is None  # parsed whole by protobuf (``prepare``)
        if small:
            # Laid out as a message whose head was found kept: that head, without a parse.
            matched = self.heads.match(self.head, self.shared is None, limits)
            if matched is not None:
                kept, self.request, self.raw = matched
                return self._known(kept, limits)
        try:
            request = pb.ModelInferRequest.FromString(self.head)
        except DecodeError as error:
            reason = str(error)
            try:  # the framing's own words, when that is what is wrong
                split_raw(self.head, RAW_INPUT_FIELD)
            except FramingError as framing:
                reason = str(framing)
            raise unreadable(reason) from None
        if self.raw is None:
            # protobuf's copies of the raw contents (a small message's few bytes).
            self.raw = list(request.raw_input_contents)
        self.request = request
        shared = self.shared
        key = self._head_key(request, limits)
        if key is not None:
            known = self.heads.get(key)
            if known is not None:
                if small:
                    # ``_head_key`` left the request without its raw contents: kept as it is.
                    self.heads.keep_layout(self.head, request, key, limits)
                return self._known(known, limits)
        op = model(request.model_name, request.model_version or None)
        parameters = parameter_values(request.parameters)
        # Lazily: a message may name an output a million times, each read and let go.
        outputs = ((item.name, parameter_values(item.parameters)) for item in request.outputs)
        extensions = OUTPUT_EXTENSIONS if shared is None else OUTPUT_EXTENSIONS_ON
        self.raw_output = wants_binary(
            parameters, outputs, default=True, extensions=extensions, op=op
        )
        arrays = self._inputs(request, op, limits)
        attributes = op_attributes(op, parameters)
        head = None
        if key is not None and (shared is None or raw_positions(request.inputs) is None):
            # Every input in raw contents: what the head asks for may be kept, once the whole
            # message has passed (a copy, before make_job holds the attributes).
            head = _head_of(request, op, self.raw_output, attributes)
        job = make_job(op, arrays, attributes, limits)
        self.requested = requested_outputs(job, (item.name for item in request.outputs))
        if shared is not None and shared.place_output(
            ((item.name, parameter_values(item.parameters)) for item in request.outputs), job
        ):
            self.shared_output = True  # written into the client's region, not sent
        else:
            self._refuse_what_cannot_be_sent(job, limits)
        if key is not None and head is not None:
            self.heads.put(key, head)
        return job

    def _head_key(self, request: Any, limits: Limits) -> HeadKey | None:
        """The key of the message's head, when what it asks for may be kept: its inputs all in
        raw contents (none in typed contents, which are values), a few inputs and outputs, a
        head of a few KiB. None: the message is checked in full, and nothing is kept."""
        raw = self.raw
        if (
            not raw
            or len(request.inputs) > MOST_TENSORS
            or len(request.outputs) > MOST_TENSORS
            # What is left of the message without its raw contents' bytes (their framing
            # left in: more than the head, never less).
            or len(self.head) - sum(map(len, raw)) > LARGEST_HEAD
        ):
            return None
        # Raw contents are values, not the head's, and were taken out above; the id is only
        # sent back (a client may give each call its own), and no check reads it. The head's
        # bytes are the rest of the message, written in one way (map entries sorted), so that
        # equal bytes are an equal head.
        request.ClearField("raw_input_contents")
        request_id = request.id
        if request_id:
            request.ClearField("id")
        head = request.SerializeToString(deterministic=True)
        if request_id:
            request.id = request_id
        return head_key(head, len(raw), self.shared is None, limits)

    def _known(self, head: Head, limits: Limits) -> Job:
        """A job from a message whose head passed its checks before (``Head``): each input
        decoded from its raw contents, then the spec's checks of the values, the outputs asked
        for and the answer's size, as for any message (the checks of the inputs' shapes and
        types alone passed for this head: ``make_job``'s ``inputs_checked``)."""
        raw = self.raw
        assert raw is not None  # a key is made only for a message with raw contents
        self.raw_output = head.raw_output
        arrays: dict[str, Any] = {}
        for index, item in enumerate(head.inputs):
            try:
                arrays[item.name] = item.decoded(raw[index])
            except TensorError as error:
                raise from_wire(error, item.name) from None
        job = make_job(head.op, arrays, dict(head.attributes), limits, inputs_checked=True)
        outputs = head.outputs
        # No output named: all of them asked for (``requested`` None), none in shared memory.
        if outputs:
            self.requested = requested_outputs(job, (name for name, _ in outputs))
            shared = self.shared
            if shared is not None and shared.place_output(
                ((name, dict(parameters)) for name, parameters in outputs), job
            ):
                self.shared_output = True  # written into the client's region, not sent
                return job
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

    def let_go(self) -> None:
        """Drop the message (its bytes, the views of them, what was parsed of it): a stream's
        message is done with once answered or refused, whatever still holds this exchange."""
        self.head, self.raw, self.request = b"", None, _NO_REQUEST

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
        # A refusal while it ran (a check the plan left to the kernel) gives way to the
        # region's own, as decoding's does; and no object of the request was cut short.
        shared = self.shared
        if shared is None:
            return self._encode(job)
        answer = decoded_checked(shared, lambda: self._encode(job))
        shared.verify()
        return answer

    def _encode(self, job: Job) -> Answer:
        request_id = self.request.id
        if self.shared_output:
            assert self.shared is not None
            return wrapped(grpc_answer(job, request_id, self.shared), self.stream)
        datatype = _output_datatype(job.output_dtype)
        raw = self._raw_output(job)
        if job.split is not None:
            answer = several_answer(job, datatype, request_id, self.requested, raw)
            return wrapped(answer, self.stream)
        if raw:
            return raw_answer(job, datatype, request_id, self.stream)
        return wrapped(typed_answer(job, datatype, request_id), self.stream)


def _head_of(request: Any, op: Op, raw_output: bool, attributes: dict[str, Any]) -> Head:
    """What a message's head asked for, once every check of it has passed."""
    return Head(
        op,
        raw_output,
        dict(attributes),
        tuple(InputHead.of(item.name, tuple(item.shape), item.datatype) for item in request.inputs),
        tuple((item.name, parameter_values(item.parameters)) for item in request.outputs),
    )
