"""A ``ModelInfer`` answer's bytes: one output or several, as raw contents (joined in one copy)
or typed contents, wrapped as a ``ModelStreamInferResponse`` for a stream."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from app.codecs.grpc_tensors import encode_typed, encode_typed_several
from app.codecs.v2_tensors import v2_datatype, v2_output_buffer, wire_dtype
from app.grpc.status import LARGEST_MESSAGE
from app.pipeline.jobs import Job
from app.pipeline.run import Answer
from app.v2.rules import OUTPUT_NAME, model_version
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2.framing import RAW_OUTPUT_FIELD, join_raw, nested

#: Room beside the output for an answer's names, shape, id and framing; no message may pass
#: 2 GiB - 1 (gRPC's and protobuf's limit).
ANSWER_HEAD_ROOM = 1 << 20
#: ModelStreamInferResponse.infer_response.
STREAM_RESPONSE_FIELD = pb.ModelStreamInferResponse.DESCRIPTOR.fields_by_name[
    "infer_response"
].number


def answer_limit(max_output_bytes: int) -> int:
    """The largest answer the service sends: the output limit and room for a head."""
    return min(max_output_bytes + ANSWER_HEAD_ROOM, LARGEST_MESSAGE)


def raw_answer(job: Job, datatype: str, request_id: str, stream: bool) -> Answer:
    """The answer of an op of one output as raw contents, the output copied once into it (a
    stream's wrapped in the same copy)."""
    output = job.output(v2_output_buffer(job.output_shape, job.output_dtype))
    version = model_version(job.op)
    if not stream and len(request_id) <= _CACHED_ID:
        # The head and the raw entry's framing, made once per op, type, shape and id; the
        # output joined to them in one copy (what ``join_raw`` writes). A C-ordered array's
        # buffer is its bytes in order whatever its shape and type: the array itself is joined
        # (not ``.data``: a memoryview asks for a format, which NumPy has none for bfloat16's).
        whole: Any = output if output.flags.c_contiguous else np.ascontiguousarray(output)
        start = _raw_answer_start(
            job.op.name, version, datatype, job.output_shape, request_id, whole.nbytes
        )
        return Answer([b"".join((start, whole))], "application/grpc")
    raw = np.ascontiguousarray(output).reshape(-1).view(np.uint8)
    head = (
        _raw_answer_head(job.op.name, version, datatype, job.output_shape, request_id)
        if len(request_id) <= _CACHED_ID
        else _answer_head(job.op.name, version, datatype, job.output_shape, request_id)
    )
    if not stream:
        return Answer([join_raw(head, RAW_OUTPUT_FIELD, [raw])], "application/grpc")
    # Wrapped as a stream's answer in the same single copy of the output.
    pieces = nested(STREAM_RESPONSE_FIELD, [head, *nested(RAW_OUTPUT_FIELD, [raw])])
    return Answer([b"".join(pieces)], "application/grpc")


def typed_answer(job: Job, datatype: str, request_id: str) -> Answer:
    """The answer of an op of one output as typed contents."""
    response = pb.ModelInferResponse(
        model_name=job.op.name, model_version=model_version(job.op), id=request_id
    )
    tensor = pb.ModelInferResponse.InferOutputTensor(
        name=OUTPUT_NAME, datatype=datatype, shape=job.output_shape
    )
    return Answer([encode_typed(response, tensor, job.output())], "application/grpc")


def several_answer(
    job: Job, datatype: str, request_id: str, requested: frozenset[str] | None, raw: bool
) -> Answer:
    """The answer of an op of several outputs (Split-1): every output asked for (None: all),
    in order, as raw contents (one entry each) or typed contents."""
    response = pb.ModelInferResponse(
        model_name=job.op.name, model_version=model_version(job.op), id=request_id
    )
    named = [
        (name, output)
        for name, output in zip(job.output_names, job.outputs(), strict=True)
        if requested is None or name in requested
    ]
    outputs = [output for _, output in named]
    if raw:
        for name, output in named:
            response.outputs.add(name=name, datatype=v2_datatype(output.dtype), shape=output.shape)
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


def wrapped(answer: Answer, stream: bool) -> Answer:
    """A stream's answer: the ``ModelInferResponse`` as the ``infer_response`` of a
    ``ModelStreamInferResponse``; a call's as it is."""
    if not stream:
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


@functools.lru_cache(maxsize=512)
def _raw_answer_start(
    op: str, version: str, datatype: str, shape: tuple[int, ...], request_id: str, nbytes: int
) -> bytes:
    """An answer's bytes before its output of ``nbytes``: its head (``_answer_head``), the raw
    entry's tag and its length."""
    head = _answer_head(op, version, datatype, shape, request_id)
    return head + _varint(RAW_OUTPUT_FIELD << 3 | _LENGTH_DELIMITED) + _varint(nbytes)


#: protobuf's wire type of a length-delimited field.
_LENGTH_DELIMITED = 2


def _varint(value: int) -> bytes:
    """``value`` as a protobuf varint: seven bits a byte, the lowest first."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
