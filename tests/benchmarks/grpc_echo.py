"""A bare ``grpc.aio`` server, the anchor of the gRPC benchmarks: what the transport costs with no
work. ``ModelInfer`` answers the tensor it was sent.

    TENSOR_OPS_GRPC_PORT=8001 TENSOR_OPS_PORT=8002 .venv/bin/python -m tests.benchmarks.grpc_echo

- ``/inference.GRPCInferenceService/ModelInfer``: a ``ModelInferResponse`` whose only output is
  the request's first input (its name, datatype and shape) and whose ``raw_output_contents`` is
  the request's first ``raw_input_contents``, byte for byte;
- ``/inference.GRPCInferenceService/ModelStreamInfer``: the same answer to each message of a
  stream, wrapped as a ``ModelStreamInferResponse``, in order;
- ``GET /health`` over plain HTTP on ``TENSOR_OPS_PORT``: what ``launch_server`` of
  ``tests/support.py`` waits for, so the echo is started exactly as the service is.

The cheapest honest echo: bytes in and out, no protobuf (de)serialiser on the method. The raw
contents are split out of the received bytes as views (``split_raw``, no copy), the small rest is
parsed by protobuf for the first input's name, datatype and shape, and the answer is the
serialised head with the tensor appended by ``join_raw``: one copy of the tensor, which any
answer made of a head and the tensor needs (gRPC's Python layer sends one ``bytes`` object).
The service makes that same copy, so what it costs beyond this echo is its own work.
The server's options are the service's (``app/grpc/server.py``): the largest
message sizes gRPC allows, nothing else.

Two variants, to tell what the service's way of serving costs by itself (docs/benchmarks.md,
gRPC): ``ECHO_INFER_AS_STREAM=1`` serves ``ModelInfer`` as the service does, a stream handler
that reads its one message and writes its one answer itself (on the wire, a unary call's
frames); ``ECHO_UVLOOP=1`` runs on uvloop, the service's loop, instead of asyncio's own.

``ECHO_ROLL=1`` makes it the anchor that does the work too, as ``POST /roll`` of
``tests/benchmarks/echo_app.py`` is for HTTP: ``ModelInfer`` answers the roll the message asks
for by the same NumPy call (``np.roll`` of ``data`` by ``shift`` over ``axes``, each a view of
its raw contents) and nothing else: no checks of the spec, no memory budget, no log line, no
metrics.
"""

import asyncio
import os
from typing import Any

import grpc
import grpc.aio
import numpy as np

from tensor_ops_wire.dtypes import ELEMENT_TYPES
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2.framing import RAW_INPUT_FIELD, RAW_OUTPUT_FIELD, join_raw, split_raw

SERVICE_NAME = "inference.GRPCInferenceService"
LARGEST_MESSAGE = 2**31 - 1
#: ModelStreamInferResponse.infer_response.
STREAM_RESPONSE_FIELD = 2
_HEALTH = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n{"status":"ok"}'


def echo_answer(message: bytes) -> bytes:
    """The ``ModelInferResponse`` that sends the first input of ``message`` back."""
    head, raw = split_raw(message, RAW_INPUT_FIELD)
    request = pb.ModelInferRequest.FromString(head)
    first = request.inputs[0]
    response = pb.ModelInferResponse(
        model_name=request.model_name, model_version="1", id=request.id
    )
    response.outputs.add(name=first.name, datatype=first.datatype, shape=first.shape)
    return join_raw(response.SerializeToString(), RAW_OUTPUT_FIELD, raw[:1])


#: The element types of the raw contents the roll's anchor reads, by V2 datatype (the wire's
#: table of element types; the raw contents are little-endian, as this machine).
WIRE_DTYPES = {element.kserve: element.dtype for element in ELEMENT_TYPES}


def roll_answer(message: bytes) -> bytes:
    """The ``ModelInferResponse`` of the roll ``message`` asks for (``ECHO_ROLL=1``): its inputs
    read from their raw contents by name, ``np.roll(data, shift, axes)``, the rolled tensor
    joined to the answer's head. The message is trusted: nothing is checked."""
    head, raw = split_raw(message, RAW_INPUT_FIELD)
    request = pb.ModelInferRequest.FromString(head)
    tensors = {
        item.name: np.frombuffer(contents, WIRE_DTYPES[item.datatype]).reshape(tuple(item.shape))
        for item, contents in zip(request.inputs, raw, strict=True)
    }
    rolled = np.roll(tensors["data"], tensors["shift"].tolist(), tensors["axes"].tolist())
    datatype = next(item.datatype for item in request.inputs if item.name == "data")
    response = pb.ModelInferResponse(
        model_name=request.model_name, model_version="1", id=request.id
    )
    response.outputs.add(name="output", datatype=datatype, shape=rolled.shape)
    return join_raw(response.SerializeToString(), RAW_OUTPUT_FIELD, [rolled])


async def model_infer(message: bytes, context: Any) -> bytes:
    return echo_answer(message)


async def model_infer_roll(message: bytes, context: Any) -> bytes:
    return roll_answer(message)


async def model_infer_as_stream(requests: Any, context: Any) -> None:
    """``ModelInfer`` served as the service serves it (``ECHO_INFER_AS_STREAM=1``): a stream
    handler that reads its one message with ``context.read()`` and writes its one answer with
    ``context.write()``; on the wire, a unary call's frames."""
    message = await context.read()
    if message is not grpc.aio.EOF:
        await context.write(echo_answer(message))


async def model_infer_read(requests: Any, context: Any) -> bytes:
    """``ModelInfer`` served as a client stream of one message read with ``context.read()``,
    its answer returned (``ECHO_INFER_AS_STREAM=read``)."""
    message = await context.read()
    return echo_answer(message)


async def model_stream_infer(requests: Any, context: Any) -> None:
    """Each message of the stream answered as ``ModelStreamInferResponse``'s ``infer_response``
    (field 2), in the order they came, the next message read while the answers are written (as
    the service does): the stream's floor. Messages are read with ``context.read()``, as the
    service reads them, not through ``requests`` (an async iterator's step a message)."""
    answers: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def read() -> None:
        while (message := await context.read()) is not grpc.aio.EOF:
            answers.put_nowait(join_raw(b"", STREAM_RESPONSE_FIELD, [echo_answer(message)]))
        answers.put_nowait(None)

    reader = asyncio.ensure_future(read())
    try:
        while (answer := await answers.get()) is not None:
            await context.write(answer)
    finally:
        reader.cancel()


async def health(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A minimal HTTP/1.1 answer to any request: 200 with ``{"status":"ok"}``, then close."""
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(_HEALTH)
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(host: str, grpc_port: int, http_port: int) -> None:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", LARGEST_MESSAGE),
            ("grpc.max_send_message_length", LARGEST_MESSAGE),
        ]
    )
    # Bytes in, bytes out: no (de)serialiser.
    handlers: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
        "ModelInfer": (
            grpc.stream_stream_rpc_method_handler(model_infer_as_stream)
            if os.environ.get("ECHO_INFER_AS_STREAM") == "1"
            else grpc.stream_unary_rpc_method_handler(model_infer_read)
            if os.environ.get("ECHO_INFER_AS_STREAM") == "read"
            else grpc.unary_unary_rpc_method_handler(
                model_infer_roll if os.environ.get("ECHO_ROLL") == "1" else model_infer
            )
        ),
        "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(model_stream_infer),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_insecure_port(f"{host}:{grpc_port}")
    await server.start()
    http = await asyncio.start_server(health, host, http_port)
    try:
        await server.wait_for_termination()
    finally:
        http.close()
        await server.stop(1)


def main() -> None:
    host = os.environ.get("TENSOR_OPS_HOST", "127.0.0.1")
    grpc_port = int(os.environ.get("TENSOR_OPS_GRPC_PORT", "8001"))
    http_port = int(os.environ.get("TENSOR_OPS_PORT", "8000"))
    if os.environ.get("ECHO_UVLOOP") == "1":
        import uvloop  # noqa: PLC0415  # only in this variant

        uvloop.run(serve(host, grpc_port, http_port))
    else:
        asyncio.run(serve(host, grpc_port, http_port))


if __name__ == "__main__":
    main()
