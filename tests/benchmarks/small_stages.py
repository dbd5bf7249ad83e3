"""Where a small request's microseconds go: each stage timed in process, no sockets.

    .venv/bin/python tests/benchmarks/small_stages.py            # /roll, /gather, /v2, gRPC
    .venv/bin/python tests/benchmarks/small_stages.py --json stages.json

Each request is driven through the ASGI app (or the gRPC handler) as the server would drive
it, with a receive that hands the whole body over at once and a send that keeps nothing; the
anchor is the echo app's ``POST /constant`` (``tests/benchmarks/echo_app.py``) driven the same
way. Each stage is wrapped by a timer (about 0.3 us of its own each); what no stage accounts
for is the front door, the request object, the pipeline's own steps and, for the anchor and
for FastAPI, the framework. The figures are per request, from the batch of the fewest
microseconds out of several (the least disturbed by others on a shared machine). It prints a
table and never asserts a time.

What the server itself adds (HTTP parsing, socket writes, the event loop) is the same for the
service and the anchor and is not here: ``bench.py``'s small-request section measures it all.
"""

import argparse
import asyncio
import collections
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TENSOR_OPS_GRPC_PORT", "0")

import app.front  # noqa: E402
import app.observability  # noqa: E402
import app.pipeline.body  # noqa: E402
import app.pipeline.jobs  # noqa: E402
import app.pipeline.responses  # noqa: E402
import app.transports.grpc  # noqa: E402
import app.transports.http  # noqa: E402
import app.transports.v2  # noqa: E402
from app.main import create_app  # noqa: E402
from app.settings import Settings  # noqa: E402
from tensor_ops_wire.grpc_v2 import grpc_predict_v2_pb2 as pb  # noqa: E402
from tests.benchmarks.bench import SMALL_CASES  # noqa: E402
from tests.benchmarks.echo_app import app as echo_app  # noqa: E402

#: Stage name -> seconds, summed over a batch.
SPENT: collections.defaultdict[str, float] = collections.defaultdict(float)
STAGES = [
    "read body",
    "envelope (prepare)",
    "decode and check inputs",
    "spec checks, output sized (make_job)",
    "kernel",
    "encode the answer",
    "response object",
    "request id, metrics, log line",
]


def timed(stage: str, function: Callable[..., Any]) -> Callable[..., Any]:
    if asyncio.iscoroutinefunction(function):

        @functools.wraps(function)
        async def waited(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await function(*args, **kwargs)
            finally:
                SPENT[stage] += time.perf_counter() - started

        return waited

    @functools.wraps(function)
    def called(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            SPENT[stage] += time.perf_counter() - started

    return called


def wrap(owner: Any, name: str, stage: str) -> None:
    setattr(owner, name, timed(stage, getattr(owner, name)))


def instrument() -> None:
    """Wrap each stage; nested stages (the kernel inside encode) are subtracted in report."""
    responses = app.pipeline.responses
    wrap(responses, "read_body", "read body")
    wrap(responses, "BuffersResponse", "response object")
    wrap(app.front, "record", "request id, metrics, log line")
    wrap(app.transports.grpc, "record", "request id, metrics, log line")
    for module in (app.transports.http, app.transports.v2, app.transports.grpc):
        wrap(module, "make_job", "spec checks, output sized (make_job)")
    wrap(app.pipeline.jobs.Job, "output", "kernel")
    for exchange in (
        app.transports.http.JsonExchange,
        app.transports.v2.V2Exchange,
        app.transports.grpc.GrpcExchange,
    ):
        wrap(exchange, "prepare", "envelope (prepare)")
        wrap(exchange, "decode", "decode and check inputs")
        wrap(exchange, "encode", "encode the answer")


def asgi_call(asgi: Any, path: str, body: bytes) -> Callable[[], Awaitable[None]]:
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]

    async def call() -> None:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
            "state": {},
        }
        given = False

        async def receive() -> dict[str, Any]:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        status = 0

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await asgi(scope, receive, send)
        if status != 200:
            raise AssertionError(f"{path}: {status}")

    return call


def grpc_call(service: Any) -> Callable[[], Awaitable[None]]:
    request = pb.ModelInferRequest(model_name="roll")
    for name, datatype, array in (
        ("data", "INT64", np.array([1, 2, 3], np.int64)),
        ("shift", "INT64", np.array([1], np.int64)),
        ("axes", "INT64", np.array([0], np.int64)),
    ):
        tensor = request.inputs.add(name=name, datatype=datatype, shape=array.shape)
        del tensor
        request.raw_input_contents.append(array.tobytes())
    message = request.SerializeToString()
    handle = app.transports.grpc.observed("ModelInfer", service.model_infer)

    class Context:
        def invocation_metadata(self) -> tuple[()]:
            return ()

        def set_trailing_metadata(self, tags: Any) -> None:
            pass

        def add_done_callback(self, callback: Any) -> None:
            pass

        async def abort(self, *details: Any) -> None:
            raise AssertionError(details)

    context: Any = Context()

    async def call() -> None:
        await handle(message, context)

    return call


async def measure(call: Callable[[], Awaitable[None]], batches: int, size: int) -> dict[str, float]:
    for _ in range(200):
        await call()
    best: dict[str, float] = {}
    for _ in range(batches):
        SPENT.clear()
        started = time.perf_counter()
        for _ in range(size):
            await call()
        total = time.perf_counter() - started
        if not best or total < best["total"] * size:
            best = {stage: spent / size for stage, spent in SPENT.items()}
            best["total"] = total / size
    return best


def report(name: str, figures: dict[str, float]) -> list[tuple[str, float]]:
    kernel = figures.get("kernel", 0.0)
    making = figures.get("spec checks, output sized (make_job)", 0.0)
    own = dict(figures)
    # The kernel runs inside encode, make_job inside decode: each stage counted once.
    if "encode the answer" in own:
        own["encode the answer"] -= kernel
    if "decode and check inputs" in own:
        own["decode and check inputs"] -= making
    rows = [(stage, own[stage]) for stage in STAGES if stage in own]
    accounted = sum(value for _, value in rows)
    rows.append(("the rest: front door, framework, pipeline steps", own["total"] - accounted))
    rows.append(("total", own["total"]))
    print(f"\n{name}")
    for stage, seconds in rows:
        print(f"  {stage:48s} {seconds * 1e6:7.1f} us")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--size", type=int, default=300)
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()
    instrument()
    service = create_app(Settings())
    for handler in logging.getLogger("tensor_ops").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(open(os.devnull, "w"))  # noqa: SIM115  # for the whole run
    pipeline = service.state.pipeline
    grpc_service = app.transports.grpc.InferenceService(pipeline, lambda: True)
    calls = {
        "echo app, POST /constant (the anchor)": asgi_call(
            echo_app, "/constant", SMALL_CASES["roll"][1]
        ),
        **{
            f"{name} ({path})": asgi_call(service, path, body)
            for name, (path, body, _) in SMALL_CASES.items()
        },
        "gRPC ModelInfer, roll (handler only: grpc.aio's own layers not included)": grpc_call(
            grpc_service
        ),
    }
    results: dict[str, Any] = {}

    async def run() -> None:
        for name, call in calls.items():
            figures = await measure(call, arguments.batches, arguments.size)
            results[name] = {stage: seconds * 1e6 for stage, seconds in report(name, figures)}

    asyncio.run(run())
    if arguments.json:
        arguments.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
