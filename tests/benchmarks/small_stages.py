"""Where a small request's microseconds go: each stage timed in process, no sockets.

    .venv/bin/python tests/benchmarks/small_stages.py            # /roll, /gather, /v2, gRPC
    .venv/bin/python tests/benchmarks/small_stages.py --json stages.json
    .venv/bin/python tests/benchmarks/small_stages.py --tracing  # what tracing costs a /roll

Each request is driven through the ASGI app (or the gRPC handler) as the server would drive
it, with a receive that hands the whole body over at once and a send that keeps nothing; the
anchor is the echo app's ``POST /constant`` (``tests/benchmarks/echo_app.py``) driven the same
way. Each stage is wrapped by a timer (about 0.3 us of its own each); what no stage accounts
for is the observer, the framework, the request object, the pipeline's own steps and, for the anchor and
for FastAPI, the framework. The figures are per request, from the batch of the fewest
microseconds out of several (the least disturbed by others on a shared machine). It prints a
table and never asserts a time.

What the server itself adds (HTTP parsing, socket writes, the event loop) is the same for the
service and the anchor and is not here: ``bench.py``'s small-request section measures it all.

``--tracing`` measures a small ``POST /roll`` the same way (no stage timers) with tracing off,
on with every span sampled (a batch span processor, an exporter that drops them), and on with
none sampled, each in a fresh process, the processes taking turns round after round; beside
them the same request on the code of a commit before tracing existed (``--baseline``: by
default the parent of the commit that added ``app/tracing.py``), extracted with ``git archive``.
It also replays the checks a request makes of tracing when it is off, alone.
"""

import argparse
import asyncio
import collections
import functools
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc.aio
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TENSOR_OPS_GRPC_PORT", "0")

import app.grpc.exchange  # noqa: E402
import app.grpc.handlers  # noqa: E402
import app.grpc.service  # noqa: E402
import app.http.body  # noqa: E402
import app.http.observer  # noqa: E402
import app.http.op_routes  # noqa: E402
import app.http.responses  # noqa: E402
import app.http.v2_exchange  # noqa: E402
import app.observability  # noqa: E402
import app.pipeline.jobs  # noqa: E402
from app import tracing  # noqa: E402
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
    responses = app.http.responses
    wrap(responses, "read_body", "read body")
    wrap(responses, "BuffersResponse", "response object")
    wrap(app.observability, "record", "request id, metrics, log line")
    for module in (app.http.op_routes, app.http.v2_exchange, app.grpc.exchange):
        wrap(module, "make_job", "spec checks, output sized (make_job)")
    wrap(app.pipeline.jobs.Job, "output", "kernel")
    for exchange in (
        app.http.op_routes.JsonExchange,
        app.http.v2_exchange.V2Exchange,
        app.grpc.exchange.GrpcExchange,
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
    handle = app.grpc.handlers.observed("ModelInfer", service.model_infer)

    class Context:
        """What grpc.aio's servicer context gives the handler. ModelInfer is served as a
        client-streaming method that reads its one message itself (``context.read()``), so the
        message comes from here, then EOF; the callbacks run once the call has ended, as
        grpc.aio runs them (the answer's reservation is released there)."""

        def __init__(self) -> None:
            self.pending: bytes | None = None
            self.callbacks: list[Callable[[Any], None]] = []

        def invocation_metadata(self) -> tuple[()]:
            return ()

        def set_trailing_metadata(self, tags: Any) -> None:
            pass

        def add_done_callback(self, callback: Callable[[Any], None]) -> None:
            self.callbacks.append(callback)

        async def read(self) -> Any:
            pending, self.pending = self.pending, None
            return grpc.aio.EOF if pending is None else pending

        async def abort(self, *details: Any) -> None:
            raise AssertionError(details)

    context = Context()
    as_grpc: Any = context  # a stand-in for grpc.aio.ServicerContext
    checked = False

    async def call() -> None:
        nonlocal checked
        context.pending = message
        try:
            # The message argument is grpc.aio's request iterator: the handler ignores it.
            answer = await handle(message, as_grpc)
            if not checked:  # the first answer only: parsing it is no stage of the server's
                output = pb.ModelInferResponse.FromString(answer).raw_output_contents[0]
                rolled = np.frombuffer(output, "<i8").tolist()
                if rolled != [3, 1, 2]:
                    raise AssertionError(f"gRPC roll answered {rolled}")
                checked = True
        finally:
            callbacks, context.callbacks = context.callbacks, []
            for callback in callbacks:
                callback(context)

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
    rows.append(("the rest: observer, framework, pipeline steps", own["total"] - accounted))
    rows.append(("total", own["total"]))
    print(f"\n{name}")
    for stage, seconds in rows:
        print(f"  {stage:48s} {seconds * 1e6:7.1f} us")
    return rows


#: Measures a small /roll in a fresh process, in the tree it runs in (this one, or a commit's):
#: argv is the mode (off, on, unsampled), batches and batch size; prints the microseconds of
#: the best batch's requests as JSON. Only the app's own names are used: any tree has them.
TRACING_DRIVER = """
import asyncio, json, logging, os, sys, time

mode, batches, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for name in [name for name in os.environ if name.startswith("OTEL_")]:
    del os.environ[name]
os.environ["TENSOR_OPS_GRPC_PORT"] = "0"
if mode != "off":
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    class Dropped(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=ALWAYS_ON if mode == "on" else ALWAYS_OFF)
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    from app import tracing

    tracing.install(provider)
import app
from app.main import create_app
from app.settings import Settings

service = create_app(Settings())
for handler in logging.getLogger("tensor_ops").handlers:
    handler.setStream(open(os.devnull, "w"))
body = b'{"data":[1,2,3],"shift":1,"axes":0}'
headers = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
           (b"content-length", str(len(body)).encode())]


async def call():
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/roll", "raw_path": b"/roll",
             "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {}}
    given = False
    status = 0

    async def receive():
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await service(scope, receive, send)
    assert status == 200, status


async def measure():
    for _ in range(300):
        await call()
    best = float("inf")
    for _ in range(batches):
        started = time.perf_counter()
        for _ in range(size):
            await call()
        best = min(best, (time.perf_counter() - started) / size)
    return best


print(json.dumps({"us": asyncio.run(measure()) * 1e6, "app": app.__file__}))
"""
TRACING_MODES = {
    "tracing off": "off",
    "tracing on, not sampled": "unsampled",
    "tracing on, every span sampled and batched": "on",
}


def baseline_commit() -> str:
    """The parent of the commit that added app/tracing.py."""
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "app/tracing.py"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not added:
        raise SystemExit("no commit adds app/tracing.py: give --baseline")
    return f"{added[-1]}^"


def extract(commit: str, folder: Path) -> str:
    """The tree of ``commit`` in ``folder``; returns its short hash."""
    short = subprocess.run(
        ["git", "rev-parse", "--short", commit], cwd=ROOT, capture_output=True, text=True,
        check=True,
    ).stdout.strip()  # fmt: skip
    archive = subprocess.run(
        ["git", "archive", commit], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return short


def roll_in(tree: Path, mode: str, batches: int, size: int) -> float:
    """A small /roll's microseconds, measured in a fresh process on ``tree``'s code."""
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'client'}"}
    done = subprocess.run(
        [sys.executable, "-c", TRACING_DRIVER, mode, str(batches), str(size)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"the measurement failed in {tree}:\n{done.stderr}")
    result = json.loads(done.stdout.splitlines()[-1])
    if not str(result["app"]).startswith(str(tree)):
        raise SystemExit(f"{tree}'s app was not the one measured: {result['app']}")
    return float(result["us"])


def tracing_checks_when_off() -> float:
    """The seconds a request spends in tracing's code when it is off: the same tests, replayed
    (the pipeline's, the HTTP answer's and the log line's), less the replay's own call."""

    def checks() -> None:
        # The pipeline's: its stages, then one at each of its four steps (as if none failed).
        stages = None if tracing.TRACER is None else tracing.stages()
        if stages is not None:
            stages.begin("read")
        if stages is not None:
            stages.begin("decode")
        if stages is not None:
            stages.begin("encode")
        if stages is not None:
            stages.end()
        # The HTTP answer's class, and the log line's ids.
        if tracing.TRACER is not None:
            pass
        if tracing.TRACER is not None:
            pass

    def nothing() -> None:
        pass

    number = 200_000
    calls = min(timeit.repeat(nothing, number=number, repeat=7))
    return max(0.0, min(timeit.repeat(checks, number=number, repeat=7)) - calls) / number


def tracing_report(arguments: argparse.Namespace) -> dict[str, float]:
    rows: dict[str, list[float]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="tensor-ops-baseline-") as folder:
        commit = arguments.baseline or baseline_commit()
        short = extract(commit, Path(folder))
        trees = {f"no tracing code (commit {short})": (Path(folder), "off")}
        trees |= {name: (ROOT, mode) for name, mode in TRACING_MODES.items()}
        for turn in range(arguments.rounds):
            for name, (tree, mode) in trees.items():
                rows[name].append(roll_in(tree, mode, arguments.batches, arguments.size))
            print(f"round {turn + 1} of {arguments.rounds} done", file=sys.stderr)
    best = {name: min(values) for name, values in rows.items()}
    off = best["tracing off"]
    checks = tracing_checks_when_off() * 1e6
    print(
        f"\nPOST /roll (a 3-element int64 tensor) in process, per request: the best batch of "
        f"{arguments.size} over {arguments.batches} batches, best of {arguments.rounds} "
        "processes taking turns"
    )
    print(f"  {'':52s} {'us':>8s} {'x off':>7s}")
    for name, value in best.items():
        print(f"  {name:52s} {value:8.1f} {value / off:7.3f}")
    print(
        f"  {'the tests tracing adds when off, replayed alone':52s} {checks:8.3f} {checks / off:7.4f}"
    )
    spread = {name: (max(values) - min(values)) / min(values) for name, values in rows.items()}
    print(
        "  spread of one mode over its rounds (max/min - 1): "
        + ", ".join(f"{value:.1%}" for value in spread.values())
    )
    return best | {"tracing checks when off": checks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--size", type=int, default=300)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tracing", action="store_true", help="what tracing costs a /roll")
    parser.add_argument("--rounds", type=int, default=5, help="with --tracing: turns per mode")
    parser.add_argument("--baseline", help="with --tracing: a commit without tracing")
    arguments = parser.parse_args()
    if arguments.tracing:
        figures = tracing_report(arguments)
        if arguments.json:
            arguments.json.write_text(json.dumps(figures, indent=2))
        return
    instrument()
    service = create_app(Settings())
    for handler in logging.getLogger("tensor_ops").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(open(os.devnull, "w"))  # noqa: SIM115  # for the whole run
    pipeline = service.state.pipeline
    grpc_service = app.grpc.service.InferenceService(pipeline, lambda: True)
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
