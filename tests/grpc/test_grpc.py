"""The gRPC adapter in-process: its codes, typed contents, memory, deadlines, shutdown, health,
reflection, metrics and logs (the conformance cases run through tritonclient in
``tests/grpc/test_tritonclient_grpc.py``, the fault table in ``tests/transports/test_transport_consistency.py``)."""

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
import grpc.aio
import numpy as np
import numpy.typing as npt
import pytest
from fastapi import FastAPI
from google.protobuf import json_format, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from app.codecs.grpc_tensors import packed_varints
from app.errors import Fault
from app.grpc.exchange import GrpcExchange
from app.grpc.server import GrpcServer
from app.grpc.status import CODES, SERVICE_NAME
from app.main import create_app
from app.metrics import REQUEST_TALLY, REQUESTS
from app.ops import gather, roll
from app.settings import Settings
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tensor_ops_wire.grpc_v2.framing import fields, join_raw, nested
from tests.support import (
    DTYPES,
    TYPED_CONTENTS,
    assert_same_bits,
    grpc_channel,
    grpc_serving,
    inference_stub,
    raw_infer,
    v2_name,
)

pytestmark = pytest.mark.anyio

Array = npt.NDArray[Any]
INFER = f"/{SERVICE_NAME}/ModelInfer"


def request(
    model: str, arrays: Mapping[str, Any], *, typed: bool = False, **parameters: Any
) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name=model)
    for name, array in arrays.items():
        tensor = message.inputs.add(
            name=name, datatype=v2_name(array.dtype), shape=list(array.shape)
        )
        if typed:
            getattr(tensor.contents, TYPED_CONTENTS[v2_name(array.dtype)]).extend(
                array.reshape(-1).tolist()
            )
        else:
            little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
            message.raw_input_contents.append(little.tobytes())
    for name, value in parameters.items():
        if isinstance(value, bool):
            message.parameters[name].bool_param = value
        elif isinstance(value, int):
            message.parameters[name].int64_param = value
        else:
            message.parameters[name].string_param = value
    return message


ROLL: dict[str, Array] = {
    "data": np.arange(6, dtype=np.float32).reshape(2, 3),
    "shift": np.array([1], np.int64),
    "axes": np.array([1], np.int64),
}


def one_dim(data: Array) -> dict[str, Array]:
    """Roll's inputs for a 1-D ``data``."""
    return {"data": data, "shift": np.array([1], np.int64), "axes": np.array([0], np.int64)}


@pytest.fixture
async def address(app: FastAPI) -> AsyncIterator[str]:
    async with grpc_serving(app) as served:
        yield served


@pytest.fixture
async def stub(address: str) -> AsyncIterator[Any]:
    async with grpc_channel(address) as channel:
        yield inference_stub(channel)


async def refusal(stub: Any, message: Any, **options: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ModelInfer(message, **options)
    return caught.value


def output_of(response: Any) -> Array:
    [tensor] = response.outputs
    dtype = DTYPES[tensor.datatype].newbyteorder("<")
    if response.raw_output_contents:
        flat = np.frombuffer(response.raw_output_contents[0], dtype=dtype)
    else:
        values = getattr(tensor.contents, TYPED_CONTENTS[tensor.datatype])
        flat = np.array(list(values)).astype(dtype)
    return flat.reshape(list(tensor.shape))


def test_every_fault_kind_has_a_code_and_client_faults_are_never_internal() -> None:
    assert set(CODES) == set(Fault)
    for kind, code in CODES.items():
        if kind is not Fault.INTERNAL:
            assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), kind
            # The contract's mapping: 400/422 -> INVALID_ARGUMENT, 413/503 -> RESOURCE_EXHAUSTED.
            if kind.status in (400, 422) and kind not in (Fault.NOT_OFFERED, Fault.DISCONNECTED):
                assert code is grpc.StatusCode.INVALID_ARGUMENT, kind
            if kind.status == 413 or kind is Fault.BUSY:
                assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, kind
    assert CODES[Fault.SHUTTING_DOWN] is grpc.StatusCode.UNAVAILABLE
    assert CODES[Fault.NOT_FOUND] is grpc.StatusCode.NOT_FOUND
    assert CODES[Fault.UNAUTHENTICATED] is grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("datatype", list(TYPED_CONTENTS))
async def test_typed_contents_both_ways(stub: Any, datatype: str) -> None:
    """Typed contents in, and typed contents out when the output is asked for as non-binary."""
    data = (np.arange(12).reshape(3, 4) % 7 * 9).astype(DTYPES[datatype])
    indices = np.array([[2, -1], [0, 4]], np.int32)
    axis = np.array(1, np.int64)
    arrays = {"data": data, "indices": indices, "axis": axis}
    message = request("gather", arrays, typed=True, binary_data_output=False)
    response = await stub.ModelInfer(message)
    assert not response.raw_output_contents
    assert_same_bits(output_of(response), gather(data, indices, axis))
    # The same request without the parameter answers raw contents (Triton's default).
    raw = await stub.ModelInfer(request("gather", arrays, typed=True))
    assert len(raw.raw_output_contents) == 1
    assert_same_bits(output_of(raw), gather(data, indices, axis))


async def test_half_float_outputs_are_raw_even_when_typed_is_asked_for(stub: Any) -> None:
    data = np.array([1.5, -2.25, 65504.0], np.float16)
    arrays = {"data": data, "shift": np.array(1, np.int64), "axes": np.array(0, np.int64)}
    response = await stub.ModelInfer(request("roll", arrays, binary_data_output=False))
    assert len(response.raw_output_contents) == 1
    assert_same_bits(output_of(response), roll(data, np.array(1), np.array(0)))


@pytest.mark.parametrize(
    ("dtype", "patterns"),
    [
        ("float32", [0x7F80_0001, 0xFF80_0001, 0x7FC0_1234, 0x8000_0000]),
        ("float64", [0x7FF0_0000_0000_0001, 0xFFF0_0000_0000_0001, 0x8000_0000_0000_0000]),
    ],
)
@pytest.mark.parametrize("typed_output", [True, False])
async def test_typed_floats_keep_every_bit(
    address: str, dtype: str, patterns: list[int], typed_output: bool
) -> None:
    """A signalling NaN in typed contents (written on the wire, as a C++ or Go client would)
    comes back with its payload, as typed or raw contents."""
    width = np.dtype(dtype).itemsize
    data = np.array(patterns, dtype=f"<u{width}").view(f"<f{width}")
    number = pb.InferTensorContents.DESCRIPTOR.fields_by_name[
        TYPED_CONTENTS[v2_name(np.dtype(dtype))]
    ].number
    tensor = pb.ModelInferRequest.InferInputTensor(
        name="data", datatype=v2_name(np.dtype(dtype)), shape=[len(patterns)]
    ).SerializeToString()
    contents = nested(number, [data.view(np.uint8)])
    head = pb.ModelInferRequest(model_name="roll")
    for name in ("shift", "axes"):
        item = head.inputs.add(name=name, datatype="INT64", shape=[1])
        item.contents.int64_contents.append(1 if name == "shift" else 0)
    if typed_output:
        head.parameters["binary_data_output"].bool_param = False
    # ``data`` first: the inputs field (5) holding its message, then the other two inputs.
    first = join_raw(b"", 5, [b"".join([tensor, *nested(5, contents)])])
    message = first + head.SerializeToString()
    async with grpc_channel(address) as channel:
        answer = await raw_infer(channel)(message)
    response = pb.ModelInferResponse.FromString(answer)
    assert bool(response.raw_output_contents) is not typed_output
    [output] = response.outputs
    if typed_output:
        # protobuf's Python floats would quiet the NaN: the bits are read from the answer's wire.
        assert np.roll(data, 1).tobytes() in answer
        assert len(getattr(output.contents, TYPED_CONTENTS[output.datatype])) == len(patterns)
    else:
        got = np.frombuffer(response.raw_output_contents[0], dtype=f"<f{width}")
        assert_same_bits(got, np.roll(data, 1))
    assert list(output.shape) == [len(patterns)]


@pytest.mark.parametrize(
    ("message", "code", "words"),
    [
        pytest.param(b"\x0c", "INVALID_ARGUMENT", "an end of group outside", id="end-group"),
        pytest.param(b"\x0f\x00", "INVALID_ARGUMENT", "wire type 7", id="wire-type-7"),
        # A group is read as an unknown field, as protobuf reads it: the model is then ''.
        pytest.param(b"\x0b\x0c", "NOT_FOUND", "model ''", id="group"),
        pytest.param(
            b"\x3a\xff\xff\xff\xff\xff\xff", "INVALID_ARGUMENT", "varint", id="cut-varint"
        ),
        pytest.param(b"\x00\x01", "INVALID_ARGUMENT", "number 0", id="field-zero"),
        pytest.param(b"\x3a\x10abc", "INVALID_ARGUMENT", "past the end", id="cut-raw"),
        pytest.param(
            b"\x0a\x05roll", "INVALID_ARGUMENT", "not a ModelInferRequest", id="cut-string"
        ),
        pytest.param(b"", "NOT_FOUND", "model ''", id="empty-message"),
    ],
)
async def test_unreadable_messages(address: str, message: bytes, code: str, words: str) -> None:
    async with grpc_channel(address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw_infer(channel)(message)
    assert caught.value.code().name == code
    assert words in (caught.value.details() or ""), caught.value.details()


def with_contents(message: pb.ModelInferRequest, index: int, values: list[int]) -> Any:
    message.inputs[index].contents.int64_contents.extend(values)
    return message


def _retyped(message: Any) -> Any:
    message.inputs[0].datatype = "INT8"
    message.inputs[0].contents.int_contents[:] = [300]
    return message


def _wrong_field() -> Any:
    message = request("roll", one_dim(np.array([1.0], np.float32)), typed=True)
    message.inputs[0].contents.ClearField("fp32_contents")
    message.inputs[0].contents.int_contents.append(1)
    return message


def _count_mismatch() -> Any:
    message = request("roll", one_dim(np.arange(3, dtype=np.float64)), typed=True)
    message.inputs[0].shape[:] = [4]
    return message


def _shared_memory() -> Any:
    message = request("roll", ROLL)
    message.inputs[0].parameters["shared_memory_region"].string_param = "region0"
    return message


def _unknown_output() -> Any:
    message = request("roll", ROLL)
    message.outputs.add(name="scores")
    return message


@pytest.mark.parametrize(
    ("build", "code", "words"),
    [
        pytest.param(
            lambda: pb.ModelInferRequest(
                model_name="roll",
                inputs=request("roll", ROLL).inputs,
                raw_input_contents=request("roll", ROLL).raw_input_contents[:2],
            ),
            "INVALID_ARGUMENT",
            "raw_input_contents: raw_input_contents has 2 entries for 3 inputs",
            id="raw-count",
        ),
        pytest.param(
            lambda: with_contents(request("roll", ROLL), 1, [1]),
            "INVALID_ARGUMENT",
            "shift: has both contents and an entry in raw_input_contents",
            id="raw-and-typed",
        ),
        pytest.param(
            lambda: request("roll", ROLL, typed=False).__class__(
                model_name="roll",
                inputs=[
                    pb.ModelInferRequest.InferInputTensor(
                        name="data", datatype="FP32", shape=[2, -3]
                    ),
                    *request("roll", ROLL).inputs[1:],
                ],
            ),
            "INVALID_ARGUMENT",
            "data.shape: dimensions must be non-negative integers, got -3",
            id="negative-dimension",
        ),
        pytest.param(
            lambda: request("roll", one_dim(np.array([300], np.int32)), typed=True),
            "OK",
            "",
            id="int32-typed-fits",
        ),
        pytest.param(
            lambda: _retyped(request("roll", one_dim(np.array([300], np.int32)), typed=True)),
            "INVALID_ARGUMENT",
            "data: value 300 is out of range for int8 [-128, 127]",
            id="int8-out-of-range",
        ),
        pytest.param(
            _wrong_field,
            "INVALID_ARGUMENT",
            "data: FP32 elements go in contents.fp32_contents, not in int_contents",
            id="wrong-contents-field",
        ),
        pytest.param(
            _count_mismatch,
            "INVALID_ARGUMENT",
            "data: shape [4] holds 4 elements but contents.fp64_contents has 3",
            id="typed-count",
        ),
        pytest.param(
            _shared_memory,
            "INVALID_ARGUMENT",
            "raw_input_contents: raw_input_contents has 3 entries for 2 inputs not in shared "
            "memory",
            id="shared-memory",
        ),
        pytest.param(
            lambda: request("roll", ROLL, binary_data_output="false"),
            "INVALID_ARGUMENT",
            "parameters.binary_data_output: binary_data_output must be a boolean (true or "
            "false), got a string",
            id="string-boolean",
        ),
        pytest.param(
            _unknown_output,
            "INVALID_ARGUMENT",
            "unknown output 'scores'; the output is 'output'",
            id="unknown-output",
        ),
        pytest.param(
            lambda: pb.ModelInferRequest(model_name="roll", model_version="3"),
            "NOT_FOUND",
            "model: model 'roll' has no version '3'; versions: 7",
            id="unknown-version",
        ),
        pytest.param(
            lambda: request("gather", {**ROLL}, batch_dims=2**63 - 1),
            "INVALID_ARGUMENT",
            "unknown input 'shift'",
            id="roll-inputs-to-gather",
        ),
    ],
)
async def test_refusals(stub: Any, build: Any, code: str, words: str) -> None:
    if code == "OK":
        response = await stub.ModelInfer(build())
        assert output_of(response).tolist() == [300]
        return
    error = await refusal(stub, build())
    assert error.code().name == code
    assert words in (error.details() or ""), error.details()
    trailers = dict(error.trailing_metadata() or ())
    assert trailers["tensor-ops-fault"] in {kind.value for kind in Fault}
    assert len(trailers["x-request-id"]) == 32


async def test_request_id_metrics_and_log_line(stub: Any, caplog: pytest.LogCaptureFixture) -> None:
    route = f"/{SERVICE_NAME}/ModelInfer"
    REQUEST_TALLY.flush()  # what the requests before added, in the metrics (as /metrics does)
    before = REQUESTS.labels(route, "OK")._value.get()
    logging.getLogger("tensor_ops").propagate = True
    try:
        with caplog.at_level(logging.INFO, logger="tensor_ops.access"):
            call = stub.ModelInfer(request("roll", ROLL), metadata=(("x-request-id", "abc-123"),))
            response = await call
            trailers = dict(await call.trailing_metadata() or ())
            # The line and the count come once the call has ended on the server's side too
            # (its answer goes out with its status): the client may see the status first.
            for _ in range(200):
                if any(getattr(r, "request_id", None) == "abc-123" for r in caplog.records):
                    break
                await asyncio.sleep(0.01)
    finally:
        logging.getLogger("tensor_ops").propagate = False
    assert output_of(response).tolist() == [[2.0, 0.0, 1.0], [5.0, 3.0, 4.0]]
    assert trailers["x-request-id"] == "abc-123"
    REQUEST_TALLY.flush()
    assert REQUESTS.labels(route, "OK")._value.get() == before + 1
    # caplog may hold a record once per handler it put in place: one record, one object.
    lines = {id(r): r for r in caplog.records if getattr(r, "request_id", None) == "abc-123"}
    [line] = lines.values()
    assert line.__dict__["route"] == route
    assert line.__dict__["status"] == "OK"
    assert line.__dict__["method"] == "gRPC"
    assert line.__dict__["bytes_in"] == request("roll", ROLL).ByteSize()
    assert line.__dict__["bytes_out"] > 24
    # Without an id of the client's, an answer carries none (a refusal carries the one made).
    call = stub.ModelInfer(request("roll", ROLL))
    await call
    assert "x-request-id" not in dict(await call.trailing_metadata() or ())


async def test_busy_budget_is_resource_exhausted_with_retry_after() -> None:
    app = create_app(Settings(memory_budget_bytes=16 << 20, admission_timeout=0.2))
    held = app.state.budget.reserve()
    await held.grow_to(12 << 20)
    data = np.zeros((512, 1024), np.float32)  # 2 MiB: it needs about 8, 4 are left
    arrays = {"data": data, "shift": np.array(1, np.int64), "axes": np.array(0, np.int64)}
    try:
        async with grpc_serving(app) as address, grpc_channel(address) as channel:
            error = await refusal(inference_stub(channel), request("roll", arrays))
    finally:
        await held.release()
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "the service is busy" in (error.details() or "")
    trailers = dict(error.trailing_metadata() or ())
    assert trailers["tensor-ops-fault"] == "busy"
    assert trailers["retry-after"] == "1"
    assert app.state.budget.in_use == 0


async def test_a_call_past_its_deadline_gives_its_memory_back() -> None:
    app = create_app(Settings(memory_budget_bytes=64 << 20, admission_timeout=30))
    budget = app.state.budget
    held = budget.reserve()
    await held.grow_to(60 << 20)
    data = np.zeros((2048, 1024), np.float32)  # 8 MiB: waits for room that does not come
    arrays = {"data": data, "shift": np.array(1, np.int64), "axes": np.array(0, np.int64)}
    async with grpc_serving(app) as address, grpc_channel(address) as channel:
        stub = inference_stub(channel)
        error = await refusal(stub, request("roll", arrays), timeout=0.5)
        assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        for _ in range(50):  # the server's side of the call ends a moment later
            if budget.in_use == held.held:
                break
            await asyncio.sleep(0.02)
        assert budget.in_use == held.held == 60 << 20
        await held.release()
        # With the memory back, the same call goes through.
        response = await stub.ModelInfer(request("roll", arrays))
        assert output_of(response).shape == (2048, 1024)
    for _ in range(50):
        if budget.in_use == 0:
            break
        await asyncio.sleep(0.02)
    assert budget.in_use == 0


async def test_shutdown_drains_calls_in_flight_and_refuses_new_ones() -> None:
    """What the lifespan does on SIGTERM: readiness off, then the server's stop, during which a
    call already in flight (here, waiting for memory) is answered whole and a new one is
    UNAVAILABLE."""
    app = create_app(Settings(memory_budget_bytes=64 << 20, admission_timeout=30))
    settings = app.state.settings.model_copy(
        update={"host": "127.0.0.1", "grpc_port": 0, "graceful_timeout": 20}
    )
    server = GrpcServer(settings, app.state.pipeline, lambda: bool(app.state.ready))
    address = f"127.0.0.1:{await server.start()}"
    budget = app.state.budget
    held = budget.reserve()
    await held.grow_to(60 << 20)
    data = np.arange(2048 * 1024, dtype=np.float32).reshape(2048, 1024)
    arrays = {"data": data, "shift": np.array(3, np.int64), "axes": np.array(0, np.int64)}
    try:
        async with grpc_channel(address) as channel:
            stub = inference_stub(channel)
            in_flight = asyncio.ensure_future(stub.ModelInfer(request("roll", arrays)))
            await asyncio.sleep(0.3)  # the call waits for memory
            assert not in_flight.done()
            app.state.ready = False
            ready = await stub.ServerReady(pb.ServerReadyRequest())
            assert ready.ready is False
            stopping = asyncio.ensure_future(server.stop())
            await asyncio.sleep(0.2)
            async with grpc_channel(address) as fresh:
                error = await refusal(inference_stub(fresh), request("roll", ROLL), timeout=5)
            assert error.code() is grpc.StatusCode.UNAVAILABLE
            assert error.details() == "the service is shutting down"
            assert ("tensor-ops-fault", "shutting_down") in tuple(error.trailing_metadata() or ())
            # The probes are still answered while the service drains.
            assert (await stub.ServerLive(pb.ServerLiveRequest())).live is True
            assert not stopping.done()  # the stop waits for the call in flight
            await held.release()  # memory comes free: the call in flight finishes
            response = await in_flight
            await stopping
            assert server.service.calls_in_flight == 0
    finally:
        await server.stop()
        app.state.ready = True
    assert_same_bits(output_of(response), np.roll(data, 3, axis=0))


async def test_health_service(app: FastAPI) -> None:
    async with grpc_serving(app) as address, grpc_channel(address) as channel:
        health: Any = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE_NAME):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await health.Check(health_pb2.HealthCheckRequest(service="nope"))
        assert caught.value.code() is grpc.StatusCode.NOT_FOUND


async def test_reflection_serves_what_grpcurl_needs(app: FastAPI) -> None:
    """What ``grpcurl`` does with reflection: list the services, describe ModelInfer from the
    server's own descriptors, build a request from JSON and call it."""
    async with grpc_serving(app) as address:
        sync_channel = grpc.insecure_channel(address)
        try:
            database = ProtoReflectionDescriptorDatabase(sync_channel)
            loop = asyncio.get_running_loop()
            services = await loop.run_in_executor(None, database.get_services)
            assert SERVICE_NAME in services
            assert "grpc.health.v1.Health" in services
            from google.protobuf.descriptor_pool import DescriptorPool  # noqa: PLC0415

            pool = DescriptorPool(database)
            service = await loop.run_in_executor(None, pool.FindServiceByName, SERVICE_NAME)
            method = service.methods_by_name["ModelInfer"]
            request_class = message_factory.GetMessageClass(method.input_type)
            response_class = message_factory.GetMessageClass(method.output_type)
            body = (
                '{"model_name": "gather", "id": "curl-1", "inputs": ['
                '{"name": "data", "datatype": "INT32", "shape": [4],'
                ' "contents": {"int_contents": [10, 20, 30, 40]}},'
                '{"name": "indices", "datatype": "INT64", "shape": [3],'
                ' "contents": {"int64_contents": [3, -1, 9]}},'
                '{"name": "axis", "datatype": "INT64", "shape": [],'
                ' "contents": {"int64_contents": [0]}}],'
                ' "parameters": {"binary_data_output": {"bool_param": false}}}'
            )
            message = json_format.Parse(body, request_class())
            call: Any = sync_channel.unary_unary(
                INFER,
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=response_class.FromString,
            )
            response = await loop.run_in_executor(None, call, message)
        finally:
            sync_channel.close()
    answer = json_format.MessageToDict(response)
    assert answer["id"] == "curl-1"
    assert answer["outputs"][0]["contents"]["intContents"] == [40, 40, 0]
    assert answer["outputs"][0]["shape"] == ["3"]


async def test_unknown_methods_are_unimplemented(app: FastAPI) -> None:
    async with grpc_serving(app) as address, grpc_channel(address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw_infer(channel, "TraceSetting")(b"")
        assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw_infer(channel, "LogSettings")(b"")
        assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    ("dtype", "field"),
    [
        ("int64", "int64_contents"),
        ("int32", "int_contents"),
        ("uint64", "uint64_contents"),
        ("uint32", "uint_contents"),
        ("bool", "bool_contents"),
    ],
)
def test_varints_are_written_as_protobuf_writes_them(dtype: str, field: str) -> None:
    """Typed answers' varints, packed by NumPy, byte for byte protobuf's own (extremes, every
    length from one to ten bytes, and more than one chunk)."""
    rng = np.random.default_rng(11)
    count = (1 << 20) + 1000
    if dtype == "bool":
        values = rng.integers(0, 2, count).astype(np.bool_)
    else:
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
        lengths = [(1 << (7 * k)) - 1 for k in range(1, 10) if (1 << (7 * k)) - 1 <= info.max]
        edges = [info.min, info.max, 0, 1, *lengths, *[v + 1 for v in lengths if v < info.max]]
        values[: len(edges)] = edges
    contents = pb.InferTensorContents()
    getattr(contents, field).extend(values.tolist())
    [(_, _, _, payload)] = list(fields(contents.SerializeToString()))
    assert b"".join(piece.tobytes() for piece in packed_varints(values)) == bytes(payload)


def slow_encoding_app(monkeypatch: pytest.MonkeyPatch, seconds: float) -> FastAPI:
    """An app whose answers are all encoded in worker threads, each taking ``seconds`` more."""
    slow_encode = GrpcExchange.encode

    def encode(self: GrpcExchange, job: Any) -> Any:
        time.sleep(seconds)  # in the worker thread
        return slow_encode(self, job)

    monkeypatch.setattr(GrpcExchange, "encode", encode)
    return create_app(Settings(offload_bytes=0))


async def test_a_cancelled_call_holds_its_memory_until_its_thread_is_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread cannot be stopped: a call past its deadline while its answer is encoded in a
    worker thread keeps its reservation until the thread returns, then gives it back."""
    app = slow_encoding_app(monkeypatch, 1.0)
    budget = app.state.budget
    data = np.zeros((512, 1024), np.float32)  # 2 MiB: counted in the budget
    arrays = {"data": data, "shift": np.array(1, np.int64), "axes": np.array(0, np.int64)}
    async with grpc_serving(app) as address, grpc_channel(address) as channel:
        error = await refusal(inference_stub(channel), request("roll", arrays), timeout=0.3)
        assert error.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        await asyncio.sleep(0.2)
        assert budget.in_use >= 4 << 20  # the thread still encodes: its memory is held
        for _ in range(100):
            if budget.in_use == 0:
                break
            await asyncio.sleep(0.05)
        assert budget.in_use == 0


@pytest.mark.parametrize(
    "method", ["ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata"]
)
async def test_unreadable_messages_of_every_method_are_invalid(address: str, method: str) -> None:
    async with grpc_channel(address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw_infer(channel, method)(b"\xff\xff\xff")
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert f"the message is not a {method}Request" in (caught.value.details() or "")


async def test_answers_over_the_send_limit_are_refused_before_any_work() -> None:
    """A negative INT8 takes ten bytes as typed contents: an answer that would pass the send
    limit is refused (413's code, naming the setting and what to ask for instead), while the
    same output as raw contents goes through; an id too long to echo is refused too."""
    app = create_app(Settings(max_output_bytes=1 << 20))
    data = np.full(300_000, -1, np.int8)
    arrays = {"data": data, "shift": np.array(1, np.int64), "axes": np.array(0, np.int64)}
    async with grpc_serving(app) as address, grpc_channel(address) as channel:
        stub = inference_stub(channel)
        error = await refusal(stub, request("roll", arrays, binary_data_output=False))
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        message = error.details() or ""
        assert "as typed contents (up to 10 bytes an element)" in message
        assert "TENSOR_OPS_MAX_OUTPUT_BYTES" in message
        assert "binary_data_output true" in message
        response = await stub.ModelInfer(request("roll", arrays))
        assert_same_bits(output_of(response), data)
        long_id = request("roll", one_dim(np.zeros(4, np.float32)))
        long_id.id = "x" * (2 << 20)
        error = await refusal(stub, long_id)
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert app.state.budget.in_use == 0


async def test_a_cancelled_stream_s_messages_are_freed_without_the_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream cancelled while its messages are in hand (their answers being made in worker
    threads): once the budget is back, no task of those messages is left alive with the
    cyclic collector off, so nothing they held (an answer made as the stream was cancelled)
    waits for a collection to be freed."""
    import gc  # noqa: PLC0415

    from app.grpc.stream import Streams  # noqa: PLC0415

    app = slow_encoding_app(monkeypatch, 0.3)
    budget = app.state.budget
    data = np.zeros((512, 1024), np.float32)  # 2 MiB a message
    arrays = {"data": data, "shift": np.array(1, np.int64), "axes": np.array(0, np.int64)}

    def messages_alive() -> int:
        return sum(
            1
            for item in gc.get_objects()
            if isinstance(item, asyncio.Task)
            and getattr(item.get_coro(), "__qualname__", "") == Streams.stream_message.__qualname__
        )

    gc.collect()
    gc.disable()
    try:
        async with grpc_serving(app) as address, grpc_channel(address) as channel:
            call = inference_stub(channel).ModelStreamInfer()
            for _ in range(3):
                await call.write(request("roll", arrays))
            await asyncio.sleep(0.15)  # the messages in hand, their answers being made
            assert budget.in_use > 0
            call.cancel()
            for _ in range(100):
                if budget.in_use == 0:
                    break
                await asyncio.sleep(0.05)
            assert budget.in_use == 0
            await asyncio.sleep(0.1)
            assert messages_alive() == 0
    finally:
        gc.enable()
