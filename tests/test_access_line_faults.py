"""A refused request's access line says why: the fault's kind (app/errors.py's ``Fault``) and,
where the fault is in one of the service's fields, that field; never what the client sent (an
unknown field's name, a value, a body). HTTP (plain routes and /v2) and gRPC alike."""

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import grpc.aio
import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb
from tests.support import LogCollector, grpc_channel, grpc_serving, inference_stub

pytestmark = pytest.mark.anyio

SECRET = "SECRETVALUE"


@pytest.fixture(scope="module")
def service() -> FastAPI:
    return create_app(Settings(grpc_port=0))


@pytest.fixture
async def client(service: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=service)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.fixture
def lines() -> Iterator[list[logging.LogRecord]]:
    # Added after create_app, which sets the service's handlers anew.
    collector = LogCollector()
    logger = logging.getLogger("tensor_ops.access")
    logger.addHandler(collector)
    try:
        yield collector.records
    finally:
        logger.removeHandler(collector)


def only_line(records: list[logging.LogRecord]) -> dict[str, Any]:
    (record,) = records
    line = record.__dict__
    assert SECRET not in repr(line), line
    return line


@pytest.mark.parametrize(
    ("path", "body", "status", "fault", "field"),
    [
        ("/roll", {"data": [[1, 2]], "shift": 1, "axes": 5}, 422, "spec_violation", "axes"),
        (
            "/roll",
            {"data": [[1, 2]], "shift": 1, "axes": 0, SECRET: 1},
            422,
            "extra_forbidden",
            None,
        ),
        (
            "/gather",
            {"data": [1, 2], "indices": [0], "axis": 0, "dtype": SECRET},
            422,
            None,
            "dtype",
        ),
        ("/v2/models/roll/infer", {"inputs": []}, 422, "missing", "data"),
        ("/v2/models/nosuchmodel/infer", {"inputs": []}, 404, "not_found", "model"),
    ],
    ids=["spec", "unknown-field", "bad-dtype", "v2-missing", "v2-unknown-model"],
)
async def test_a_refusal_names_its_fault_and_field_not_the_clients_words(
    client: httpx.AsyncClient,
    lines: list[logging.LogRecord],
    path: str,
    body: dict[str, Any],
    status: int,
    fault: str | None,
    field: str | None,
) -> None:
    response = await client.post(path, json=body)
    assert response.status_code == status, response.text
    line = only_line(lines)
    assert line["status"] == status
    expected = response.headers.get("tensor-ops-fault") or response.json()["detail"][0]["type"]
    assert line["fault"] == (fault or expected) == expected
    assert line.get("field") == field


async def test_an_unreadable_body_and_a_wrong_method_are_told_apart(
    client: httpx.AsyncClient, lines: list[logging.LogRecord]
) -> None:
    await client.post("/roll", content=b"{" + SECRET.encode())
    await client.get("/roll")
    await client.post("/rol", json={"data": SECRET})
    faults = [(r.__dict__["status"], r.__dict__["fault"]) for r in lines]
    assert faults == [(400, "json_invalid"), (405, "method_not_allowed"), (404, "not_found")]
    assert SECRET not in repr([r.__dict__ for r in lines])


async def test_an_answered_request_has_no_fault(
    client: httpx.AsyncClient, lines: list[logging.LogRecord]
) -> None:
    await client.post("/roll", json={"data": [1, 2], "shift": 1, "axes": 0})
    line = only_line(lines)
    assert line["status"] == 200
    assert "fault" not in line and "field" not in line


async def test_a_refused_grpc_call_names_its_fault_and_field(
    service: FastAPI, lines: list[logging.LogRecord]
) -> None:
    message = pb.ModelInferRequest(model_name="roll")
    for name, array in {
        "data": np.arange(6).reshape(2, 3),
        "shift": np.array(1),
        "axes": np.array(7),
    }.items():
        message.inputs.add(name=name, datatype="INT64", shape=list(array.shape))
        message.raw_input_contents.append(array.astype("<i8").tobytes())
    async with grpc_serving(service) as address, grpc_channel(address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await inference_stub(channel).ModelInfer(message)
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    line = only_line(lines)
    assert (line["status"], line["fault"], line["field"]) == (
        "INVALID_ARGUMENT",
        "spec_violation",
        "axes",
    )


@pytest.mark.parametrize(
    ("extra", "loc", "field"),
    [
        (
            {"outputs": {SECRET: {"data": [1, 2], "dtype": 5}}},
            ["body", "outputs", SECRET, "dtype"],
            "outputs",
        ),
        ({"outputs": {SECRET: {"values": [1]}}}, ["body", "outputs", SECRET], "outputs"),
        (
            {"outputs": {"output": [2, 1]}, "tolerance": {f"u.l.p{SECRET}": 1}},
            ["body", "tolerance", f"u.l.p{SECRET}"],
            "tolerance",
        ),
        (
            {"outputs": {"output": [2, 1]}, "tolerance": {"ulp": -1}},
            ["body", "tolerance", "ulp"],
            "tolerance.ulp",
        ),
    ],
    ids=["candidate-dtype", "candidate-shape", "made-up-tolerance-key", "service-tolerance-key"],
)
async def test_a_verify_refusal_logs_the_service_s_names_never_the_client_s_keys(
    client: httpx.AsyncClient,
    lines: list[logging.LogRecord],
    extra: dict[str, Any],
    loc: list[str],
    field: str,
) -> None:
    """A candidate's output name and a tolerance key the client made up are its own text: the
    refusal locates them (one element each, dots and all), the access line's ``field`` stops
    before them. A key of the service's (``ulp``) is logged."""
    body = {"data": [1, 2], "shift": 1, "axes": 0, **extra}
    response = await client.post("/verify/roll", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc
    line = lines[-1].__dict__
    assert (line["status"], line["fault"], line["field"]) == (422, "invalid_field", field)
    assert SECRET not in repr(line), line
