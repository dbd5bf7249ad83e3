"""Metrics, logs, request ids and readiness, in one process and across several workers."""

import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Histogram

from app.main import create_app
from app.metrics import FLUSH_AFTER, LATENCY, REQUESTS, RequestTally
from app.settings import Settings
from tests.support import LogCollector, launch_server, server_output, stop_server

pytestmark = pytest.mark.anyio


def sample(text: str, name: str, labels: str) -> float:
    match = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, flags=re.M)
    return float(match.group(1)) if match else 0.0


async def test_metrics_count_requests_bytes_latency_and_elements(client: httpx.AsyncClient) -> None:
    before = (await client.get("/metrics")).text
    request = {"data": [[1, 2, 3], [4, 5, 6]], "shift": 1, "axes": 0}
    for _ in range(3):
        assert (await client.post("/roll", json=request)).status_code == 200
    assert (
        await client.post("/roll", json={"data": [1], "shift": 1, "axes": 5})
    ).status_code == 422
    after = (await client.get("/metrics")).text

    def delta(name: str, labels: str) -> float:
        return sample(after, name, labels) - sample(before, name, labels)

    assert delta("tensor_ops_requests_total", 'route="/roll",status="200"') == 3
    assert delta("tensor_ops_requests_total", 'route="/roll",status="422"') == 1
    assert delta("tensor_ops_elements_total", 'op="roll"') == 18
    body_bytes = len(json.dumps(request, separators=(",", ":")))
    assert delta("tensor_ops_request_bytes_total", 'route="/roll"') >= 3 * body_bytes
    assert delta("tensor_ops_response_bytes_total", 'route="/roll"') > 0
    assert delta("tensor_ops_request_duration_seconds_count", 'route="/roll"') == 4
    assert "# TYPE tensor_ops_request_duration_seconds histogram" in after


async def test_unknown_paths_share_one_label(client: httpx.AsyncClient) -> None:
    await client.get("/no/such/path/123")
    text = (await client.get("/metrics")).text
    assert 'route="unmatched",status="404"' in text
    assert "/no/such/path" not in text


async def test_request_id_taken_or_made_and_returned(client: httpx.AsyncClient) -> None:
    response = await client.get("/health", headers={"x-request-id": "trace-42"})
    assert response.headers["x-request-id"] == "trace-42"
    made = (await client.get("/health")).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", made)
    hostile = (
        await client.get("/health", headers={"x-request-id": "bad id\twith spaces"})
    ).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", hostile)


async def test_one_log_record_per_request(client: httpx.AsyncClient) -> None:
    collector = LogCollector()
    logger = logging.getLogger("tensor_ops.access")
    logger.addHandler(collector)
    try:
        await client.post(
            "/gather",
            json={"data": [1, 2, 3], "indices": [2], "axis": 0},
            headers={"x-request-id": "abc"},
        )
    finally:
        logger.removeHandler(collector)
    records = collector.records
    assert len(records) == 1
    record = records[0].__dict__
    assert record["request_id"] == "abc"
    assert record["route"] == "/gather"
    assert record["status"] == 200
    assert record["bytes_in"] > 0
    assert record["bytes_out"] > 0
    assert record["duration_ms"] >= 0


async def test_readiness_turns_off_at_shutdown() -> None:
    app = create_app(Settings())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        assert (await client.get("/health/ready")).json() == {"status": "ready"}
        app.state.ready = False
        assert (await client.get("/health/ready")).status_code == 503
        assert (await client.get("/v2/health/ready")).status_code == 503
        assert (await client.get("/health")).status_code == 200


def test_json_logs_and_metrics_summed_over_two_workers() -> None:
    env = {"TENSOR_OPS_WORKERS": "2", "TENSOR_OPS_LOG_FORMAT": "json"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    url, process = launch_server(env, command=["-m", "app"])
    try:
        with httpx.Client(base_url=url) as client:
            for _ in range(40):  # new connections: both workers take some
                with httpx.Client(base_url=url) as fresh:
                    assert (
                        fresh.post(
                            "/roll", json={"data": [1, 2], "shift": 1, "axes": 0}
                        ).status_code
                        == 200
                    )
            # A worker moves its requests' figures into the shared metrics within FLUSH_AFTER
            # (0.25 s; app/metrics.py): the other worker's, read from this one, may come late.
            deadline = time.monotonic() + 10
            while True:
                text = client.get("/metrics").text
                counted = sample(text, "tensor_ops_requests_total", 'route="/roll",status="200"')
                if counted == 40 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        assert counted == 40
        assert sample(text, "tensor_ops_elements_total", 'op="roll"') == 80
    finally:
        process.terminate()
        process.wait(timeout=30)
        output = server_output(process)
        stop_server(process)
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    access = [
        line
        for line in lines
        if line.get("logger") == "tensor_ops.access" and line.get("route") == "/roll"
    ]
    assert len(access) == 40
    assert {"request_id", "route", "status", "duration_ms", "bytes_in", "bytes_out"} <= set(
        access[0]
    )
    assert len({line["request_id"] for line in access}) == 40
    assert "Traceback" not in output
    assert os.environ.get("PROMETHEUS_MULTIPROC_DIR") is None


def test_start_up_objects_are_frozen_out_of_the_collector() -> None:
    # In a fresh process, as a server starts: nothing frozen before the lifespan, its start-up
    # objects after (a full collection then skips them), and a collection still frees garbage.
    script = """
import asyncio, gc
from app.main import create_app
from app.settings import Settings

async def main():
    app = create_app(Settings(grpc_port=0))
    before = gc.get_freeze_count()
    async with app.router.lifespan_context(app):
        frozen = gc.get_freeze_count()
        garbage = []
        garbage.append(garbage)
        del garbage
        freed = gc.collect()
    print(before, frozen, freed)

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    before, frozen, freed = map(int, done.stdout.split())
    assert before == 0
    assert frozen > 50_000
    assert freed >= 1


def _samples_of(metric: Any, route: str) -> dict[tuple[str, str], float]:
    return {
        (item.name, item.labels.get("le", "")): item.value
        for family in metric.collect()
        for item in family.samples
        if item.labels.get("route") == route and not item.name.endswith("_created")
    }


def test_the_request_tally_counts_what_the_metrics_own_updates_count() -> None:
    """The tally's flush (one update per bucket, through prometheus-client's histogram parts)
    makes the same samples as an ``observe`` per request would: bounds, zero, past the last."""
    route = "/tally-test"
    bounds = LATENCY._upper_bounds[:-1]
    reference = Histogram(
        "reference_seconds", "", ["route"], buckets=bounds, registry=CollectorRegistry()
    )
    values = [0.0, 0.0005, 0.001, 0.0010001, 0.0025, 0.07, 1.0, 60.0, 61.0, 3600.0]
    tally = RequestTally()  # no event loop here: each request goes into the metrics at once
    before = _samples_of(LATENCY, route)
    assert before == {}
    for value in values:
        tally.add(route, "200", value, 10, 20, None)
        reference.labels(route).observe(value)
    ours = {
        (name.replace("tensor_ops_request_duration", "reference"), le): value
        for (name, le), value in _samples_of(LATENCY, route).items()
    }
    assert ours == _samples_of(reference, route)
    assert REQUESTS.labels(route, "200")._value.get() == len(values)


def test_the_request_tally_is_in_the_metrics_within_its_flush_time() -> None:
    route = "/tally-later"
    counter = REQUESTS.labels(route, "200")

    async def main() -> tuple[float, float]:
        tally = RequestTally()
        tally.add(route, "200", 0.001, 1, 1, None)
        tally.add(route, "200", 0.001, 1, 1, None)
        pending = counter._value.get()
        await asyncio.sleep(FLUSH_AFTER + 0.25)
        return pending, counter._value.get()

    pending, flushed = asyncio.run(main())
    assert (pending, flushed) == (0, 2)


def test_grpc_s_record_of_a_failed_send_marks_the_call_on_its_way_cancelled() -> None:
    """gRPC's error record of an answer's send that failed under a call already ended is left
    out, and the call whose answer was on its way in that task (``ANSWER_ON_ITS_WAY``) is
    marked CANCELLED for its line; any other record, and the same record with no call on its
    way, changes nothing."""
    import contextvars  # noqa: PLC0415

    from app.observability import ANSWER_ON_ITS_WAY, CallEndedByPeer, Observation  # noqa: PLC0415

    def record(name: str, message: str) -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, message, None, None)

    failed = "ExecuteBatchError raised in core by servicer method [/x/ModelInfer]"
    keeps = CallEndedByPeer()

    def in_a_call(name: str, message: str) -> tuple[bool, str | int]:
        seen = Observation("id-1", "OK")
        ANSWER_ON_ITS_WAY.set(seen)
        return keeps.filter(record(name, message)), seen.status

    assert contextvars.copy_context().run(in_a_call, "grpc._cython.cygrpc", failed) == (
        False,
        "CANCELLED",
    )
    assert contextvars.copy_context().run(in_a_call, "grpc._cython.cygrpc", "other") == (True, "OK")
    assert contextvars.copy_context().run(in_a_call, "somebody.else", failed) == (True, "OK")
    # No call on its way in this context: the record is left out all the same.
    assert contextvars.copy_context().run(keeps.filter, record("grpc.aio", failed)) is False
