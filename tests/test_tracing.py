"""Tracing against the real OpenTelemetry SDK: a server span per request with its stages as
children on every transport, incoming trace context continued, the span's ids in the log line,
nothing at all when off, and spans sent over OTLP from each worker of a real server."""

import asyncio
import base64
import concurrent.futures
import contextlib
import gzip
import io
import itertools
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import httpx
import numpy as np
import orjson
import pytest
from fastapi import FastAPI
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from app import tracing
from app.main import create_app
from app.observability import JsonFormatter
from app.settings import Settings
from app.tracing import TracingError, TracingSettings, exporters_for, settings_from
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tests.support import (
    ROOT,
    free_port,
    grpc_channel,
    grpc_serving,
    launch_server,
    npy_b64,
    npz_bytes,
    raw_infer,
    server_output,
    stop_server,
    v2_binary_body,
)

pytestmark = pytest.mark.anyio

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
TRACESTATE = "vendor=opaque,other=1"
INFER = "inference.GRPCInferenceService/ModelInfer"
ROLL = {"data": [[1, 2, 3], [4, 5, 6]], "shift": 1, "axes": 1}
ROLLED = [[3, 1, 2], [6, 4, 5]]


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the test, every span kept in memory as it ends; off again after."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.install(provider)
    try:
        yield memory
    finally:
        tracing.uninstall()
        provider.shutdown()


@pytest.fixture
def traced_app(exporter: InMemorySpanExporter) -> FastAPI:
    return create_app(Settings(grpc_port=0))


@pytest.fixture
async def client(traced_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=traced_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def hex_id(number: int, digits: int) -> str:
    return format(number, f"0{digits}x")


def server_span(spans: Sequence[ReadableSpan]) -> ReadableSpan:
    [server] = [span for span in spans if span.kind is SpanKind.SERVER]
    return server


async def spans_with_server(exporter: InMemorySpanExporter) -> Sequence[ReadableSpan]:
    """The finished spans once the call's server span is among them: a gRPC client has the
    status as soon as it is sent, and the server ends its span just after (up to 5 s)."""
    deadline = time.monotonic() + 5
    while not any(span.kind is SpanKind.SERVER for span in exporter.get_finished_spans()):
        assert time.monotonic() < deadline, "no server span ended within 5 s"
        await asyncio.sleep(0.01)
    return exporter.get_finished_spans()


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> dict[str, ReadableSpan]:
    """The spans whose parent is ``parent``, by name (each name once)."""
    assert parent.context is not None
    found = [
        span
        for span in spans
        if span.parent is not None and span.parent.span_id == parent.context.span_id
    ]
    named = {span.name: span for span in found}
    assert len(named) == len(found), [span.name for span in found]
    return named


def assert_request_tree(spans: Sequence[ReadableSpan], stages: set[str]) -> ReadableSpan:
    """One server span, ``stages`` its children, the kernel inside encode, all of one trace;
    returns the server span."""
    server = server_span(spans)
    assert server.context is not None
    stage_spans = children(spans, server)
    assert set(stage_spans) == stages
    kernel = children(spans, stage_spans["encode"])
    assert set(kernel) == {"kernel"}
    assert {span.context.trace_id for span in spans if span.context} == {server.context.trace_id}
    assert len(spans) == len(stages) + 2
    for span in spans:
        assert span.kind is (SpanKind.SERVER if span is server else SpanKind.INTERNAL)
        assert span.status.status_code is StatusCode.UNSET
    # The stages follow one another, inside the request.
    order = [stage_spans[name] for name in ("read", "decode", "encode", "send") if name in stages]
    for before, after in itertools.pairwise(order):
        assert before.end_time is not None and after.start_time is not None
        assert before.end_time <= after.start_time
    assert server.start_time is not None and server.end_time is not None
    assert server.start_time <= order[0].start_time <= order[-1].end_time <= server.end_time  # type: ignore[operator]
    return server


# ------------------------------------------------------------------------------------------------
# HTTP: every way in


V2_HEAD = {
    "inputs": [
        {"name": "data", "datatype": "INT64", "shape": [2, 3]},
        {"name": "shift", "datatype": "INT64", "shape": [1]},
        {"name": "axes", "datatype": "INT64", "shape": [1]},
    ],
    "outputs": [{"name": "output", "parameters": {"binary_data": True}}],
}
V2_BINARY, V2_BINARY_HEADERS = v2_binary_body(
    V2_HEAD,
    [
        np.array(ROLL["data"], np.int64).tobytes(),
        np.array([1], np.int64).tobytes(),
        np.array([1], np.int64).tobytes(),
    ],
)
V2_JSON = {
    "inputs": [
        {"name": "data", "datatype": "INT64", "shape": [2, 3], "data": [1, 2, 3, 4, 5, 6]},
        {"name": "shift", "datatype": "INT64", "shape": [1], "data": [1]},
        {"name": "axes", "datatype": "INT64", "shape": [1], "data": [1]},
    ]
}


def rolled_json(response: httpx.Response) -> Any:
    return response.json()["data"]


def rolled_json_npy(response: httpx.Response) -> Any:
    return np.load(io.BytesIO(base64.b64decode(response.json()["data"]))).tolist()


def rolled_npy(response: httpx.Response) -> Any:
    return np.load(io.BytesIO(response.content)).tolist()


def rolled_v2_json(response: httpx.Response) -> Any:
    [output] = response.json()["outputs"]
    return np.array(output["data"]).reshape(output["shape"]).tolist()


def rolled_v2_binary(response: httpx.Response) -> Any:
    head = int(response.headers["inference-header-content-length"])
    [output] = orjson.loads(response.content[:head])["outputs"]
    return np.frombuffer(response.content[head:], np.int64).reshape(output["shape"]).tolist()


HTTP_CASES = [
    pytest.param("/roll", "/roll", {"json": ROLL}, rolled_json, id="json"),
    pytest.param(
        "/roll",
        "/roll",
        {"json": {**ROLL, "data": npy_b64(np.array(ROLL["data"], np.int64))}},
        rolled_json_npy,
        id="json-npy",
    ),
    pytest.param(
        "/roll",
        "/roll",
        {
            "content": npz_bytes(
                data=np.array(ROLL["data"], np.int64), shift=np.int64(1), axes=np.int64(1)
            ),
            "headers": {"content-type": "application/x-npz"},
        },
        rolled_npy,
        id="npz",
    ),
    pytest.param(
        "/v2/models/roll/infer", "/v2/models/{name}/infer", {"json": V2_JSON}, rolled_v2_json,
        id="v2-json",
    ),
    pytest.param(
        "/v2/models/roll/versions/7/infer",
        "/v2/models/{name}/versions/{version}/infer",
        {"content": V2_BINARY, "headers": V2_BINARY_HEADERS},
        rolled_v2_binary,
        id="v2-binary",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("path", "route", "body", "rolled"), HTTP_CASES)
async def test_each_http_way_in_is_a_server_span_with_its_stages(
    client: httpx.AsyncClient,
    exporter: InMemorySpanExporter,
    path: str,
    route: str,
    body: dict[str, Any],
    rolled: Any,
) -> None:
    response = await client.post(path, **body)
    assert response.status_code == 200, response.text
    assert rolled(response) == ROLLED
    spans = exporter.get_finished_spans()
    server = assert_request_tree(spans, {"read", "decode", "encode", "send"})
    assert server.name == f"POST {route}"
    assert server.parent is None  # no traceparent: a trace of its own
    attributes = dict(server.attributes or {})
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.route"] == route
    assert attributes["url.path"] == path.partition("?")[0]
    assert attributes["http.response.status_code"] == 200
    assert attributes["tensor_ops.request_id"] == response.headers["x-request-id"]
    assert attributes["tensor_ops.op"] == "roll"
    assert attributes["http.response.body.size"] == len(response.content)
    assert attributes["http.request.body.size"] == len(response.request.content)
    assert "tensor_ops.fault" not in attributes


async def test_incoming_traceparent_and_tracestate_are_continued(
    client: httpx.AsyncClient, exporter: InMemorySpanExporter
) -> None:
    response = await client.post(
        "/gather",
        json={"data": [10, 20, 30], "indices": [2, 0], "axis": 0},
        headers={"traceparent": TRACEPARENT, "tracestate": TRACESTATE},
    )
    assert response.json()["data"] == [30, 10]
    spans = exporter.get_finished_spans()
    server = assert_request_tree(spans, {"read", "decode", "encode", "send"})
    assert server.context is not None and server.parent is not None
    assert hex_id(server.context.trace_id, 32) == TRACE_ID
    assert hex_id(server.parent.span_id, 16) == PARENT_ID
    assert server.parent.is_remote
    assert server.context.trace_state.to_header() == TRACESTATE
    assert dict(server.attributes or {})["tensor_ops.op"] == "gather"


async def test_a_malformed_traceparent_starts_a_trace_of_its_own(
    client: httpx.AsyncClient, exporter: InMemorySpanExporter
) -> None:
    await client.post("/roll", json=ROLL, headers={"traceparent": f"00-{TRACE_ID}-zz-01"})
    server = server_span(exporter.get_finished_spans())
    assert server.parent is None
    assert server.context is not None and hex_id(server.context.trace_id, 32) != TRACE_ID


async def test_stages_run_in_worker_threads_are_children_all_the_same(
    exporter: InMemorySpanExporter,
) -> None:
    app = create_app(Settings(grpc_port=0, offload_bytes=0))  # every stage off the event loop
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        response = await client.post("/roll", json=ROLL, headers={"traceparent": TRACEPARENT})
    assert response.json()["data"] == ROLLED
    spans = exporter.get_finished_spans()
    server = assert_request_tree(spans, {"read", "decode", "encode", "send"})
    stages = children(spans, server)
    assert dict(stages["decode"].attributes or {})["tensor_ops.worker_thread"] is True
    assert dict(stages["encode"].attributes or {})["tensor_ops.worker_thread"] is True
    assert "tensor_ops.worker_thread" not in dict(stages["read"].attributes or {})


async def test_a_client_fault_is_on_the_span_but_no_error(
    client: httpx.AsyncClient, exporter: InMemorySpanExporter
) -> None:
    response = await client.post("/roll", json={**ROLL, "axes": 5})
    assert response.status_code == 422
    spans = exporter.get_finished_spans()
    server = server_span(spans)
    stages = children(spans, server)
    assert set(stages) == {"read", "decode"}  # refused while decoding
    attributes = dict(server.attributes or {})
    assert attributes["http.response.status_code"] == 422
    assert attributes["tensor_ops.fault"] == "spec_violation"
    assert "error.type" not in attributes
    assert server.status.status_code is StatusCode.UNSET
    assert dict(stages["decode"].attributes or {})["tensor_ops.fault"] == "spec_violation"
    assert stages["decode"].status.status_code is StatusCode.UNSET


async def test_a_refusal_before_the_pipeline_has_its_fault_too(
    client: httpx.AsyncClient, exporter: InMemorySpanExporter
) -> None:
    response = await client.post("/roll", content=b"x", headers={"content-type": "text/csv"})
    assert response.status_code == 415
    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == ["POST /roll"]
    assert dict(spans[0].attributes or {})["tensor_ops.fault"] == "unsupported_media_type"


async def test_a_service_fault_is_an_error(
    client: httpx.AsyncClient, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*arguments: Any) -> Any:
        raise RuntimeError("a bug in the encoder")

    monkeypatch.setattr("app.http.op_routes.encode_output", broken)
    response = await client.post("/roll", json=ROLL)
    assert response.status_code == 500
    spans = exporter.get_finished_spans()
    server = server_span(spans)
    attributes = dict(server.attributes or {})
    assert server.status.status_code is StatusCode.ERROR
    assert attributes["error.type"] == attributes["tensor_ops.fault"] == "internal"
    assert attributes["http.response.status_code"] == 500
    encode = children(spans, server)["encode"]
    assert encode.status.status_code is StatusCode.ERROR
    assert dict(encode.attributes or {})["error.type"] == "RuntimeError"
    [event] = encode.events
    assert event.name == "exception"
    assert dict(event.attributes or {})["exception.message"] == "a bug in the encoder"


async def test_a_busy_budget_is_an_error(exporter: InMemorySpanExporter) -> None:
    app = create_app(Settings(grpc_port=0, memory_budget_bytes=16 << 20, admission_timeout=0.2))
    held = app.state.budget.reserve()
    await held.grow_to(12 << 20)
    # 2 MiB: it needs about 8 MiB, and 4 are left.
    body = npz_bytes(data=np.zeros((512, 1024), np.float32), shift=np.int64(1), axes=np.int64(0))
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test"
        ) as client:
            response = await client.post(
                "/roll",
                content=body,
                headers={"content-type": "application/x-npz"},
            )
    finally:
        await held.release()
    assert response.status_code == 503
    server = server_span(exporter.get_finished_spans())
    assert server.status.status_code is StatusCode.ERROR
    assert dict(server.attributes or {})["error.type"] == "busy"


@pytest.mark.parametrize(
    ("path", "name", "status"),
    [
        ("/health", "GET /health", 200),
        ("/v2/models/gather", "GET /v2/models/{name}", 200),
        ("/v2/models/nothing", "GET /v2/models/{name}", 404),
        ("/no/such/path", "GET", 404),
    ],
)
async def test_routes_fastapi_serves_are_one_server_span_each(
    client: httpx.AsyncClient, exporter: InMemorySpanExporter, path: str, name: str, status: int
) -> None:
    response = await client.get(path)
    assert response.status_code == status
    [span] = exporter.get_finished_spans()  # FastAPI's own telemetry adds none
    assert span.name == name
    assert span.kind is SpanKind.SERVER
    attributes = dict(span.attributes or {})
    assert attributes["http.response.status_code"] == status
    assert attributes.get("http.route") == (name.split(" ", 1)[1] if " " in name else None)
    assert span.status.status_code is StatusCode.UNSET  # a 404 is the client's


# ------------------------------------------------------------------------------------------------
# gRPC


def roll_message(data: Any = ROLL["data"], axes: int = 1) -> bytes:
    message = pb.ModelInferRequest(model_name="roll", id="call-1")
    for name, array in (
        ("data", np.array(data, np.int64)),
        ("shift", np.array([1], np.int64)),
        ("axes", np.array([axes], np.int64)),
    ):
        message.inputs.add(name=name, datatype="INT64", shape=list(array.shape))
        message.raw_input_contents.append(array.tobytes())
    return bytes(message.SerializeToString())


async def test_grpc_calls_are_server_spans_continuing_the_metadata_trace(
    traced_app: FastAPI, exporter: InMemorySpanExporter
) -> None:
    async with grpc_serving(traced_app) as address, grpc_channel(address) as channel:
        answer = await raw_infer(channel)(
            roll_message(),
            metadata=(
                ("traceparent", TRACEPARENT),
                ("tracestate", TRACESTATE),
                ("x-request-id", "grpc-7"),
            ),
        )
    response = pb.ModelInferResponse.FromString(answer)
    rolled = np.frombuffer(response.raw_output_contents[0], np.int64).reshape(2, 3)
    assert rolled.tolist() == ROLLED
    spans = exporter.get_finished_spans()
    server = assert_request_tree(spans, {"read", "decode", "encode"})  # gRPC itself sends
    assert server.name == INFER
    assert server.context is not None and server.parent is not None
    assert hex_id(server.context.trace_id, 32) == TRACE_ID
    assert hex_id(server.parent.span_id, 16) == PARENT_ID
    assert server.context.trace_state.to_header() == TRACESTATE
    attributes = dict(server.attributes or {})
    assert attributes["rpc.system"] == "grpc"
    assert attributes["rpc.service"] == "inference.GRPCInferenceService"
    assert attributes["rpc.method"] == "ModelInfer"
    assert attributes["rpc.grpc.status_code"] == 0
    assert attributes["tensor_ops.request_id"] == "grpc-7"
    assert attributes["tensor_ops.op"] == "roll"


async def test_grpc_refusals_carry_their_fault_and_only_the_service_own_are_errors(
    traced_app: FastAPI, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with grpc_serving(traced_app) as address, grpc_channel(address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await raw_infer(channel)(roll_message(axes=5))
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        spec = server_span(await spans_with_server(exporter))
        exporter.clear()

        def broken(*arguments: Any) -> Any:
            raise RuntimeError("a bug in the framing")

        # The answer's framing (its head and the raw entry's tag and length, kept per shape).
        monkeypatch.setattr("app.grpc.answer._raw_answer_start", broken)
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await raw_infer(channel)(roll_message())
        assert failed.value.code() is grpc.StatusCode.INTERNAL
        bug = await spans_with_server(exporter)
    attributes = dict(spec.attributes or {})
    assert attributes["tensor_ops.fault"] == "spec_violation"
    assert attributes["rpc.grpc.status_code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert spec.status.status_code is StatusCode.UNSET
    server = server_span(bug)
    attributes = dict(server.attributes or {})
    assert server.status.status_code is StatusCode.ERROR
    assert attributes["error.type"] == attributes["tensor_ops.fault"] == "internal"
    assert attributes["rpc.grpc.status_code"] == grpc.StatusCode.INTERNAL.value[0]
    encode = children(bug, server)["encode"]
    assert encode.status.status_code is StatusCode.ERROR
    assert dict(encode.attributes or {})["error.type"] == "RuntimeError"


# ------------------------------------------------------------------------------------------------
# The log line


async def test_the_json_log_line_carries_the_span_ids(
    client: httpx.AsyncClient, exporter: InMemorySpanExporter
) -> None:
    handler = logging.getLogger("tensor_ops").handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        response = await client.post("/roll", json=ROLL, headers={"traceparent": TRACEPARENT})
    finally:
        handler.setStream(previous)
    [line] = [json.loads(text) for text in stream.getvalue().splitlines()]
    server = server_span(exporter.get_finished_spans())
    assert server.context is not None
    assert line["request_id"] == response.headers["x-request-id"]
    assert line["trace_id"] == hex_id(server.context.trace_id, 32) == TRACE_ID
    assert line["span_id"] == hex_id(server.context.span_id, 16)


async def test_an_unsampled_trace_makes_no_spans_but_its_log_line_has_its_id(
    client: httpx.AsyncClient, exporter: InMemorySpanExporter
) -> None:
    handler = logging.getLogger("tensor_ops").handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        # Flags 00: the caller does not sample this trace, and the default sampler follows it.
        response = await client.post(
            "/roll", json=ROLL, headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"}
        )
    finally:
        handler.setStream(previous)
    assert response.json()["data"] == ROLLED
    assert exporter.get_finished_spans() == ()
    [line] = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert line["trace_id"] == TRACE_ID


def test_lines_logged_inside_a_span_carry_its_ids(exporter: InMemorySpanExporter) -> None:
    assert tracing.TRACER is not None
    record = logging.makeLogRecord({"name": "tensor_ops.x", "msg": "inside", "levelname": "INFO"})
    with tracing.TRACER.start_as_current_span("work") as span:
        inside = json.loads(JsonFormatter().format(record))
    outside = json.loads(JsonFormatter().format(record))
    assert inside["trace_id"] == hex_id(span.get_span_context().trace_id, 32)
    assert inside["span_id"] == hex_id(span.get_span_context().span_id, 16)
    assert "trace_id" not in outside


# ------------------------------------------------------------------------------------------------
# Off


async def test_off_there_are_no_spans_and_no_wrappers() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))  # made, never installed
    assert tracing.TRACER is None
    app = create_app(Settings(grpc_port=0))
    assert app.front._observed.__func__ is type(app.front)._observed  # type: ignore[attr-defined]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        response = await client.post("/roll", json=ROLL, headers={"traceparent": TRACEPARENT})
    assert response.json()["data"] == ROLLED
    assert memory.get_finished_spans() == ()


def test_off_nothing_of_opentelemetry_is_imported() -> None:
    # FastAPI imports OpenTelemetry's API for its own telemetry: the service adds nothing to
    # it, and with tracing off, neither the SDK nor an exporter is ever loaded.
    script = """
import json, sys
def loaded():
    return {name for name in sys.modules if name.split(".")[0] == "opentelemetry"}
import app.tracing, app.observability, app.pipeline.run
alone = loaded()
import fastapi
framework = loaded()
import app.main
print(json.dumps({"alone": sorted(alone), "added": sorted(loaded() - framework),
                  "on": app.main.tracing.TRACER is not None}))
"""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**env, "TENSOR_OPS_GRPC_PORT": "0"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout.splitlines()[-1])
    assert result == {"alone": [], "added": [], "on": False}


# ------------------------------------------------------------------------------------------------
# The standard variables


ENDPOINT = "http://127.0.0.1:4318"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, (("otlp",), "http/protobuf")),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT}, (("otlp",), "http/protobuf")),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            (("otlp",), "grpc"),
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
            },
            (("otlp",), "grpc"),
        ),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "TRUE"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, None),
        ({"OTEL_TRACES_EXPORTER": "console"}, (("console",), "http/protobuf")),
        (
            {"OTEL_TRACES_EXPORTER": "otlp, console", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT},
            (("otlp", "console"), "http/protobuf"),
        ),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, (("console",), "http/protobuf")),
    ],
)
def test_which_variables_turn_tracing_on(
    environ: dict[str, str], expected: tuple[tuple[str, ...], str] | None
) -> None:
    settings = settings_from(environ)
    if expected is None:
        assert settings is None
    else:
        assert settings is not None
        assert (settings.exporters, settings.protocol) == expected


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER names 'zipkin'"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_PROTOCOL is 'http/json'",
        ),
    ],
)
def test_what_cannot_be_done_is_refused_at_start_up(environ: dict[str, str], words: str) -> None:
    with pytest.raises(TracingError, match=words):
        settings_from(environ)


def test_the_protocol_chooses_the_exporter() -> None:
    kinds = {
        protocol: [type(item) for item in exporters_for(TracingSettings(names, protocol, None))]
        for names, protocol in ((("otlp",), "grpc"), (("otlp", "console"), "http/protobuf"))
    }
    assert kinds == {
        "grpc": [GrpcSpanExporter],
        "http/protobuf": [HttpSpanExporter, ConsoleSpanExporter],
    }


# ------------------------------------------------------------------------------------------------
# A real server, a real collector


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver on 127.0.0.1: every span of every export kept, with its
    resource's attributes."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _CollectorHandler)
        self.spans: list[tuple[dict[str, Any], Any]] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()


class _CollectorHandler(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        export = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            self.server.paths.append(self.path)
            for resource_spans in export.resource_spans:
                resource = {
                    item.key: _value(item.value) for item in resource_spans.resource.attributes
                }
                for scope_spans in resource_spans.scope_spans:
                    self.server.spans.extend((resource, span) for span in scope_spans.spans)
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value"))


@pytest.fixture
def collector() -> Iterator[Collector]:
    receiver = Collector()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.shutdown()
        receiver.server_close()
        thread.join(5)


class GrpcCollector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver: the names of the spans it was sent."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the service's name
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                self.names.extend(span.name for span in scope_spans.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


async def test_the_grpc_protocol_sends_spans_over_otlp_grpc(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receiver = GrpcCollector()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    try:
        tracing.configure()
        assert tracing.TRACER is not None
        app = create_app(Settings(grpc_port=0))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test"
        ) as client:
            assert (await client.post("/roll", json=ROLL)).json()["data"] == ROLLED
        await tracing.flush()
    finally:
        provider = tracing._PROVIDER
        tracing.uninstall()
        if provider is not None:
            provider.shutdown()
        server.stop(None)
    assert sorted(receiver.names) == sorted(
        ["POST /roll", "read", "decode", "encode", "kernel", "send"]
    )


@pytest.mark.e2e
def test_spans_reach_an_otlp_collector_from_each_worker(collector: Collector) -> None:
    grpc_port = free_port()
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_port}",
        # Never sent on a schedule: what arrives was sent as each worker stopped.
        "OTEL_BSP_SCHEDULE_DELAY": "600000",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test",
        "TENSOR_OPS_WORKERS": "2",
        "TENSOR_OPS_GRPC_PORT": str(grpc_port),
        "TENSOR_OPS_LOG_FORMAT": "json",
    }
    url, process = launch_server(env, command=["-m", "app"])
    try:
        with httpx.Client(base_url=url) as client:
            response = client.post("/roll", json=ROLL, headers={"traceparent": TRACEPARENT})
            assert response.json()["data"] == ROLLED
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            infer: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(f"/{INFER}")
            answer = infer(roll_message(), metadata=(("traceparent", TRACEPARENT),), timeout=30)
        raw = pb.ModelInferResponse.FromString(answer).raw_output_contents[0]
        assert np.frombuffer(raw, np.int64).tolist() == [3, 1, 2, 6, 4, 5]
    finally:
        # The supervisor stops its workers; each drains, sends its last spans and exits.
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=60)
        output = server_output(process)
        stop_server(process)
    assert set(collector.paths) == {"/v1/traces"}
    ours = [
        (resource, span) for resource, span in collector.spans if span.trace_id.hex() == TRACE_ID
    ]
    by_name: dict[str, list[Any]] = {}
    for _, span in ours:
        by_name.setdefault(span.name, []).append(span)
    assert sorted(by_name) == sorted(
        ["POST /roll", INFER, "read", "decode", "encode", "kernel", "send"]
    )
    assert {name: len(spans) for name, spans in by_name.items()} == {
        "POST /roll": 1, INFER: 1, "read": 2, "decode": 2, "encode": 2, "kernel": 2, "send": 1,
    }  # fmt: skip
    [http_span] = by_name["POST /roll"]
    [grpc_span] = by_name[INFER]
    for server in (http_span, grpc_span):
        assert server.parent_span_id.hex() == PARENT_ID
        assert server.kind == server.SPAN_KIND_SERVER
    server_ids = {http_span.span_id, grpc_span.span_id}
    for name in ("read", "decode", "encode", "send"):
        assert {span.parent_span_id for span in by_name[name]} <= server_ids
    encode_ids = {span.span_id for span in by_name["encode"]}
    assert {span.parent_span_id for span in by_name["kernel"]} == encode_ids
    # Made in the workers, not in the supervisor (the process started here).
    pids = {resource["process.pid"] for resource, _ in ours}
    assert process.pid not in pids
    assert {resource["service.name"] for resource, _ in ours} == {"tensor-ops"}
    assert {resource["deployment.environment.name"] for resource, _ in ours} == {"test"}
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    [access] = [line for line in lines if line.get("route") == "/roll"]
    assert access["trace_id"] == TRACE_ID
    assert access["span_id"] == http_span.span_id.hex()
    assert "Traceback" not in output
